"""Acknowledgement on the executors (spark_sqs/acknowledgement/assigned.py): the receivers of
batch N+1 delete batch N's messages, and the driver's work per batch does not grow with the
number of messages. Driven through the real driver and receivers, on a local journal whose
requests are counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_sqs.acknowledgement.assigned import acknowledge_assigned
from spark_sqs.acknowledgement.reports import AckReport, AckReports
from spark_sqs.driver.coordinator import Coordinator
from spark_sqs.driver.planning import new_plan
from spark_sqs.driver.state import StateMarkers
from spark_sqs.errors import TransientSqsError
from spark_sqs.executor.receiver import read_partition
from spark_sqs.journal import AckAssignment, Journal, LocalStore
from spark_sqs.schema import messages_to_table
from tests.factories import QUEUE_URL, make_options, sqs_message
from tests.fakes import BlindStore, FakeSqs, HookedStore, ListHidingStore, client_error


def deletes(sqs: FakeSqs, since: int = 0) -> list[str]:
    return [
        e["ReceiptHandle"]
        for action, entries in sqs.batch_calls[since:]
        for e in entries
        if action == "delete"
    ]


def fast_options(location: str, **extra: str) -> Any:
    """Receivers that do not long-poll an empty queue, a driver that polls it often."""
    return make_options(location, waitTimeSeconds="0", queuePollInterval="0.01", **extra)


def at_in_flight_limit(tmp_path: Path, **extra: str) -> tuple[Any, Journal]:
    """Two receivers, batches of 6, maxInFlightMessages 6: one full batch fills the limit."""
    location = str(tmp_path / "journal")
    options = fast_options(
        location, numPartitions="2", maxMessagesPerTrigger="6", maxInFlightMessages="6", **extra
    )
    return options, Journal(location, options)


@pytest.fixture
def world(tmp_path: Path) -> Any:
    location = str(tmp_path / "journal")
    options = fast_options(location, numPartitions="3", maxMessagesPerTrigger="9")
    store = HookedStore(LocalStore(location))
    sqs = FakeSqs(available=18)
    state = Coordinator(
        options,
        sqs,
        QUEUE_URL,
        Journal(location, options, store=store),
        messages_per_receiver=1,
    )
    yield state, sqs, store, Journal(location, options)
    state.close()


def run(parts: list[Any], sqs: FakeSqs, journal: Journal) -> list[str]:
    """Every receiver of the batch, as Spark's tasks would run them."""
    out: list[str] = []
    for part in parts:
        for batch in read_partition(part, client_factory=lambda: sqs, journal=journal):
            out.extend(pa.Table.from_batches([batch]).column("messageId").to_pylist())
    return out


def test_the_next_batch_s_receivers_delete_the_committed_batch(world: Any) -> None:
    state, sqs, store, journal = world
    end = state.latest_offset({"batch": 0})
    first = run(state.plan({"batch": 0}, end), sqs, journal)
    assert len(first) == 9

    # Spark committed batch 1 and asks for batch 2: the driver deletes nothing itself.
    calls = len(sqs.batch_calls)
    end = state.latest_offset({"batch": 1})
    parts = state.plan({"batch": 1}, end)
    assert deletes(sqs, calls) == []
    plan = journal.plans.read(2)
    assert plan is not None
    first_plan = journal.plans.read(1)
    assert first_plan is not None
    assert sorted(a.receiver for a in plan.acks) == [r.receiver for r in first_plan.receivers]
    assert {a.by for a in plan.acks} == {p.receiver for p in parts}, "spread over receivers"

    second = run(parts, sqs, journal)
    assert len(second) == 9 and not set(first) & set(second)
    # Batch 1's messages were deleted by batch 2's receivers, before they received.
    assert sorted(deletes(sqs, calls)) == sorted(f"AQEB-receipt-{n}-1" for n in range(9))

    # Batch 2 committed, the queue is empty: batch 1 is settled from the receivers' reports,
    # batch 2 (no next batch will come) is deleted by the driver.
    calls = len(sqs.batch_calls)
    assert state.latest_offset({"batch": 2}) == {"batch": 2}
    assert sorted(deletes(sqs, calls)) == sorted(f"AQEB-receipt-{n}-1" for n in range(9, 18))
    assert journal.state.read().acked_batch == 2
    assert journal.batches.list() == []
    metrics = {m["batch"]: m for m in journal.metrics.read()}
    assert metrics[1]["deleted"] == 9 and metrics[1]["acknowledgedBy"] == 2
    assert metrics[2]["deleted"] == 9 and "acknowledgedBy" not in metrics[2]


