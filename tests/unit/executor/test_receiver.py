"""Receivers: the ReceiveMessage loop, and receive-journal-yield vs. replay in read_partition."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber

from spark_sqs.driver.planning import ReceiverPartition
from spark_sqs.errors import (
    JournalError,
    QueueNotFoundError,
    SqsAccessError,
    SqsSourceError,
    TransientSqsError,
)
from spark_sqs.executor.envelopes import message_bytes
from spark_sqs.executor.receiver import read_partition
from spark_sqs.executor.receiving import (
    CAUGHT_UP_AFTER,
    RECEIVE_BATCH,
    VISIBLE_MARGIN,
    WAITED_SECONDS,
    receive_messages,
)
from spark_sqs.journal import (
    BYTES,
    ID_COLUMNS,
    STOPPED_BY,
    BatchPlan,
    Journal,
    JournalState,
    ReceiverPlan,
)
from spark_sqs.journal.entries import Entries
from spark_sqs.schema import arrow_output_schema, messages_to_table
from tests.factories import QUEUE_URL, make_options, partition, sqs_message
from tests.fakes import Clock, FakeSqs, client_error
from tests.helpers import collect

# -- receive_messages --------------------------------------------------------------------------


def test_stops_at_max_messages_never_asking_for_more_than_remaining() -> None:
    sqs = FakeSqs(available=100)
    messages, stats = receive_messages(sqs, partition(25))

    assert len(messages) == 25
    assert [c["MaxNumberOfMessages"] for c in sqs.receive_calls] == [10, 10, 5]
    assert stats.stopped_by == "limit"
    assert (stats.calls, stats.received) == (3, 25)
    assert len(sqs.queue) == 75


def test_asks_for_the_remainder_when_sqs_returns_fewer_than_asked() -> None:
    sqs = FakeSqs(
        script=[[sqs_message(n) for n in range(3)], [sqs_message(n) for n in range(3, 10)]]
    )
    messages, stats = receive_messages(sqs, partition(12))

    assert [c["MaxNumberOfMessages"] for c in sqs.receive_calls] == [10, 9, 2]
    assert len(messages) == 10
    assert stats.stopped_by == "empty receive"


@pytest.mark.parametrize("limit", [1, 9, 10, 11, 20, 95])
def test_never_more_than_ten_per_call(limit: int) -> None:
    sqs = FakeSqs(available=1000)
    messages, _ = receive_messages(sqs, partition(limit))
    assert len(messages) == limit
    assert all(c["MaxNumberOfMessages"] <= RECEIVE_BATCH for c in sqs.receive_calls)
    assert sum(c["MaxNumberOfMessages"] for c in sqs.receive_calls) == limit


def test_stops_on_an_empty_receive() -> None:
    sqs = FakeSqs(available=7)
    messages, stats = receive_messages(sqs, partition(100))

    assert [m["Body"] for m in messages] == [f'{{"n": {n}}}' for n in range(7)]
    assert len(sqs.receive_calls) == 2
    assert stats.stopped_by == "empty receive"
    assert stats.received == 7


def test_stops_once_caught_up_with_a_trickle() -> None:
    # A steady trickle: every long poll returns one or two messages, never an empty receive.
    trickle = [[sqs_message(n)] for n in range(50)]
    sqs = FakeSqs(script=[[sqs_message(100 + n) for n in range(10)], *trickle])
    messages, stats = receive_messages(sqs, partition(1000))

    assert stats.stopped_by == "caught up"
    assert len(sqs.receive_calls) == 1 + CAUGHT_UP_AFTER
    assert len(messages) == 10 + CAUGHT_UP_AFTER


def test_a_full_receive_resets_the_short_count() -> None:
    full = [sqs_message(100 + n) for n in range(10)]
    short = [sqs_message(200)]
    again = [sqs_message(300 + n) for n in range(10)]
    sqs = FakeSqs(script=[short, short[:], full, [sqs_message(201)], [sqs_message(202)], again, []])
    _, stats = receive_messages(sqs, partition(1000))

    # Never three short receives in a row: the loop runs until the empty receive.
    assert stats.stopped_by == "empty receive"
    assert len(sqs.receive_calls) == 7


def test_the_last_call_asking_for_the_remainder_is_not_short() -> None:
    sqs = FakeSqs(available=100)
    _, stats = receive_messages(sqs, partition(23))
    assert stats.stopped_by == "limit"


def test_an_empty_queue_costs_one_call() -> None:
    sqs = FakeSqs(available=0)
    messages, stats = receive_messages(sqs, partition(100))
    assert messages == []
    assert len(sqs.receive_calls) == 1
    assert stats.stopped_by == "empty receive"


def slow_sqs(clock: Clock, seconds_per_call: float) -> FakeSqs:
    def advance() -> None:
        clock.now += seconds_per_call

    sqs = FakeSqs(available=1000, on_receive=advance)
    return sqs


def test_stops_on_the_time_budget() -> None:
    # visibilityTimeout 120 s gives a 30 s budget; every call takes 12 s. The driver saw a
    # backlog: full answers below the receiver's part of it are a slow server, not waits.
    clock = Clock()
    sqs = slow_sqs(clock, 12.0)
    messages, stats = receive_messages(sqs, partition(1000, visible=1000), clock=clock)

    # Calls end at 12 s, 24 s and 36 s: the third passes the budget.
    assert stats.stopped_by == "time budget"
    assert len(sqs.receive_calls) == 3
    assert len(messages) == 30
    assert stats.seconds == 36.0


def test_budget_is_a_quarter_of_the_visibility_timeout_at_most_a_minute() -> None:
    clock = Clock()
    sqs = slow_sqs(clock, 12.0)
    options = {"visibilityTimeout": "400", "waitTimeSeconds": "20"}
    _, stats = receive_messages(sqs, partition(1000, visible=1000, **options), clock=clock)
    # 400 / 4 = 100 s, capped at 60 s: the fifth call ends at 60 s.
    assert stats.stopped_by == "time budget"
    assert len(sqs.receive_calls) == 5


# -- caught up: a long poll that waited, the count the driver saw ----------------------------


def timed_sqs(clock: Clock, script: list[tuple[float, list[dict[str, Any]]]]) -> FakeSqs:
    """Answers ``script`` in order, each call taking its seconds on ``clock`` (a long poll that
    waits that long, or a slow server), then empty answers at once."""
    timings = [seconds for seconds, _ in script]

    def advance() -> None:
        clock.now += timings.pop(0) if timings else 0.0

    return FakeSqs(script=[answer for _, answer in script], on_receive=advance)


def burst(start: int, count: int = 10) -> list[dict[str, Any]]:
    return [sqs_message(start + n) for n in range(count)]


def test_a_long_poll_that_waited_ends_the_loop_even_with_a_full_answer() -> None:
    # A producer sending batches of 10: the second long poll waits for the next batch, which
    # comes back whole. The queue had nothing visible when asked: the receiver caught up.
    clock = Clock()
    sqs = timed_sqs(clock, [(0.01, burst(0)), (0.4, burst(10)), (0.01, burst(20))])
    messages, stats = receive_messages(sqs, partition(1000), clock=clock)

    assert stats.stopped_by == "long poll waited"
    assert len(sqs.receive_calls) == 2
    assert len(messages) == 20


def test_a_short_answer_after_a_wait_ends_the_loop_at_once() -> None:
    clock = Clock()
    sqs = timed_sqs(clock, [(0.01, burst(0)), (0.9, burst(10, 1)), (0.01, burst(20))])
    _, stats = receive_messages(sqs, partition(1000, visible=500), clock=clock)

    assert stats.stopped_by == "long poll waited"
    assert len(sqs.receive_calls) == 2


def test_calls_up_to_the_threshold_are_answers_not_waits() -> None:
    clock = Clock()
    at_threshold = [(WAITED_SECONDS, burst(10 * n)) for n in range(5)]
    sqs = timed_sqs(clock, at_threshold)
    messages, stats = receive_messages(sqs, partition(1000), clock=clock)

    assert stats.stopped_by == "empty receive"
    assert len(messages) == 50


def test_a_slow_full_answer_below_the_planned_part_is_a_slow_server_not_a_wait() -> None:
    # A backlog drained on a busy machine: every call takes 0.6 s and brings 10. The driver saw
    # 60 for this receiver, so it takes all of them rather than stop after one call; the slow
    # call that reaches the part is no longer vouched for by the count.
    clock = Clock()
    sqs = timed_sqs(clock, [(0.6, burst(10 * n)) for n in range(10)])
    messages, stats = receive_messages(sqs, partition(1000, visible=60), clock=clock)

    assert len(messages) == 60
    assert stats.stopped_by == "long poll waited"
    assert [c["WaitTimeSeconds"] for c in sqs.receive_calls] == [1] * 6


def test_a_slow_full_answer_that_reaches_the_part_counts_as_a_wait() -> None:
    clock = Clock()
    sqs = timed_sqs(clock, [(0.01, burst(0)), (0.6, burst(10)), (0.01, burst(20))])
    _, stats = receive_messages(sqs, partition(1000, visible=20), clock=clock)

    assert stats.stopped_by == "long poll waited"
    assert len(sqs.receive_calls) == 2


def test_a_receiver_stops_at_its_part_of_the_visible_count_plus_the_margin() -> None:
    # Messages keep arriving after the driver counted 25: they are the next batch's.
    sqs = FakeSqs(available=1000)
    messages, stats = receive_messages(sqs, partition(1000, visible=25))

    assert stats.stopped_by == "visible when planned"
    assert len(messages) == 25 + VISIBLE_MARGIN
    assert [(c["MaxNumberOfMessages"], c["WaitTimeSeconds"]) for c in sqs.receive_calls] == [
        (10, 1),
        (10, 1),
        (10, 1),
        (5, 0),
    ]


def test_a_receiver_with_no_part_asks_once_without_waiting() -> None:
    sqs = FakeSqs(available=0)
    messages, stats = receive_messages(sqs, partition(1000, visible=0))

    assert messages == []
    assert stats.stopped_by == "empty receive"
    assert [c["WaitTimeSeconds"] for c in sqs.receive_calls] == [0]


def test_a_short_answer_beyond_the_part_means_caught_up() -> None:
    sqs = FakeSqs(script=[burst(0), burst(10, 4), burst(20)])
    messages, stats = receive_messages(sqs, partition(1000, visible=10))

    assert stats.stopped_by == "caught up"
    assert len(messages) == 14
    assert len(sqs.receive_calls) == 2


def test_the_share_and_the_budget_stay_outer_limits_with_a_count() -> None:
    sqs = FakeSqs(available=1000)
    _, stats = receive_messages(sqs, partition(30, visible=500))
    assert stats.stopped_by == "limit"

    clock = Clock()
    sqs = slow_sqs(clock, 12.0)
    _, stats = receive_messages(sqs, partition(1000, visible=500), clock=clock)
    assert stats.stopped_by == "time budget"


def test_an_earlier_attempt_s_messages_count_towards_the_part() -> None:
    # deleteAfterJournal: a retried task whose earlier attempt journaled its part and margin.
    sqs = FakeSqs(available=100)
    messages, stats = receive_messages(
        sqs, partition(1000, visible=20), already=20 + VISIBLE_MARGIN
    )
    assert messages == [] and sqs.receive_calls == []
    assert stats.stopped_by == "visible when planned"

    sqs = FakeSqs(available=100)
    messages, _ = receive_messages(sqs, partition(1000, visible=20), already=15)
    assert len(messages) == 20 + VISIBLE_MARGIN - 15
    assert [c["WaitTimeSeconds"] for c in sqs.receive_calls] == [1, 0]


def test_without_waiting_the_threshold_never_applies() -> None:
    # waitTimeSeconds=0: every call is a short poll; a slow one is a slow server.
    clock = Clock()
    sqs = timed_sqs(clock, [(0.6, burst(10 * n)) for n in range(3)])
    messages, stats = receive_messages(sqs, partition(1000, waitTimeSeconds="0"), clock=clock)
    assert stats.stopped_by == "empty receive"
    assert len(messages) == 30


def test_a_message_received_twice_is_kept_once_with_the_newest_handle() -> None:
    first = sqs_message(1, receive_count=1)
    again = sqs_message(1, receive_count=2)  # same id, new receipt handle
    sqs = FakeSqs(script=[[first, sqs_message(2)], [again], []])

    messages, stats = receive_messages(sqs, partition(100))

    assert [m["MessageId"] for m in messages] == [first["MessageId"], sqs_message(2)["MessageId"]]
    assert messages[0]["ReceiptHandle"] == again["ReceiptHandle"]
    assert stats.duplicates_in_loop == 1
    assert stats.received == 2


def test_duplicates_do_not_count_towards_the_limit() -> None:
    a, b, c = sqs_message(1), sqs_message(2), sqs_message(3)
    sqs = FakeSqs(script=[[a, b], [sqs_message(1, receive_count=2)], [c]])

    messages, stats = receive_messages(sqs, partition(3))

    assert [call["MaxNumberOfMessages"] for call in sqs.receive_calls] == [3, 1, 1]
    assert {m["MessageId"] for m in messages} == {a["MessageId"], b["MessageId"], c["MessageId"]}
    assert stats.stopped_by == "limit"


def test_request_parameters_follow_the_options() -> None:
    sqs = FakeSqs(available=1)
    receive_messages(
        sqs,
        partition(
            5, waitTimeSeconds="7", visibilityTimeout="300", messageAttributeNames="tenant,trace.*"
        ),
    )
    assert sqs.receive_calls[0] == {
        "QueueUrl": QUEUE_URL,
        "MaxNumberOfMessages": 5,
        "WaitTimeSeconds": 7,
        "VisibilityTimeout": 300,
        "MessageSystemAttributeNames": ["All"],
        "MessageAttributeNames": ["tenant", "trace.*"],
    }


def test_request_is_valid_for_the_real_sqs_api() -> None:
    # botocore validates parameter names and types against the service model before the stub.
    client = boto3.client(
        "sqs",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    with Stubber(client) as stub:
        stub.add_response(
            "receive_message",
            {"Messages": [sqs_message(0), sqs_message(1)]},
            expected_params={
                "QueueUrl": QUEUE_URL,
                "MaxNumberOfMessages": 2,
                "WaitTimeSeconds": 1,
                "VisibilityTimeout": 120,
                "MessageSystemAttributeNames": ["All"],
                "MessageAttributeNames": ["All"],
            },
        )
        messages, stats = receive_messages(client, partition(2))
        stub.assert_no_pending_responses()
    assert [m["MessageId"] for m in messages] == [
        sqs_message(0)["MessageId"],
        sqs_message(1)["MessageId"],
    ]
    assert stats.stopped_by == "limit"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (client_error("AccessDenied", 403), SqsAccessError),
        (client_error("AWS.SimpleQueueService.NonExistentQueue", 400), QueueNotFoundError),
        (client_error("InternalError", 500), TransientSqsError),
        (
            EndpointConnectionError(endpoint_url="https://sqs.us-east-1.amazonaws.com"),
            TransientSqsError,
        ),
    ],
    ids=["access-denied", "no-queue", "5xx", "network"],
)
def test_first_call_failing_raises_the_classified_error(
    error: Exception, expected: type[SqsSourceError]
) -> None:
    sqs = FakeSqs(script=[error])
    with pytest.raises(expected) as info:
        receive_messages(sqs, partition(10))
    assert QUEUE_URL in str(info.value)


def test_a_later_failure_keeps_what_was_received() -> None:
    got = [sqs_message(n) for n in range(10)]
    sqs = FakeSqs(script=[got, client_error("ThrottlingException", 400)])

    messages, stats = receive_messages(sqs, partition(50))

    assert messages == got
    assert stats.stopped_by == "error"
    assert stats.calls == 1


@pytest.mark.parametrize("received", [0, 10])
def test_the_in_flight_limit_ends_the_loop_like_an_empty_long_poll(received: int) -> None:
    """Found by the simulation (docs/simulation.md): a short poll at SQS's in-flight limit
    failed the task, and every retry failed again while the batch's other receivers held
    the queue's in-flight messages, until the query failed."""
    got = [sqs_message(n) for n in range(received)]
    over = client_error("OverLimit", 403)
    sqs = FakeSqs(script=[got, over] if got else [over])

    messages, stats = receive_messages(sqs, partition(50, waitTimeSeconds="0"))

    assert messages == got
    assert stats.stopped_by == "in-flight limit"


