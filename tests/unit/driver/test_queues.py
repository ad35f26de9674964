"""Several queues in one stream (spark_sqs/driver/queues.py, and the acknowledgement's deletes by
queue): option parsing, spreading receivers by backlog, plans that
record each receiver's queue, and deletes/visibility changes sent to each message's own queue."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from spark_sqs.acknowledgement.acknowledger import Acknowledger
from spark_sqs.acknowledgement.assigned import acknowledge_assigned
from spark_sqs.driver.coordinator import Coordinator
from spark_sqs.driver.heartbeat import Heartbeat
from spark_sqs.driver.planning import new_plan, partitions_of
from spark_sqs.driver.queues import assign_queues, receivers_per_queue, with_queues
from spark_sqs.errors import InvalidOptionError, JournalError
from spark_sqs.journal import RECEIVED_AT, AckAssignment, BatchPlan, Journal, ReceiverPlan
from spark_sqs.options import SqsOptions
from spark_sqs.schema import messages_to_table
from spark_sqs.sink.options import SinkOptions
from spark_sqs.sqs.batching import BatchCaller, Entry
from tests.factories import QUEUE_URL, make_options, sqs_message
from tests.fakes import FakeSqs

BASE = "https://sqs.us-east-1.amazonaws.com/123456789012/"
OTHER = BASE + "payments"
THIRD = BASE + "refunds"


def _parse(**raw: str) -> SqsOptions:
    return SqsOptions.parse({"journalLocation": "/tmp/unused", **raw}, env={})


# -- options -------------------------------------------------------------------------------------


def test_a_comma_separated_queue_url_names_every_queue_and_the_first_is_queue_url() -> None:
    options = _parse(queueUrl=f" {QUEUE_URL} , {OTHER}")
    assert options.queue_urls == (QUEUE_URL, OTHER)
    assert options.queue_url == QUEUE_URL
    assert options.queue_count == 2
    assert options.region == "us-east-1"
    assert not options.is_fifo


def test_a_single_queue_parses_as_before() -> None:
    options = _parse(queueUrl=QUEUE_URL)
    assert options.queue_urls == (QUEUE_URL,)
    assert options.queue_count == 1


def test_queue_name_accepts_a_list_too() -> None:
    options = _parse(queueName="orders.fifo,payments.fifo", region="eu-west-1")
    assert options.queue_names == ("orders.fifo", "payments.fifo")
    assert options.is_fifo


@pytest.mark.parametrize(
    "key, value",
    [
        ("queueUrl", f"{QUEUE_URL},,{OTHER}"),
        ("queueUrl", f"{QUEUE_URL},"),
        ("queueUrl", f",{QUEUE_URL}"),
        ("queueName", "orders, ,payments"),
    ],
)
def test_an_empty_entry_is_refused_naming_the_option(key: str, value: str) -> None:
    with pytest.raises(InvalidOptionError, match=f"'{key}'.*empty entry.*Fix: remove the extra"):
        _parse(**{key: value}, region="us-east-1")


@pytest.mark.parametrize(
    "key, value",
    [
        ("queueUrl", f"{QUEUE_URL},{OTHER},{QUEUE_URL}"),
        ("queueUrl", f"{QUEUE_URL},{QUEUE_URL}/"),
        ("queueName", "orders,orders"),
    ],
)
def test_a_queue_named_twice_is_refused(key: str, value: str) -> None:
    with pytest.raises(InvalidOptionError, match=f"'{key}'.*twice.*Fix: name each queue once"):
        _parse(**{key: value}, region="us-east-1")


@pytest.mark.parametrize(
    "key, value",
    [
        ("queueUrl", f"{QUEUE_URL},{BASE}payments.fifo"),
        ("queueName", "orders.fifo,payments"),
    ],
)
def test_fifo_and_standard_queues_together_are_refused_naming_them(key: str, value: str) -> None:
    with pytest.raises(InvalidOptionError) as info:
        _parse(**{key: value}, region="us-east-1")
    message = str(info.value)
    assert f"'{key}'" in message and "mixes FIFO queues" in message and "Fix:" in message
    assert "payments" in message and "orders" in message


def test_queues_of_different_regions_are_refused() -> None:
    with pytest.raises(InvalidOptionError, match="different regions.*eu-west-1"):
        _parse(queueUrl=f"{QUEUE_URL},https://sqs.eu-west-1.amazonaws.com/123456789012/x")


def test_each_entry_must_be_a_queue_url() -> None:
    with pytest.raises(InvalidOptionError, match="'queueUrl' = 'orders': is not a queue URL"):
        _parse(queueUrl=f"{QUEUE_URL},orders")


def test_the_sink_refuses_several_queues() -> None:
    with pytest.raises(InvalidOptionError, match="SQS sink option 'queueUrl'.*several queues"):
        SinkOptions.parse({"queueUrl": f"{QUEUE_URL},{OTHER}"}, env={})


# -- spreading receivers ---------------------------------------------------------------------------


def test_receivers_follow_the_backlog() -> None:
    assert receivers_per_queue(8, {QUEUE_URL: 300, OTHER: 100}) == {QUEUE_URL: 6, OTHER: 2}


def test_a_queue_with_no_backlog_gets_no_receiver() -> None:
    assert receivers_per_queue(4, {QUEUE_URL: 0, OTHER: 50, THIRD: 0}) == {
        QUEUE_URL: 0,
        OTHER: 4,
        THIRD: 0,
    }


def test_a_queue_with_a_small_backlog_still_gets_one_receiver() -> None:
    assert receivers_per_queue(4, {QUEUE_URL: 100_000, OTHER: 1}) == {QUEUE_URL: 3, OTHER: 1}


def test_with_fewer_receivers_than_busy_queues_the_largest_backlogs_go_first_and_rotate() -> None:
    backlog = {QUEUE_URL: 5, OTHER: 5, THIRD: 9}
    assert receivers_per_queue(1, backlog) == {QUEUE_URL: 0, OTHER: 0, THIRD: 1}
    # Equal backlogs take turns, batch by batch.
    firsts = {
        q
        for rotate in range(4)
        for q, n in receivers_per_queue(2, backlog, rotate=rotate).items()
        if n and q != THIRD
    }
    assert firsts == {QUEUE_URL, OTHER}


def test_with_no_backlog_anywhere_the_receivers_are_spread_evenly() -> None:
    assert receivers_per_queue(5, {QUEUE_URL: 0, OTHER: 0}) == {QUEUE_URL: 3, OTHER: 2}
    assert receivers_per_queue(5, {QUEUE_URL: 0, OTHER: 0}, rotate=1) == {QUEUE_URL: 2, OTHER: 3}


def test_the_split_holds_its_promises_over_many_backlogs() -> None:
    values = (0, 1, 7, 99, 100, 5000)
    for receivers in (1, 2, 3, 4, 5, 8, 13):
        for counts in itertools.product(values, repeat=4):
            backlog = dict(zip((QUEUE_URL, OTHER, THIRD, BASE + "fourth"), counts, strict=True))
            out = receivers_per_queue(receivers, backlog, rotate=receivers)
            assert sum(out.values()) == receivers
            busy = [q for q, n in backlog.items() if n > 0]
            if busy:
                assert all(out[q] == 0 for q in backlog if backlog[q] == 0), (backlog, out)
                if receivers >= len(busy):
                    assert all(out[q] >= 1 for q in busy), (receivers, backlog, out)
                # A larger backlog never gets fewer receivers than a smaller one.
                for a, b in itertools.permutations(busy, 2):
                    if backlog[a] > backlog[b]:
                        assert out[a] >= out[b], (receivers, backlog, out)


def test_assign_queues_maps_receivers_in_order() -> None:
    assert assign_queues([0, 1, 2], {QUEUE_URL: 10, OTHER: 20}) == {
        0: QUEUE_URL,
        1: OTHER,
        2: OTHER,
    }


# -- plans ----------------------------------------------------------------------------------------


def test_a_plan_records_each_receivers_queue_and_survives_json() -> None:
    plan = new_plan(7, 100, 4, journaled=[6], adopted=[(3, 0)])
    plan = with_queues(plan, {QUEUE_URL: 10, OTHER: 30}, rotate=7)
    queues = {r.receiver: r.queue for r in plan.receivers}
    assert sorted(q for r, q in queues.items() if r < 4) == [QUEUE_URL, OTHER, OTHER, OTHER]
    # No share of new messages: they name the first queue (they receive nothing).
    assert queues[6] == QUEUE_URL and queues[10000] == QUEUE_URL
    assert BatchPlan.from_json(plan.to_json()) == plan
    partitions = partitions_of(plan, "https://unused", make_options())
    assert {p.receiver: p.queue_url for p in partitions} == queues


def test_a_plan_written_before_queues_were_recorded_uses_the_journals_queue() -> None:
    legacy = b'{"batch": 3, "receivers": [{"receiver": 0, "limit": 5, "adoptFrom": null}]}'
    plan = BatchPlan.from_json(legacy)
    assert plan.receivers == (ReceiverPlan(0, 5),)
    assert [p.queue_url for p in partitions_of(plan, OTHER, make_options())] == [OTHER]
    assert b"queueUrl" not in plan.to_json()


def test_the_journal_accepts_added_and_removed_queues_but_not_a_stranger(tmp_path: Path) -> None:
    location = str(tmp_path / "journal")
    journal = Journal(location, make_options(location))
    assert journal.meta.check_owner(QUEUE_URL, OTHER) == QUEUE_URL
    assert journal.meta.check_owner(OTHER) == QUEUE_URL  # QUEUE_URL removed
    assert journal.meta.check_owner(OTHER, THIRD) == QUEUE_URL  # THIRD added
    assert journal.meta.check_owner(THIRD) == QUEUE_URL
    with pytest.raises(JournalError, match="belongs to queue .*Fix: give each query its own"):
        journal.meta.check_owner(BASE + "stranger")


# -- acknowledgement and heartbeat, per queue ----------------------------------------------------


def _two_queue_entry(journal: Journal, batch: int, receiver: int, received_at: float) -> None:
    table = messages_to_table(
        [sqs_message(n) for n in range(0, 12)], QUEUE_URL
    ).replace_schema_metadata({RECEIVED_AT: repr(received_at)})
    journal.entries.write(batch, receiver, table)
    other = messages_to_table(
        [sqs_message(n) for n in range(100, 105)], OTHER
    ).replace_schema_metadata({RECEIVED_AT: repr(received_at)})
    journal.entries.write(batch, receiver + 1, other)


def _calls_by_queue(sqs: FakeSqs, action: str) -> dict[str, set[str]]:
    """Receipt handles each queue got in ``action`` calls."""
    out: dict[str, set[str]] = {}
    for (name, entries), queue in zip(sqs.batch_calls, sqs.batch_queues, strict=True):
        if name == action:
            out.setdefault(queue, set()).update(e["ReceiptHandle"] for e in entries)
    return out


def _handles(numbers: range) -> set[str]:
    return {sqs_message(n)["ReceiptHandle"] for n in numbers}


def test_batch_caller_sends_each_entry_to_its_own_queue() -> None:
    sqs = FakeSqs(queue_urls=(QUEUE_URL, OTHER))
    entries = [Entry(f"a{n}", f"ha{n}", QUEUE_URL) for n in range(11)]
    entries += [Entry(f"b{n}", f"hb{n}", OTHER) for n in range(3)]
    entries += [Entry("c", "hc")]  # no queue: the caller's
    result = BatchCaller(sqs, OTHER, parallelism=4).delete(entries)
    assert len(result.succeeded) == 15
    by_queue = _calls_by_queue(sqs, "delete")
    assert by_queue[QUEUE_URL] == {f"ha{n}" for n in range(11)}
    assert by_queue[OTHER] == {"hb0", "hb1", "hb2", "hc"}
    assert all(len(e) <= 10 for _, e in sqs.batch_calls)


def test_a_receiver_deletes_assigned_entries_on_the_queues_they_came_from(tmp_path: Path) -> None:
    location = str(tmp_path / "journal")
    options = make_options(location)
    journal = Journal(location, options)
    _two_queue_entry(journal, 1, 0, received_at=1000.0)
    sqs = FakeSqs(queue_urls=(QUEUE_URL, OTHER))
    assigned = [AckAssignment(1, 0, 0, 5000.0), AckAssignment(1, 1, 0, 5000.0)]
    # The receiver's own queue (THIRD, today's options) is never named for these deletes.
    entries = acknowledge_assigned(
        journal,
        sqs,
        THIRD,
        2,
        0,
        assigned,
    )
    assert sum(e.deleted for e in entries) == 17
    assert _calls_by_queue(sqs, "delete") == {
        QUEUE_URL: _handles(range(12)),
        OTHER: _handles(range(100, 105)),
    }


def test_the_driver_deletes_a_batch_on_the_queues_of_its_rows(tmp_path: Path) -> None:
    location = str(tmp_path / "journal")
    journal = Journal(location, make_options(location))
    _two_queue_entry(journal, 1, 0, received_at=1000.0)
    sqs = FakeSqs(queue_urls=(QUEUE_URL, OTHER))
    acked: list[int] = []
    acknowledger = Acknowledger(
        journal,
        BatchCaller(sqs, THIRD),
        delete=True,
        on_acked=lambda b, _: acked.append(b),
        visibility_timeout=30,
        dedupe_window=60,
        wall_clock=lambda: 1010.0,
    )
    acknowledger.start(0, {1: (0, 1)})
    stats = acknowledger.acknowledge_through(1)
    assert acked == [1] and stats.deleted == 17
    assert _calls_by_queue(sqs, "delete") == {
        QUEUE_URL: _handles(range(12)),
        OTHER: _handles(range(100, 105)),
    }


def test_the_heartbeat_extends_each_message_on_its_own_queue(tmp_path: Path) -> None:
    location = str(tmp_path / "journal")
    journal = Journal(location, make_options(location))
    _two_queue_entry(journal, 1, 0, received_at=975.0)
    sqs = FakeSqs(queue_urls=(QUEUE_URL, OTHER))
    heartbeat = Heartbeat(
        journal,
        BatchCaller(sqs, THIRD),
        visibility_timeout=30,
        interval=5,
        clock=lambda: 50.0,
    )
    heartbeat.watch(1, receivers=(0, 1))  # inherited: extended at the first tick
    heartbeat.tick()
    assert heartbeat.stats.extended == 17
    assert _calls_by_queue(sqs, "visibility") == {
        QUEUE_URL: _handles(range(12)),
        OTHER: _handles(range(100, 105)),
    }


# -- the driver ----------------------------------------------------------------------------------


class _BacklogSqs(FakeSqs):
    def __init__(self, visible: dict[str, int]) -> None:
        super().__init__(queue_urls=tuple(visible))
        self.visible = visible

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        return {
            "Attributes": {
                "ApproximateNumberOfMessages": str(self.visible[QueueUrl]),
                "ApproximateNumberOfMessagesNotVisible": "2",
                "ApproximateNumberOfMessagesDelayed": "0",
            }
        }


def test_the_driver_plans_receivers_by_backlog_and_reports_each_queue(tmp_path: Path) -> None:
    location = str(tmp_path / "journal")
    options = SqsOptions.parse(
        {
            "queueUrl": f"{QUEUE_URL},{OTHER},{THIRD}",
            "journalLocation": location,
            "numPartitions": "4",
        },
        env={},
    )
    sqs = _BacklogSqs({QUEUE_URL: 30, OTHER: 10, THIRD: 0})
    state = Coordinator(
        options,
        sqs,
        QUEUE_URL,
        Journal(location, options),
        queue_urls=list(options.queue_urls),
        run_heartbeat=False,
        # A receiver per visible message: the four receivers are spread by backlog.
        messages_per_receiver=1,
    )
    try:
        end = state.latest_offset({"batch": 0})
        partitions = state.plan({"batch": 0}, end)
        queues = sorted(p.queue_url for p in partitions)
        assert queues == sorted([QUEUE_URL, QUEUE_URL, QUEUE_URL, OTHER])
        report = state.report()
        assert report["visibleMessages"] == 40 and report["inFlightMessages"] == 6
        assert report["queues"][OTHER]["visibleMessages"] == 10
        assert report["queues"][THIRD] == {
            "visibleMessages": 0,
            "inFlightMessages": 2,
            "delayedMessages": 0,
        }
    finally:
        state.close()