def test_the_driver_reads_no_entry_in_steady_state(world: Any) -> None:
    # The driver's cost per batch does not grow with messages. In steady state it reads and
    # writes a few keys per receiver and never reads an entry (receipt handles are read by
    # the receivers that delete them).
    state, sqs, store, journal = world
    run(state.plan({"batch": 0}, state.latest_offset({"batch": 0})), sqs, journal)
    store.calls.clear()
    parts = state.plan({"batch": 1}, state.latest_offset({"batch": 1}))
    entry_reads = [k for m, k in store.calls if m == "read" and k.endswith(".arrow")]
    assert entry_reads == [k for k in entry_reads if k.startswith("drops/")]
    run(parts, sqs, journal)
    store.calls.clear()
    state.acknowledge(2)  # Spark's commit(2) while batch 3 is constructed
    assert [k for m, k in store.calls if m == "read" and "/batches/" in f"/{k}"] == []
    # Batch 1 was settled from its receivers' reports, read by key: one GET each, no LIST.
    assert journal.state.read().acked_batch == 1
    assert sorted(k for m, k in store.calls if m == "read" and k.startswith("acks/")) == [
        f"acks/000000000002/{r:05d}.json" for r in range(3)
    ]
    assert [k for m, k in store.calls if m == "list" and k.startswith("acks/000000000002")] == []


def test_a_replayed_next_batch_acknowledges_again_harmlessly(world: Any) -> None:
    state, sqs, store, journal = world
    run(state.plan({"batch": 0}, state.latest_offset({"batch": 0})), sqs, journal)
    end = state.latest_offset({"batch": 1})
    parts = state.plan({"batch": 1}, end)
    run(parts, sqs, journal)
    # The driver dies before Spark's commit log has batch 2; the restart replays it from the
    # journal: the receivers delete batch 1 again (its entries still exist) and replay.
    restarted = Coordinator(state.options, sqs, QUEUE_URL, Journal(journal.location, state.options))
    try:
        calls = len(sqs.batch_calls)
        replay = run(restarted.plan({"batch": 1}, end), sqs, journal)
        assert len(replay) == 9
        # Replaying receivers (their entries exist) neither receive nor delete again.
        assert deletes(sqs, calls) == []
        assert restarted.latest_offset({"batch": 2}) == {"batch": 2}
        assert journal.state.read().acked_batch == 2 and journal.batches.list() == []
    finally:
        restarted.close()


def test_the_last_batch_before_an_idle_queue_is_deleted_by_the_driver(world: Any) -> None:
    state, sqs, store, journal = world
    sqs.queue = sqs.queue[:5]
    run(state.plan({"batch": 0}, state.latest_offset({"batch": 0})), sqs, journal)
    calls = len(sqs.batch_calls)
    assert state.latest_offset({"batch": 1}) == {"batch": 1}
    assert len(deletes(sqs, calls)) == 5
    assert journal.batches.list() == []


# -- acknowledge_assigned, alone -----------------------------------------------------------------