# -- read_partition ----------------------------------------------------------------------------


@pytest.fixture
def journal_dir(tmp_path: Path) -> str:
    return str(tmp_path / "journal")


def forbidden_client() -> Any:
    raise AssertionError("the client must not be created")


def test_first_read_receives_journals_and_yields(journal_dir: str) -> None:
    sqs = FakeSqs(available=25)
    part = partition(20, batch=3, receiver=1, journal=journal_dir)

    before = time.time()
    batches = list(read_partition(part, client_factory=lambda: sqs))
    after = time.time()

    out = pa.Table.from_batches(batches)
    assert out.schema == arrow_output_schema()
    assert out.num_rows == 20
    assert out.column("body").to_pylist() == [f'{{"n": {n}}}' for n in range(20)]
    assert "_receiptHandle" not in out.schema.names

    journal = Journal(journal_dir)
    entry = journal.entries.read(3, 1)
    assert entry is not None and entry.num_rows == 20
    receipts = journal.entries.read_receipts(3, 1)
    assert receipts is not None
    assert receipts.receipt_handles == tuple(f"AQEB-receipt-{n}-1" for n in range(20))
    # The receive time lets the driver know when these handles expire.
    assert before <= receipts.received_at <= after
    assert len(sqs.queue) == 5


def test_the_stored_plan_s_visible_count_bounds_the_receiver_and_its_entry_says_why(
    journal_dir: str,
) -> None:
    # The partition says nothing of the count (an executor gets it from the stored plan only).
    sqs = FakeSqs(available=100)
    stored = partition(1000, batch=4, journal=journal_dir, visible=12)
    part = replace(stored, visible=None)
    rows = collect(read_partition(part, client_factory=lambda: sqs))

    assert rows.num_rows == 12 + VISIBLE_MARGIN
    assert stored.visible == 12 and part.visible is None
    entry = Journal(journal_dir).entries.read(4, 0)
    assert entry is not None
    assert (entry.schema.metadata or {})[STOPPED_BY] == b"visible when planned"