def entry(journal: Journal, batch: int, receiver: int, numbers: range) -> list[str]:
    messages = [sqs_message(n) for n in numbers]
    table = messages_to_table(messages, QUEUE_URL).replace_schema_metadata(
        {b"spark_sqs.receivedAt": b"1000.0"}
    )
    journal.entries.write(batch, receiver, table)
    return [m["MessageId"] for m in messages]


def test_handles_the_heartbeat_lost_are_reported_uncertain(tmp_path: Path) -> None:
    """Whether a handle expired before its delete is not judged here, on the executor's clock
    (the driver judges it at settlement, on its own): only what the heartbeat lost counts."""
    journal = Journal(str(tmp_path / "j"))
    fresh = entry(journal, 1, 0, range(0, 3))
    stale = entry(journal, 1, 1, range(3, 5))
    sqs = FakeSqs()
    assignments = [
        AckAssignment(1, 0, by=0, valid_until=2000.0, lost=(fresh[1],)),
        AckAssignment(1, 1, by=0, valid_until=1500.0),
        AckAssignment(1, 7, by=0, valid_until=2000.0),  # not found: reported missing
    ]

    entries = acknowledge_assigned(
        journal,
        sqs,
        QUEUE_URL,
        2,
        0,
        assignments,
    )

    assert len(deletes(sqs)) == 5
    by_entry = {(e.batch, e.receiver): e for e in entries}
    assert set(by_entry) == {(1, 0), (1, 1)}
    assert by_entry[(1, 0)].uncertain == (fresh[1],)
    assert by_entry[(1, 1)].uncertain == ()
    assert len(stale) == 2
    # The report is at its fixed key, which the driver reads by name.
    assert AckReports(journal).read(2, 0) == AckReport(0, tuple(entries), missing=((1, 7),))
    assert journal.store.list("acks/000000000002") == ["acks/000000000002/00000.json"]


def test_transient_delete_failures_fail_the_task_for_spark_to_retry(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "j"))
    entry(journal, 1, 0, range(3))

    class Throttled(FakeSqs):
        def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:
            raise client_error("ThrottlingException", 400, "DeleteMessageBatch")

    with pytest.raises(TransientSqsError, match="batch 2 receiver 0"):
        acknowledge_assigned(
            journal,
            Throttled(),
            QUEUE_URL,
            2,
            0,
            [AckAssignment(1, 0, by=0, valid_until=10.0**10)],
        )
    # No report: the batch cannot commit, and the retry deletes again.
    assert AckReports(journal).read(2, 0) is None


def test_a_committed_batch_that_fills_the_in_flight_limit_is_deleted_by_an_acknowledge_only_batch(
    tmp_path: Path,
) -> None:
    """With maxInFlightMessages = maxMessagesPerTrigger, no batch may receive while the
    committed batch is in flight. The next batch only acknowledges: every receiver deletes a
    share of it on the executors and receives nothing; the driver deletes nothing itself, and
    the batch after it receives again."""
    options, journal = at_in_flight_limit(tmp_path)
    sqs = FakeSqs(available=12)
    state = Coordinator(options, sqs, QUEUE_URL, journal, messages_per_receiver=1)
    try:
        first = run(state.plan({"batch": 0}, state.latest_offset({"batch": 0})), sqs, journal)
        assert len(first) == 6
        calls = len(sqs.batch_calls)
        assert state.latest_offset({"batch": 1}) == {"batch": 2}
        parts = state.plan({"batch": 1}, {"batch": 2})
        assert deletes(sqs, calls) == [], "the driver deletes nothing"
        plan = journal.plans.read(2)
        assert plan is not None
        assert [(r.receiver, r.limit) for r in plan.receivers] == [(0, 0), (1, 0)]
        assert {a.by for a in plan.acks} == {0, 1}, "the deletes are shared by both receivers"
        received = len(sqs.receive_calls)
        assert run(parts, sqs, journal) == []
        assert len(sqs.receive_calls) == received, "acknowledge-only receivers ask SQS nothing"
        assert sorted(deletes(sqs, calls)) == sorted(f"AQEB-receipt-{n}-1" for n in range(6))

        # Batch 2 committed: batch 1 is settled from the reports, and batch 3 has room again.
        calls = len(sqs.batch_calls)
        assert state.latest_offset({"batch": 2}) == {"batch": 3}
        assert deletes(sqs, calls) == []
        assert journal.state.read().acked_batch == 1
        second = run(state.plan({"batch": 2}, {"batch": 3}), sqs, journal)
        assert len(second) == 6 and not set(first) & set(second)
    finally:
        state.close()


def test_a_committed_delete_after_journal_batch_does_not_count_against_the_in_flight_limit(
    tmp_path: Path,
) -> None:
    """deleteAfterJournal: a batch's receivers delete what they journal, so once Spark has
    committed it, it holds nothing in flight. The next batch receives a full share, rather than
    being acknowledge-only; a batch not yet committed still counts."""
    options, journal = at_in_flight_limit(tmp_path, deleteAfterJournal="true")
    sqs = FakeSqs(available=12)
    state = Coordinator(options, sqs, QUEUE_URL, journal, messages_per_receiver=1)
    try:
        assert state.latest_offset({"batch": 0}) == {"batch": 1}
        first = run(state.plan({"batch": 0}, {"batch": 1}), sqs, journal)
        assert len(first) == 6
        assert len(deletes(sqs, 0)) == 6, "deleted as journaled"
        # Not committed yet (a task may still be running, as far as the driver knows): its
        # plan's limit holds the whole of maxInFlightMessages.
        assert state.acknowledger.pending_messages() == 6

        assert state.latest_offset({"batch": 1}) == {"batch": 2}
        parts = state.plan({"batch": 1}, {"batch": 2})
        plan = journal.plans.read(2)
        assert plan is not None
        assert [(r.receiver, r.limit) for r in plan.receivers] == [(0, 3), (1, 3)]
        second = run(parts, sqs, journal)
        assert len(second) == 6 and not set(first) & set(second)
    finally:
        state.close()


def test_a_committed_batch_that_fills_the_in_flight_limit_of_an_idle_queue_is_deleted_by_the_driver(
    tmp_path: Path,
) -> None:
    """No next batch comes to an idle queue, acknowledge-only or not: the driver deletes."""
    options, journal = at_in_flight_limit(tmp_path)
    sqs = FakeSqs(available=6)
    state = Coordinator(options, sqs, QUEUE_URL, journal, messages_per_receiver=1)
    try:
        run(state.plan({"batch": 0}, state.latest_offset({"batch": 0})), sqs, journal)
        calls = len(sqs.batch_calls)
        assert state.latest_offset({"batch": 1}) == {"batch": 1}
        assert len(deletes(sqs, calls)) == 6
        assert journal.state.read().acked_batch == 1
    finally:
        state.close()


def test_an_entry_less_orphan_does_not_hold_back_acknowledgement_at_the_in_flight_limit(
    tmp_path: Path,
) -> None:
    """Simulation seed 1148: a run died after writing batch 1's plan, before any receiver ran.
    The next run (a new checkpoint) inherits batch 1 with no entries; nothing adopts or assigns
    it, since acknowledgement assignments list entries. It must not hold back the batches
    after it: at the in-flight limit every batch was acknowledge-only, for ever."""
    options, journal = at_in_flight_limit(tmp_path)
    journal.plans.write(new_plan(1, 6, 2))
    StateMarkers(journal).advance(planned=1)
    sqs = FakeSqs(available=12)
    state = Coordinator(options, sqs, QUEUE_URL, journal, messages_per_receiver=1)
    try:
        assert state.acknowledger.pending == [1]
        end = state.latest_offset({"batch": 0})
        assert end == {"batch": 2}
        first = run(state.plan({"batch": 0}, end), sqs, journal)
        assert len(first) == 6
        # Batch 2 fills maxInFlightMessages: batch 3 only acknowledges it.
        assert state.latest_offset({"batch": 2}) == {"batch": 3}
        assert run(state.plan({"batch": 2}, {"batch": 3}), sqs, journal) == []
        # Batch 3 committed: batch 1 (nothing to delete) and batch 2 (deleted by batch 3's
        # receivers) are acknowledged, and batch 4 receives again.
        assert state.latest_offset({"batch": 3}) == {"batch": 4}
        assert journal.state.read().acked_batch >= 2
        second = run(state.plan({"batch": 3}, {"batch": 4}), sqs, journal)
        assert len(second) == 6 and not set(first) & set(second)
    finally:
        state.close()