@pytest.mark.parametrize("delete_after_journal", ["false", "true"])
def test_an_entry_records_why_its_receiver_stopped(
    journal_dir: str, delete_after_journal: str
) -> None:
    sqs = FakeSqs(available=7)
    part = partition(100, journal=journal_dir, deleteAfterJournal=delete_after_journal)
    assert collect(read_partition(part, client_factory=lambda: sqs)).num_rows == 7
    entry = Journal(journal_dir).entries.read(1, 0)
    assert entry is not None
    assert (entry.schema.metadata or {})[STOPPED_BY] == b"empty receive"


def test_nothing_is_journaled_before_the_rows_are_asked_for(journal_dir: str) -> None:
    sqs = FakeSqs(available=3)
    rows = read_partition(partition(10, journal=journal_dir), client_factory=lambda: sqs)
    assert sqs.receive_calls == []
    next(rows)
    assert Journal(journal_dir).entries.read(1, 0) is not None


def test_replay_yields_identical_rows_without_calling_sqs(journal_dir: str) -> None:
    sqs = FakeSqs(available=12)
    part = partition(12, batch=2, journal=journal_dir)
    first = collect(read_partition(part, client_factory=lambda: sqs))

    replay = collect(read_partition(part, client_factory=forbidden_client))

    assert replay.equals(first)
    assert replay.num_rows == 12