@pytest.mark.parametrize("report", ["hidden from LIST", "missing"])
def test_a_report_is_read_by_key_and_only_a_missing_one_makes_the_driver_delete(
    tmp_path: Path, report: str
) -> None:
    """Crash-table rows: an acknowledgement report that a LIST does not show (a store whose
    listings lag) is read by key, and the batch settles from it. One that cannot be read at all
    must not let the driver settle the batch without it (an uncertain delete would be
    forgotten): it deletes the batch's messages itself, as when no batch follows."""
    location = str(tmp_path / "journal")
    options = make_options(
        location,
        numPartitions="3",
        maxMessagesPerTrigger="9",
        waitTimeSeconds="0",
        queuePollInterval="0.01",
    )
    store = ListHidingStore(
        LocalStore(location), lambda k: k.startswith("acks/000000000002/00001.")
    )
    sqs = FakeSqs(available=27)
    state = Coordinator(
        options,
        sqs,
        QUEUE_URL,
        Journal(location, options, store=store),
        messages_per_receiver=1,
    )
    journal = Journal(location, options)
    try:
        run(state.plan({"batch": 0}, state.latest_offset({"batch": 0})), sqs, journal)
        run(state.plan({"batch": 1}, state.latest_offset({"batch": 1})), sqs, journal)
        assert len(journal.store.list("acks/000000000002")) == 3
        if report == "missing":
            journal.store.delete("acks/000000000002/00001.json")
        calls = len(sqs.batch_calls)
        state.acknowledge(2)
        again = deletes(sqs, calls)
        if report == "missing":
            assert sorted(again) == sorted(f"AQEB-receipt-{n}-1" for n in range(9)), "deleted"
        else:
            assert again == [], "settled from the reports, nothing deleted twice"
        assert journal.state.read().acked_batch == 1 and 1 not in journal.batches.list()
    finally:
        state.close()


def test_an_assigned_entry_a_receiver_does_not_find_is_deleted_by_the_driver(world: Any) -> None:
    """Crash-table row: every assigned entry existed when its batch committed; a receiver that
    does not find one (it cannot see the journal, or the journal was put back from a copy
    meanwhile) reports it, and the driver deletes that batch itself instead of settling it
    from the reports (the entry's messages would never be deleted)."""
    state, sqs, store, journal = world
    run(state.plan({"batch": 0}, state.latest_offset({"batch": 0})), sqs, journal)
    parts = state.plan({"batch": 1}, state.latest_offset({"batch": 1}))
    hidden = "batches/000000000001/00001.arrow"
    blind = Journal(journal.location, state.options, store=BlindStore(journal.store, hidden))
    run(parts, sqs, blind)
    reports = [r for r in (AckReports(journal).read(2, n) for n in range(3)) if r is not None]
    assert [m for r in reports for m in r.missing] == [(1, 1)]
    receipts = journal.entries.read_receipts(1, 1)
    assert receipts is not None and receipts.receipt_handles
    calls = len(sqs.batch_calls)
    state.acknowledge(2)
    # The driver deleted batch 1 itself, the hidden entry's messages included.
    assert set(receipts.receipt_handles) <= set(deletes(sqs, calls))
    assert journal.state.read().acked_batch == 1