def test_a_worker_freezes_its_long_lived_objects_in_its_first_two_tasks(
    journal_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PySpark collects every object after each task; what a worker keeps (modules, clients,
    # the journal store) is frozen once the task has its client (executor/collection.py).
    from spark_sqs.executor import collection, receiver

    events: list[str] = []
    sqs = FakeSqs(available=40)

    def cached_client(connection: Any, *, wait_time_seconds: int) -> FakeSqs:
        events.append("client")
        return sqs

    class Gc:
        def collect(self) -> int:
            return 0

        def freeze(self) -> None:
            events.append("freeze")

    monkeypatch.setattr(receiver, "cached_client", cached_client)
    monkeypatch.setattr(collection, "gc", Gc())
    monkeypatch.setattr(collection, "_process", None)
    monkeypatch.setattr(collection, "_frozen", 0)
    monkeypatch.setenv(collection.REUSED_WORKER, "1")
    for batch in range(1, 5):
        assert (
            collect(read_partition(partition(10, batch=batch, journal=journal_dir))).num_rows == 10
        )

    assert events == ["client", "freeze", "client", "freeze", "client", "client"]


def test_replay_of_an_empty_receive_yields_nothing(journal_dir: str) -> None:
    part = partition(10, journal=journal_dir)
    assert list(read_partition(part, client_factory=lambda: FakeSqs(available=0))) == []
    # The empty result is journaled too, so a retried task does not receive anew.
    assert Journal(journal_dir).entries.read(1, 0) is not None
    assert list(read_partition(part, client_factory=forbidden_client)) == []


@pytest.mark.parametrize("batch", [4, 5])
def test_a_batch_already_acknowledged_yields_nothing(journal_dir: str, batch: int) -> None:
    part = partition(10, batch=batch, journal=journal_dir)
    # The driver acknowledged the batch and removed its files (the plan first).
    Journal(journal_dir).state.write(JournalState(planned_batch=6, acked_batch=5))
    Journal(journal_dir).batches.remove(batch)

    assert list(read_partition(part, client_factory=forbidden_client)) == []
    assert Journal(journal_dir).entries.read(batch, 0) is None


def test_a_plan_that_is_missing_for_a_batch_not_acknowledged_is_an_error(journal_dir: str) -> None:
    """A local journal an executor does not see looks like this: said, naming the fix."""
    part = partition(10, batch=4, journal=journal_dir)
    Journal(journal_dir).batches.remove(4)
    with pytest.raises(JournalError, match="s3://bucket/prefix"):
        list(read_partition(part, client_factory=forbidden_client))


def test_a_retired_batch_yields_nothing_and_receives_nothing(journal_dir: str) -> None:
    """A task of a dead driver whose batch a later batch adopted (retired)."""
    part = partition(10, batch=4, journal=journal_dir)
    Journal(journal_dir).batches.retire(4)
    assert list(read_partition(part, client_factory=forbidden_client)) == []


def test_a_straggler_that_finds_its_batch_acknowledged_after_journaling_releases(
    journal_dir: str,
) -> None:
    part = partition(10, batch=4, journal=journal_dir)
    sqs = FakeSqs(available=3)
    journal = Journal(journal_dir)
    real_receive = sqs.receive_message

    def receive_then_acknowledged(**kwargs: Any) -> Any:
        answer = real_receive(**kwargs)
        journal.batches.remove(4)  # the batch is acknowledged while this attempt receives
        return answer

    sqs.receive_message = receive_then_acknowledged  # type: ignore[method-assign]
    assert list(read_partition(part, client_factory=lambda: sqs)) == []
    assert journal.entries.read(4, 0) is None, "its entry is removed"
    (action, entries), *_ = sqs.batch_calls
    assert action == "visibility" and len(entries) == 3 and entries[0]["VisibilityTimeout"] == 0


def test_a_straggler_that_finds_its_batch_retired_after_journaling_keeps_its_entry(
    journal_dir: str,
) -> None:
    """The adoption may have copied the entry: it stays, and its messages stay in flight."""
    part = partition(10, batch=4, journal=journal_dir)
    sqs = FakeSqs(available=3)
    journal = Journal(journal_dir)
    real_receive = sqs.receive_message

    def receive_then_retired(**kwargs: Any) -> Any:
        answer = real_receive(**kwargs)
        journal.batches.retire(4)
        return answer

    sqs.receive_message = receive_then_retired  # type: ignore[method-assign]
    assert list(read_partition(part, client_factory=lambda: sqs)) == []
    entry = journal.entries.read(4, 0)
    assert entry is not None and entry.num_rows == 3
    assert sqs.batch_calls == [], "nothing released"


def test_a_batch_after_the_acknowledged_one_receives(journal_dir: str) -> None:
    Journal(journal_dir).state.write(JournalState(planned_batch=6, acked_batch=5))
    sqs = FakeSqs(available=2)
    part = partition(10, batch=6, journal=journal_dir)
    assert collect(read_partition(part, client_factory=lambda: sqs)).num_rows == 2


def test_a_failed_first_receive_journals_nothing(journal_dir: str) -> None:
    part = partition(10, journal=journal_dir)
    sqs = FakeSqs(script=[client_error("AccessDenied", 403)])

    with pytest.raises(SqsAccessError):
        list(read_partition(part, client_factory=lambda: sqs))
    # A retried task can still receive.
    assert Journal(journal_dir).entries.read(1, 0) is None
    retry = FakeSqs(available=1)
    assert collect(read_partition(part, client_factory=lambda: retry)).num_rows == 1


def test_redeliveries_of_dropped_ids_are_deleted_not_yielded(journal_dir: str) -> None:
    messages = [sqs_message(n, receive_count=2) for n in range(4)]
    dropped = {messages[1]["MessageId"], messages[3]["MessageId"]}
    sqs = FakeSqs(script=[messages, []])
    part = partition(10, journal=journal_dir, drop_ids=frozenset(dropped))

    out = collect(read_partition(part, client_factory=lambda: sqs))

    assert set(out.column("messageId").to_pylist()) == {
        messages[0]["MessageId"],
        messages[2]["MessageId"],
    }
    journaled = Journal(journal_dir).entries.read_receipts(1, 0)
    assert journaled is not None and not dropped & set(journaled.message_ids)
    # Deleted with the fresh receipt handles of this receive.
    assert [
        (action, [e["ReceiptHandle"] for e in entries]) for action, entries in sqs.batch_calls
    ] == [("delete", [messages[1]["ReceiptHandle"], messages[3]["ReceiptHandle"]])]


def test_when_another_attempt_journaled_first_its_rows_win_and_ours_are_released(
    journal_dir: str,
) -> None:
    part = partition(10, batch=2, receiver=0, journal=journal_dir)
    theirs = messages_to_table([sqs_message(n) for n in (100, 101)], QUEUE_URL)

    def other_attempt_journals() -> None:
        # The speculative twin of this task finishes journaling while we receive.
        Journal(journal_dir).entries.write(2, 0, theirs)

    ours = [sqs_message(n) for n in (1, 2, 3)]
    sqs = FakeSqs(script=[ours, []], on_receive=other_attempt_journals)

    out = collect(read_partition(part, client_factory=lambda: sqs))

    assert out.column("messageId").to_pylist() == theirs.column("messageId").to_pylist()
    # Our messages become visible again at once instead of after the visibility timeout.
    assert len(sqs.batch_calls) == 1
    action, entries = sqs.batch_calls[0]
    assert action == "visibility"
    assert [e["ReceiptHandle"] for e in entries] == [m["ReceiptHandle"] for m in ours]
    assert all(e["VisibilityTimeout"] == 0 for e in entries)


def test_a_receiver_with_no_share_does_not_call_receive(journal_dir: str) -> None:
    # A journaled receiver beyond numPartitions is planned with max_messages=0.
    sqs = FakeSqs(available=5)
    part = partition(0, journal=journal_dir)
    assert list(read_partition(part, client_factory=lambda: sqs)) == []
    assert sqs.receive_calls == []


def test_messages_that_could_not_be_journaled_are_released(
    journal_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unwritable(self: Entries, batch: int, receiver: int, table: pa.Table) -> bool:
        raise JournalError("Cannot write journal file: S3 is down")

    monkeypatch.setattr(Entries, "write", unwritable)
    received = [sqs_message(n) for n in range(3)]
    sqs = FakeSqs(script=[received, []])

    with pytest.raises(JournalError):
        list(read_partition(partition(10, journal=journal_dir), client_factory=lambda: sqs))
    assert sqs.batch_calls == [
        (
            "visibility",
            [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                for i, m in enumerate(received)
            ],
        )
    ]


# -- a receiver that stalls between receiving and journaling -----------------------------------


class _StalledSqs(FakeSqs):
    """Three messages; the receiver stalls right after receiving them (``stall`` seconds on
    its monotonic clock), and SQS refuses a visibility change for ``expired`` handles (their
    visibility ran out meanwhile and another receiver may hold them)."""

    def __init__(self, clock: Clock, stall: float, expired: set[str]) -> None:
        super().__init__(script=[[sqs_message(n) for n in range(3)], []])
        self.clock, self.stall, self.expired = clock, stall, expired

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        answer = super().receive_message(**kwargs)
        if answer:
            self.clock.now += self.stall  # GC, a payload fetch, a lost network...
        return answer

    def change_message_visibility_batch(
        self, QueueUrl: str, Entries: list[dict[str, Any]]
    ) -> dict[str, Any]:
        self.batch_calls.append(("visibility", Entries))
        failed = [e for e in Entries if e["ReceiptHandle"] in self.expired]
        return {
            "Successful": [{"Id": e["Id"]} for e in Entries if e not in failed],
            "Failed": [
                {"Id": e["Id"], "Code": "AWS.SimpleQueueService.MessageNotInflight",
                 "SenderFault": True, "Message": "not in flight"}
                for e in failed
            ],
        }  # fmt: skip


@pytest.mark.parametrize("delete_after_journal", ["false", "true"])
def test_a_receiver_that_stalled_past_half_the_timeout_journals_only_what_sqs_confirms(
    journal_dir: str, delete_after_journal: str
) -> None:
    clock = Clock(1000.0)
    stale = sqs_message(1)["ReceiptHandle"]
    sqs = _StalledSqs(clock, stall=70.0, expired={stale})  # visibilityTimeout 120: 70 > 60
    part = partition(10, journal=journal_dir, deleteAfterJournal=delete_after_journal)

    out = collect(read_partition(part, client_factory=lambda: sqs, clock=clock))

    assert sorted(out.column("messageId").to_pylist()) == [
        sqs_message(0)["MessageId"],
        sqs_message(2)["MessageId"],
    ]
    checks = [entries for action, entries in sqs.batch_calls if action == "visibility"]
    assert checks and {e["VisibilityTimeout"] for e in checks[0]} == {120}
    entry = Journal(journal_dir).entries.read(1, 0)
    assert entry is not None and stale not in entry.column("_receiptHandle").to_pylist()
    if delete_after_journal == "false":
        assert (entry.schema.metadata or {})[b"spark_sqs.expiredDropped"] == b"1"


def test_a_receiver_that_did_not_stall_makes_no_extra_call(journal_dir: str) -> None:
    clock = Clock(1000.0)
    sqs = _StalledSqs(clock, stall=59.0, expired=set())  # just under half the timeout
    part = partition(10, journal=journal_dir)
    out = collect(read_partition(part, client_factory=lambda: sqs, clock=clock))
    assert out.num_rows == 3
    assert sqs.batch_calls == []


# -- the memory bound (maxBytesPerReceiver) -----------------------------------------------------

KIB10 = "x" * 10240


def big_messages(count: int, first: int = 0) -> list[dict[str, Any]]:
    return [sqs_message(n, body=KIB10) for n in range(first, first + count)]


@pytest.mark.parametrize("cap", [1, 25_000, 100_000, 250_000])
def test_a_receiver_holds_less_than_its_byte_limit_plus_one_call(cap: int) -> None:
    sqs = FakeSqs(script=[big_messages(10, 10 * k) for k in range(50)])
    part = replace(partition(1000), max_bytes=cap)

    messages, stats = receive_messages(sqs, part)

    sizes = [message_bytes(m, part.options) for m in messages]
    assert stats.stopped_by == "byte limit"
    assert stats.bytes == sum(sizes)
    # A call is made only while the bytes held are below the limit: the last call crossed it,
    # and every call before it left the receiver below it.
    assert sum(sizes[:-10]) < cap <= sum(sizes)
    assert stats.bytes < cap + max(sum(sizes[i : i + 10]) for i in range(0, len(sizes), 10))
    assert len(sqs.receive_calls) == len(messages) // 10


def test_without_a_byte_limit_a_receiver_receives_its_share() -> None:
    sqs = FakeSqs(script=[big_messages(10, 10 * k) for k in range(50)])
    messages, stats = receive_messages(sqs, partition(100))
    assert (len(messages), stats.stopped_by) == (100, "limit")
    assert stats.bytes > 1_000_000


def test_a_redelivery_in_the_loop_is_counted_once() -> None:
    again = sqs_message(0, body=KIB10, handle="newer")
    sqs = FakeSqs(script=[big_messages(2), [again], []])
    messages, stats = receive_messages(sqs, replace(partition(100), max_bytes=10**9))
    assert stats.bytes == sum(message_bytes(m, make_options()) for m in messages)
    assert len(messages) == 2


def test_a_receiver_keeps_its_plan_s_byte_limit_not_the_partition_s(journal_dir: str) -> None:
    opts = make_options(journal_dir)
    Journal(journal_dir, opts).plans.write(
        BatchPlan(1, (ReceiverPlan(0, 1000, max_bytes=250_000),))
    )
    sqs = FakeSqs(script=[big_messages(10, 10 * k) for k in range(50)])
    # A partition of another run (other options) must not change what the first plan allowed.
    part = ReceiverPartition(1, 0, 1000, QUEUE_URL, opts, max_bytes=None)

    out = collect(read_partition(part, client_factory=lambda: sqs))

    assert out.num_rows == 30  # 3 calls of 10 messages of 10 KiB: the third crossed 250,000
    assert len(sqs.receive_calls) == 3


def test_a_plan_written_before_byte_limits_replays_without_one(journal_dir: str) -> None:
    opts = make_options(journal_dir)
    old = json.dumps(
        {"batch": 1, "receivers": [{"receiver": 0, "limit": 100, "adoptFrom": None}]}
    ).encode()
    journal = Journal(journal_dir, opts)
    journal.store.create("batches/000000000001/_plan.json", old)
    assert journal.plans.read(1).receivers[0].max_bytes is None  # type: ignore[union-attr]
    sqs = FakeSqs(script=[big_messages(10, 10 * k) for k in range(50)])
    part = ReceiverPartition(1, 0, 100, QUEUE_URL, opts, max_bytes=1024)

    out = collect(read_partition(part, client_factory=lambda: sqs))

    assert out.num_rows == 100


def test_a_retried_delete_after_journal_attempt_counts_the_bytes_of_earlier_parts(
    journal_dir: str,
) -> None:
    opts = make_options(journal_dir, deleteAfterJournal="true")
    journal = Journal(journal_dir, opts)
    journal.plans.write(
        BatchPlan(1, (ReceiverPlan(0, 1000, max_bytes=25_000),), delete_after_journal=True)
    )
    # A killed attempt journaled a part that already filled the limit.
    earlier = messages_to_table(big_messages(3), QUEUE_URL).replace_schema_metadata(
        {b"spark_sqs.receivedAt": b"1.0", BYTES: b"25000"}
    )
    assert journal.entries.write_part(1, 0, 0, earlier)
    sqs = FakeSqs(script=[big_messages(10, 100 + 10 * k) for k in range(5)])
    part = ReceiverPartition(1, 0, 1000, QUEUE_URL, opts)

    out = collect(read_partition(part, client_factory=lambda: sqs))

    assert sqs.receive_calls == []
    assert out.column("messageId").to_pylist() == [m["MessageId"] for m in big_messages(3)]


def test_delete_after_journal_parts_record_their_bytes_and_the_loop_stops_at_the_limit(
    journal_dir: str,
) -> None:
    opts = make_options(journal_dir, deleteAfterJournal="true")
    journal = Journal(journal_dir, opts)
    journal.plans.write(
        BatchPlan(1, (ReceiverPlan(0, 1000, max_bytes=250_000),), delete_after_journal=True)
    )
    sqs = FakeSqs(script=[big_messages(10, 10 * k) for k in range(5)])
    out = collect(
        read_partition(ReceiverPartition(1, 0, 1000, QUEUE_URL, opts), client_factory=lambda: sqs)
    )

    parts = journal.entries.read_parts(1, 0, ID_COLUMNS)
    recorded = [int((t.schema.metadata or {}).get(BYTES, b"0")) for _, t in parts]
    assert out.num_rows == 30 and len(sqs.receive_calls) == 3
    assert recorded[:3] == [
        sum(message_bytes(m, opts) for m in big_messages(10, 10 * k)) for k in range(3)
    ]
