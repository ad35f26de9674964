"""Exactly-once under every attempt Spark may run, on a local journal and on an ``s3://``
journal against moto's S3 server: concurrent attempts of one receiver, stragglers
after acknowledgement, unknown-outcome journal writes, retried ``deleteAfterJournal`` tasks,
crash-interrupted orphan adoption, and executors that cannot see the driver's journal. A
behaviour of the receiver, the coordinator and the journal together, driven through the real
driver and receivers, so no single module's test file is theirs."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_sqs.driver.coordinator import Coordinator
from spark_sqs.driver.planning import ReceiverPartition
from spark_sqs.driver.state import StateMarkers
from spark_sqs.errors import JournalError, JournalInUseError, JournalOutcomeUnknown
from spark_sqs.executor.receiver import read_partition
from spark_sqs.journal import BatchPlan, Journal, JournalState, ReceiverPlan, open_store
from spark_sqs.options import SqsOptions
from spark_sqs.schema import messages_to_table
from tests.factories import QUEUE_URL, make_options, sqs_message
from tests.fakes import FakeSqs, HookedStore

REGION = "us-east-1"


class Crash(BaseException):
    """The process dies here: nothing after this line of ours runs (not an Exception, so no
    handler of ours sees it)."""


@pytest.fixture
def location(journal_location: str) -> str:
    return journal_location


def options_for(location: str, **extra: Any) -> SqsOptions:
    return make_options(location, region=REGION, **extra)


def journal_with(location: str, options: SqsOptions, **hooks: Any) -> Journal:
    return Journal(
        location, options, store=HookedStore(open_store(location, options.connection), **hooks)
    )


def planned(
    journal: Journal, options: SqsOptions, batch: int = 1, receiver: int = 0, limit: int = 10
) -> ReceiverPartition:
    """Store the batch's plan, as the driver does before any receiver runs."""
    journal.plans.write(BatchPlan(batch, (ReceiverPlan(receiver, limit),)))
    return ReceiverPartition(batch, receiver, limit, QUEUE_URL, options)


def ids_of(table: pa.Table) -> list[str]:
    return table.column("messageId").to_pylist()


def rows(batches: Iterator[pa.RecordBatch]) -> pa.Table:
    out = list(batches)
    return pa.Table.from_batches(out) if out else pa.table({"messageId": pa.array([], pa.string())})


def released(sqs: FakeSqs) -> list[str]:
    return [
        e["ReceiptHandle"]
        for action, entries in sqs.batch_calls
        for e in entries
        if action == "visibility"
    ]


# -- two attempts of one receiver at once ----------------------------------------------------------


def _attempt_process(location: str, queue_url: str, endpoint: str, barrier: Any, out: Any) -> None:
    options = SqsOptions.parse(
        {
            "queueUrl": queue_url,
            "journalLocation": location,
            "endpointUrl": endpoint,
            "region": REGION,
            "waitTimeSeconds": "0",
        },
        env={},
    )

    def both_received(method: str, key: str) -> None:
        if method == "create" and key.endswith("/00000.arrow"):
            barrier.wait(120)

    journal = journal_with(location, options, before=both_received)
    part = ReceiverPartition(1, 0, 10, queue_url, options)
    out.put(sorted(ids_of(rows(read_partition(part, journal=journal)))))


def test_two_processes_running_one_receiver_at_once_yield_one_entry(
    location: str, moto_endpoint: str, sqs: Any, queue_url: str
) -> None:
    """Speculation, or an executor lost but alive: two processes run one partition. Both
    receive (different messages, on a standard queue), then race to journal. One entry wins;
    both yield its rows; the loser hands back only what the winner does not hold."""
    for start in (0, 10):
        sqs.send_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": str(n), "MessageBody": f"m{n}"} for n in range(start, start + 10)],
        )
    options = options_for(location)
    Journal(location, options).plans.write(BatchPlan(1, (ReceiverPlan(0, 10),)))
    context = multiprocessing.get_context("spawn")
    barrier, out = context.Barrier(2), context.Queue()
    processes = [
        context.Process(
            target=_attempt_process, args=(location, queue_url, moto_endpoint, barrier, out)
        )
        for _ in range(2)
    ]
    for p in processes:
        p.start()
    results = [out.get(timeout=180) for _ in processes]
    for p in processes:
        p.join(60)
        assert p.exitcode == 0

    journal = Journal(location, options)
    assert journal.entries.read(1, 0) is not None
    entry = journal.entries.read(1, 0)
    assert entry is not None
    winner = sorted(ids_of(entry))
    assert results[0] == results[1] == winner
    # What is visible again is exactly what the loser received and the winner does not hold.
    visible: set[str] = set()
    for _ in range(10):
        got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=60)
        visible |= {m["MessageId"] for m in got.get("Messages", [])}
    assert not visible & set(winner)
    assert len(visible) + len(winner) == 20


class FifoTwinSqs(FakeSqs):
    """A FIFO queue that honours ``ReceiveRequestAttemptId`` as SQS does (moto ignores it): a
    repeated id returns the same messages with the same receipt handles."""

    def __init__(self) -> None:
        super().__init__(available=30)
        self.by_attempt: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            attempt = kwargs["ReceiveRequestAttemptId"]
            if attempt not in self.by_attempt:
                self.by_attempt[attempt] = super().receive_message(**kwargs).get("Messages", [])
            messages = self.by_attempt[attempt]
        return {"Messages": messages} if messages else {}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        return self._batch("delete", Entries)

    def change_message_visibility_batch(
        self, QueueUrl: str, Entries: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return self._batch("visibility", Entries)


def test_fifo_twins_with_one_attempt_id_release_nothing(location: str) -> None:
    """Two attempts of one FIFO receiver send the same receive-request attempt ids and get the
    same messages: the loser holds nothing the winner lacks, so it must release nothing (a
    release would make the winner's messages visible while its batch is pending). Uses a stub
    that honours ReceiveRequestAttemptId, because moto ignores it."""
    options = options_for(location, waitTimeSeconds="0")
    barrier = threading.Barrier(2)

    def both_received(method: str, key: str) -> None:
        if method == "create" and key.endswith("/00000.arrow"):
            barrier.wait(60)

    part = planned(Journal(location, options), options, limit=25)
    fifo = replace_url(part)
    sqs = FifoTwinSqs()
    results: list[list[str]] = []

    def attempt() -> None:
        journal = journal_with(location, options, before=both_received)
        results.append(
            ids_of(rows(read_partition(fifo, client_factory=lambda: sqs, journal=journal)))
        )

    threads = [threading.Thread(target=attempt) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 2 and results[0] == results[1] and len(results[0]) == 25
    assert released(sqs) == []
    assert Journal(location, options).entries.read(1, 0) is not None


def replace_url(part: ReceiverPartition) -> ReceiverPartition:
    from dataclasses import replace

    return replace(part, queue_url=QUEUE_URL + ".fifo")


# -- a straggler after acknowledgement -------------------------------------------------------------


def test_a_straggler_that_journals_after_its_batch_was_acknowledged_leaves_nothing(
    location: str,
) -> None:
    """The straggler starts before batch 1 is acknowledged; while it receives, the winner's
    batch is acknowledged and its entries removed. Its entry would be held by nobody (never
    heartbeated, never deleted, invisible): it removes it and hands the messages back."""
    options = options_for(location)
    journal = Journal(location, options)
    part = planned(journal, options)

    def winner_journals_and_batch_is_acknowledged() -> None:
        journal.entries.write(1, 0, messages_to_table([sqs_message(100)], QUEUE_URL))
        journal.state.write(JournalState(planned_batch=1, acked_batch=1))
        journal.batches.remove(1)

    ours = [sqs_message(n) for n in range(3)]
    sqs = FakeSqs(script=[ours, []], on_receive=winner_journals_and_batch_is_acknowledged)
    straggler = Journal(location, options)
    out = rows(read_partition(part, client_factory=lambda: sqs, journal=straggler))

    assert out.num_rows == 0
    assert journal.batches.list() == []
    assert released(sqs) == [m["ReceiptHandle"] for m in ours]


@pytest.mark.parametrize("delete_after_journal", [False, True], ids=["entry", "parts"])
def test_a_straggler_whose_batch_was_removed_and_planned_again_leaves_nothing_in_it(
    location: str, delete_after_journal: bool
) -> None:
    """Found by the simulation (seed 3638 with --poison --unkind all, on 8c53987): while a
    straggler of batch 1 received, another query adopted batch 1 and removed it, and a driver
    that had lost the journal while paused planned batch 1 again (its plan was gone: a run that
    died before planning it, as far as it could tell). The straggler found a plan, journaled
    into the batch, and the new owner, for whom batch 1 was committed, acknowledged it: the
    messages were deleted, delivered by nobody. A plan of another identity is not the
    straggler's: it leaves nothing in the batch and deletes nothing."""
    options = options_for(location, deleteAfterJournal=str(delete_after_journal).lower())
    journal = Journal(location, options)
    journal.plans.write(BatchPlan(1, (ReceiverPlan(0, 10),), plan_id="first"))
    part = ReceiverPartition(1, 0, 10, QUEUE_URL, options, plan_id="first")

    def adopted_removed_and_planned_again() -> None:
        journal.batches.retire(1)
        journal.batches.remove(1)
        journal.plans.write(BatchPlan(1, (ReceiverPlan(0, 3),), plan_id="second"))

    ours = [sqs_message(n) for n in range(3)]
    sqs = FakeSqs(script=[ours, []], on_receive=adopted_removed_and_planned_again)
    straggler = Journal(location, options)
    out = rows(read_partition(part, client_factory=lambda: sqs, journal=straggler))

    assert out.num_rows == 0
    assert journal.entries.read(1, 0) is None
    assert journal.entries.read_parts(1, 0) == [], "nothing the new plan's owner would delete"
    assert not [c for c in sqs.batch_calls if c[0] == "delete"], "nothing deleted"
    # And an attempt of the first plan that starts now receives nothing.

    def forbidden() -> Any:
        raise AssertionError("an attempt of a removed plan must not receive")

    assert rows(read_partition(part, client_factory=forbidden, journal=journal)).num_rows == 0


def test_a_straggler_that_starts_after_acknowledgement_receives_nothing(location: str) -> None:
    options = options_for(location)
    journal = Journal(location, options)
    part = planned(journal, options)
    journal.state.write(JournalState(planned_batch=1, acked_batch=1))
    journal.batches.remove(1)

    def forbidden() -> Any:
        raise AssertionError("a straggler of an acknowledged batch must not receive")

    assert rows(read_partition(part, client_factory=forbidden, journal=journal)).num_rows == 0
    assert journal.batches.list() == []


@pytest.mark.parametrize("record", ["written", "failed"])
@pytest.mark.parametrize("adoption", ["copying", "removed"])
def test_a_retry_of_an_attempt_that_found_its_batch_adopted_after_journaling_delivers_nothing(
    location: str, adoption: str, record: str
) -> None:
    """A task of a driver that lost the journal receives; meanwhile another query retires its
    batch, adopts the entries it finds (none of this receiver's yet) and, for ``removed``,
    removes the batch. The attempt journals, reads that the batch is no longer live and dies
    before it returns. Spark's retry finds the entry: no adoption copied it, so its messages
    come back after their visibility timeout and the adopting query delivers them. The retry
    must deliver nothing, as the dead attempt would have (before, it replayed the entry: the
    messages reached two sinks, and on FIFO twice the first query's batch, beside another
    receiver's expired copy). The retry's attempt record reads the batch's status; when the
    record cannot be written (``failed``), the receiver reads it itself."""
    options = options_for(location)
    journal = Journal(location, options)
    part = planned(journal, options)

    def adopted_by_another_query() -> None:
        journal.batches.retire(1)
        assert journal.entries.read(1, 0) is None, "nothing of this receiver to adopt yet"
        if adoption == "removed":
            journal.batches.remove(1)

    ours = [sqs_message(n) for n in range(3)]
    sqs = FakeSqs(script=[ours, []], on_receive=adopted_by_another_query)
    journaled = False

    def dies_after_its_status_check(method: str, key: str) -> None:
        nonlocal journaled
        if method == "create" and key == "batches/000000000001/00000.arrow":
            journaled = True
        elif journaled and method == "read" and key.endswith("/_plan.json"):
            raise Crash

    first = journal_with(location, options, after=dies_after_its_status_check)
    with pytest.raises(Crash):
        list(read_partition(part, client_factory=lambda: sqs, journal=first))
    entry = journal.entries.read(1, 0)
    assert entry is not None and ids_of(entry) == [m["MessageId"] for m in ours]

    def forbidden() -> Any:
        raise AssertionError("the retry finds its entry; it must not receive")

    def record_fails(method: str, key: str) -> None:
        if record == "failed" and method == "create" and "/attempts/" in key:
            raise JournalError("simulated: the attempt's record cannot be written")

    again = journal_with(location, options, before=record_fails)
    retry = rows(read_partition(part, client_factory=forbidden, journal=again))
    assert retry.num_rows == 0
    assert released(sqs) == [], "the adoption may hold them (copying): nothing released"


def test_a_redelivery_held_only_by_an_entry_written_after_its_batch_was_retired_is_kept(
    location: str,
) -> None:
    """Found by the simulation (``python -m sim --seed 9898 --unkind all``, 1 lost): tasks of a
    dead driver run batch 4 while a new run retires and adopts it, before receiver 0 of the
    dead run journals; receiver 0 then journals message 1 anyway (delivered by nobody: the
    adoption read the entries already). Message 1 comes back to a late attempt of receiver 1
    of the same batch. That attempt must not drop it as held by its batch: deleting it, or
    only putting it in the duplicate window (its handle may be stale: the delete then does
    nothing, and the window drops the message when it comes back), loses it."""
    options = options_for(location)
    journal = Journal(location, options)
    journal.plans.write(BatchPlan(4, (ReceiverPlan(0, 10), ReceiverPlan(1, 10)), pending=(4,)))
    part = ReceiverPartition(4, 1, 10, QUEUE_URL, options)
    again, other = sqs_message(1, receive_count=2), sqs_message(2)
    sqs = FakeSqs(script=[[again, other], []])
    receive = sqs.receive_message

    def receive_while_the_batch_is_adopted(**kwargs: Any) -> Any:
        answer = receive(**kwargs)
        if journal.entries.read(4, 0) is None:
            journal.batches.retire(4)
            journal.entries.write(4, 0, messages_to_table([sqs_message(1)], QUEUE_URL))
            # Another attempt of receiver 1 journaled first, without message 1.
            journal.entries.write(4, 1, messages_to_table([other], QUEUE_URL))
        return answer

    sqs.receive_message = receive_while_the_batch_is_adopted  # type: ignore[method-assign]
    list(read_partition(part, client_factory=lambda: sqs, journal=Journal(location, options)))

    assert [action for action, _ in sqs.batch_calls] == ["visibility"], "nothing deleted"
    assert released(sqs) == [again["ReceiptHandle"]], "what the winner lacks goes back"
    assert journal.store.list("window") == [], "no window segment holds it"


@pytest.mark.parametrize("batch_1", ["as planned", "planned again"])
def test_a_redelivery_held_in_a_pending_batch_planned_again_is_kept(
    location: str, batch_1: str
) -> None:
    """Found by the simulation (``python -m sim --seed 204695 --unkind all,replans``, 1 lost):
    batch 2 was planned with batch 1 pending. Batch 1 was then adopted and removed, and a
    driver that had lost the journal while paused planned it again. A straggler of batch 1's
    first plan journaled message 1 there (it removes that entry once it reads the new plan).
    Message 1 comes back to batch 2's receiver, which must not drop it as held by batch 1: it
    would delete it, delivered by nobody. The plan of batch 2 names the identity batch 1's
    plan had, and a plan of another identity is not that one. With batch 1 as planned, the
    same redelivery is dropped and deleted (the check that is at stake)."""
    options = options_for(location)
    journal = Journal(location, options)
    journal.plans.write(BatchPlan(1, (ReceiverPlan(0, 10),), plan_id="first"))
    journal.plans.write(
        BatchPlan(
            2,
            (ReceiverPlan(0, 10),),
            pending=(1, 2),
            plan_id="b2",
            pending_plans=((1, "first"),),
        )
    )
    if batch_1 == "planned again":
        journal.batches.retire(1)
        journal.batches.remove(1)
        journal.plans.write(BatchPlan(1, (ReceiverPlan(0, 3),), plan_id="second"))
    journal.entries.write(1, 0, messages_to_table([sqs_message(1)], QUEUE_URL))
    again = sqs_message(1, receive_count=2)
    sqs = FakeSqs(script=[[again], []])
    part = ReceiverPartition(2, 0, 10, QUEUE_URL, options, plan_id="b2")
    out = rows(read_partition(part, client_factory=lambda: sqs, journal=Journal(location, options)))

    deleted = [e["ReceiptHandle"] for e in sqs.deleted()]
    if batch_1 == "planned again":
        assert ids_of(out) == [again["MessageId"]], "batch 2 delivers it"
        assert deleted == []
    else:
        assert out.num_rows == 0, "batch 1 delivers it"
        assert deleted == [again["ReceiptHandle"]]


# -- a journal write whose outcome is unknown ------------------------------------------------------


def _lost_response(method: str, key: str) -> None:
    if method == "create" and key.endswith("/00000.arrow"):
        raise JournalOutcomeUnknown("Cannot write journal object: ReadTimeoutError")


def _receive_into_a_failing_write(location: str, when: str) -> tuple[Any, Any, FakeSqs]:
    """Receiver 0 of batch 1, with four messages waiting, runs into ``_lost_response`` on its
    entry write (``before`` or ``after`` the write's effect). Returns the options, the partition
    and the SQS client."""
    options = options_for(location)
    part = planned(Journal(location, options), options)
    sqs = FakeSqs(available=4)
    journal = journal_with(location, options, **{when: _lost_response})
    with pytest.raises(JournalOutcomeUnknown):
        list(read_partition(part, client_factory=lambda: sqs, journal=journal))
    return options, part, sqs


def test_a_lost_response_to_the_entry_write_releases_nothing_and_the_retry_replays(
    location: str,
) -> None:
    options, part, sqs = _receive_into_a_failing_write(location, "after")

    # The write happened: releasing would have made journaled messages visible (a duplicate).
    assert released(sqs) == []
    journal = Journal(location, options)
    entry = journal.entries.read(1, 0)
    assert entry is not None and entry.num_rows == 4

    def forbidden() -> Any:
        raise AssertionError("the retry replays; it must not receive")

    retry = rows(read_partition(part, client_factory=forbidden, journal=journal))
    assert ids_of(retry) == ids_of(entry)


def test_a_failure_of_unknown_outcome_before_the_write_also_releases_nothing(location: str) -> None:
    options, _, sqs = _receive_into_a_failing_write(location, "before")

    # Whether it landed is unknown to the receiver: its messages stay invisible until the
    # visibility timeout, and the retry (which finds no entry) receives others.
    assert released(sqs) == []
    assert Journal(location, options).entries.read(1, 0) is None


# -- a retried deleteAfterJournal task -------------------------------------------------------------


class DiesOnFirstDelete(FakeSqs):
    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        raise Crash


def test_a_retried_delete_after_journal_task_does_not_journal_its_own_parts_twice(
    location: str,
) -> None:
    """Attempt 1 journals a part and dies before deleting it; SQS hands those messages to the
    retry again (new handles). They are already in the receiver's rows: the retry deletes them
    with the fresh handles and journals only new messages."""
    options = options_for(location, deleteAfterJournal="true")
    part = planned(Journal(location, options), options, limit=20)
    first = [sqs_message(n) for n in range(5)]
    with pytest.raises(Crash):
        list(
            read_partition(
                part,
                client_factory=lambda: DiesOnFirstDelete(script=[first]),
                journal=Journal(location, options),
            )
        )

    again = [sqs_message(n, receive_count=2) for n in range(5)]
    new = [sqs_message(n) for n in (10, 11, 12)]
    sqs = FakeSqs(script=[again, new, []])
    out = rows(read_partition(part, client_factory=lambda: sqs, journal=Journal(location, options)))

    expected = [m["MessageId"] for m in first + new]
    assert sorted(ids_of(out)) == sorted(expected)
    deleted = [
        e["ReceiptHandle"]
        for action, entries in sqs.batch_calls
        for e in entries
        if action == "delete"
    ]
    assert set(deleted) >= {m["ReceiptHandle"] for m in again}
    entry = Journal(location, options).entries.read(1, 0)
    assert entry is not None and sorted(ids_of(entry)) == sorted(expected)


def test_a_concurrent_delete_after_journal_attempt_stops_at_a_taken_part(location: str) -> None:
    """Two attempts interleave their parts: every part either attempt created is below the seal
    and in the entry, so no message an attempt deleted is left out of the rows."""
    options = options_for(location, deleteAfterJournal="true")
    part = planned(Journal(location, options), options, limit=30)
    journal = Journal(location, options)
    theirs = messages_to_table([sqs_message(n) for n in (50, 51)], QUEUE_URL)

    def twin_writes_next_part() -> None:
        # The twin journals part 1 while we are between our parts 0 and 1.
        if len(sqs.receive_calls) == 2:
            journal.entries.write_part(1, 0, 1, theirs)

    sqs = FakeSqs(
        script=[[sqs_message(0)], [sqs_message(1)], [sqs_message(2)], []],
        on_receive=twin_writes_next_part,
    )
    out = rows(read_partition(part, client_factory=lambda: sqs, journal=journal))

    ids = ids_of(out)
    assert sorted(ids) == sorted([sqs_message(0)["MessageId"], *ids_of(theirs)])
    # Message 1 lost the race for part 1: handed back, never deleted.
    deleted = {
        e["ReceiptHandle"]
        for action, entries in sqs.batch_calls
        for e in entries
        if action == "delete"
    }
    assert sqs_message(1)["ReceiptHandle"] not in deleted
    assert sqs_message(1)["ReceiptHandle"] in released(sqs)


# -- orphan adoption interrupted by a crash --------------------------------------------------------


@pytest.mark.parametrize(
    "crash_at",
    [
        ("create", "batches/000000000007/10001.arrow"),  # after the first copy
        ("delete", "batches/000000000005/00000.arrow"),  # after every copy, mid-removal
    ],
)
def test_two_orphan_adoptions_with_a_crash_between_deliver_each_entry_once(
    location: str, crash_at: tuple[str, str]
) -> None:
    options = options_for(location, numPartitions="2")
    journal = Journal(location, options)
    orphans = {
        (5, 0): [sqs_message(n) for n in (0, 1)],
        (5, 1): [sqs_message(2)],
        (6, 0): [sqs_message(n) for n in (3, 4)],
    }
    journal.plans.write(BatchPlan(5, (ReceiverPlan(0, 2), ReceiverPlan(1, 2))))
    journal.plans.write(BatchPlan(6, (ReceiverPlan(0, 2), ReceiverPlan(1, 2))))
    for (batch, receiver), messages in orphans.items():
        journal.entries.write(batch, receiver, messages_to_table(messages, QUEUE_URL))
    # Spark logged batch 7 (4 -> 7) in a run that died before planning it.
    journal.state.write(JournalState(planned_batch=7, acked_batch=4))

    def crash(method: str, key: str) -> None:
        if (method, key) == crash_at:
            raise Crash

    first = Coordinator(options, FakeSqs(), QUEUE_URL, journal_with(location, options, after=crash))
    try:
        with pytest.raises(Crash):
            first.plan({"batch": 4}, {"batch": 7})
    finally:
        first.close()

    for _ in range(2):  # the restart, and any later replay of batch 7
        state = Coordinator(options, FakeSqs(), QUEUE_URL, Journal(location, options))
        try:
            parts = state.plan({"batch": 4}, {"batch": 7})
        finally:
            state.close()
        assert [p.receiver for p in parts] == [0, 1, 10000, 10001, 10002]

    assert journal.batches.list() == [7]
    delivered = {
        receiver: ids_of(journal.entries.read(7, receiver)) for receiver in (10000, 10001, 10002)
    }
    assert delivered == {
        10000: [m["MessageId"] for m in orphans[(5, 0)]],
        10001: [m["MessageId"] for m in orphans[(5, 1)]],
        10002: [m["MessageId"] for m in orphans[(6, 0)]],
    }


def test_an_adoption_whose_chosen_entry_a_deposed_driver_removed_copies_that_driver_s_copy(
    location: str,
) -> None:
    """Found by the simulation (seeds 3524 and 3775 with --poison --unkind all): a driver that
    lost the journal while paused (batch 6's plan adopts receiver 0 of orphan 5, the copy
    exists) goes on after the pause and removes batch 5, its adoption finished, after the new
    owner planned batch 7 with both orphans and chose the original (5, 0) over the copy. The
    copy must deliver its messages: before, the vanished source became an empty entry, the
    copy was removed with batch 6, and the messages were lost (deleted as duplicates of a held
    message, or by the acknowledgement)."""
    options = options_for(location, numPartitions="2")
    journal = Journal(location, options)
    messages = [sqs_message(n) for n in (0, 1)]
    journal.plans.write(BatchPlan(5, (ReceiverPlan(0, 2),)))
    journal.entries.write(5, 0, messages_to_table(messages, QUEUE_URL))
    # The paused driver's new batch 6 adopted (5, 0) and copied it; it has not removed 5 yet.
    journal.plans.write(BatchPlan(6, (ReceiverPlan(0, 0), ReceiverPlan(10000, 0, (5, 0)))))
    journal.entries.write(6, 10000, messages_to_table(messages, QUEUE_URL))
    journal.entries.write(6, 0, messages_to_table([sqs_message(2)], QUEUE_URL))
    journal.state.write(JournalState(planned_batch=7, acked_batch=4))

    def deposed_driver_removes_batch_5(method: str, key: str) -> None:
        if (method, key) == ("create", "batches/000000000007/_plan.json"):
            Journal(location, options).batches.remove(5)

    state = Coordinator(
        options,
        FakeSqs(),
        QUEUE_URL,
        journal_with(location, options, after=deposed_driver_removes_batch_5),
    )
    try:
        parts = state.plan({"batch": 4}, {"batch": 7})
    finally:
        state.close()
    stored = journal.plans.read(7)
    assert stored is not None
    assert {r.receiver: r.adopt_from for r in stored.receivers if r.adopt_from} == {
        10000: (5, 0),
        10001: (6, 0),
    }, "the plan chose the original, which the deposed driver then removed"
    assert [p.receiver for p in parts] == [0, 1, 10000, 10001]
    assert journal.batches.list() == [7]
    assert ids_of(journal.entries.read(7, 10000)) == [m["MessageId"] for m in messages]
    assert ids_of(journal.entries.read(7, 10001)) == [sqs_message(2)["MessageId"]]


class _Lease:
    """``Lease.confirm`` as the coordinator sees it: raises from the ``fail_from``-th call on,
    as once another query took the journal over."""

    owner = "paused-driver"

    def __init__(self) -> None:
        self.calls = 0
        self.fail_from: int | None = None

    def confirm(self) -> None:
        self.calls += 1
        if self.fail_from is not None and self.calls >= self.fail_from:
            raise JournalInUseError("another query took the journal over (injected)")

    def renew(self) -> None:
        pass

    def release(self) -> None:
        pass


def test_a_driver_paused_before_its_plan_s_create_hands_out_and_adopts_nothing(
    location: str,
) -> None:
    """The driver confirms its lease, then pauses (GC, a frozen VM) until another query has
    taken the journal over, then creates batch 7's plan, which adopts an orphan: it confirms
    its lease again before it copies the orphan's entries or hands Spark any receiver."""
    options = options_for(location, numPartitions="2")
    journal = Journal(location, options)
    journal.plans.write(BatchPlan(5, (ReceiverPlan(0, 2),)))
    journal.entries.write(5, 0, messages_to_table([sqs_message(n) for n in (0, 1)], QUEUE_URL))
    journal.state.write(JournalState(planned_batch=5, acked_batch=4))
    lease = _Lease()
    paused = Coordinator(options, FakeSqs(available=10), QUEUE_URL, journal, lease)
    try:
        end = paused.latest_offset({"batch": 4})
        assert end["batch"] == 6
        # The confirm before planning passes; the one after the create finds the takeover.
        lease.fail_from = lease.calls + 2
        with pytest.raises(JournalInUseError):
            paused.plan({"batch": 4}, end)
    finally:
        paused.close()
    assert journal.plans.read(6) is not None
    assert journal.entries.read(6, 10000) is None, "nothing adopted"
    orphan = journal.entries.read(5, 0)
    assert orphan is not None and orphan.num_rows == 2, "the orphan's entry is where it was"


@pytest.mark.parametrize("marker", ["retirement kept", "removed whole"])
def test_a_batch_a_pending_plan_retired_is_not_acknowledged_whatever_was_written_into_it(
    location: str, marker: str
) -> None:
    """Found by the simulation (``python -m sim --seed 206321 --unkind all,replans``, 8 lost):
    a second query's batch 2 retired batch 1 (nothing journaled to adopt yet) and removed it.
    A driver that had lost the journal while paused then planned batch 1 again, and a
    straggler of batch 1's first plan journaled 3 messages into it and died before it read
    that plan and removed its entry. The next start found batch 1 planned, took it for pending
    and, with batch 2 committed, acknowledged it: its messages deleted, delivered by nobody.
    A batch a pending plan retired is delivered by that plan's batch: it is not pending, and
    what was written into it later is never acknowledged (its messages come back)."""
    options = options_for(location, numPartitions="2")
    journal = Journal(location, options)
    journal.state.write(JournalState(planned_batch=2, acked_batch=0))
    journal.plans.write(BatchPlan(2, (ReceiverPlan(0, 5),), retires=(1,), plan_id="b2"))
    journal.entries.write(2, 0, messages_to_table([sqs_message(9)], QUEUE_URL))
    if marker == "retirement kept":
        journal.batches.retire(1)
    journal.plans.write(BatchPlan(1, (ReceiverPlan(0, 10),), plan_id="again"))
    stray = [sqs_message(n) for n in range(3)]
    journal.entries.write(1, 0, messages_to_table(stray, QUEUE_URL))
    sqs = FakeSqs(available=4)
    restarted = Coordinator(options, sqs, QUEUE_URL, journal)
    try:
        end = restarted.latest_offset({"batch": 2})
        parts = restarted.plan({"batch": 2}, end)
    finally:
        restarted.close()

    deleted = {e["ReceiptHandle"] for e in sqs.deleted()}
    assert not deleted & {m["ReceiptHandle"] for m in stray}, "nothing of batch 1 deleted"
    plan = journal.plans.read(end["batch"])
    assert plan is not None and parts
    assert [a.batch for a in plan.acks] == [2], "batch 2 alone is acknowledged"
    assert 1 not in plan.pending


# -- executors that cannot see the driver's journal ------------------------------------------------


def test_a_local_journal_the_executor_cannot_see_fails_with_the_fix(tmp_path: Path) -> None:
    driver_side = str(tmp_path / "driver" / "journal")
    options = options_for(driver_side)
    part = planned(Journal(driver_side, options), options)
    # The executor's /tmp/... is another machine's disk: same path string, other files.
    executor_side = Journal(str(tmp_path / "executor" / "journal"), options)

    with pytest.raises(JournalError, match=r"plan is not in journalLocation.*s3://"):
        list(
            read_partition(part, client_factory=lambda: FakeSqs(available=3), journal=executor_side)
        )


# -- create-if-absent on the store itself ----------------------------------------------------------


def test_racing_creates_of_one_key_have_exactly_one_winner(location: str) -> None:
    store = open_store(location, options_for(location).connection)
    barrier = threading.Barrier(8)
    results: list[bool] = []

    def race(n: int) -> None:
        barrier.wait(30)
        results.append(store.create("batches/000000000001/00000.arrow", f"writer {n}".encode()))

    threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [False] * 7 + [True]
    winner = results.index(True)
    assert store.read("batches/000000000001/00000.arrow") is not None
    assert winner >= 0


def test_a_batch_plan_is_fixed_by_its_first_writer(location: str) -> None:
    journal = Journal(location, options_for(location))
    first = BatchPlan(3, (ReceiverPlan(0, 5), ReceiverPlan(1, 5)))
    later = BatchPlan(3, tuple(ReceiverPlan(r, 3) for r in range(4)))
    assert journal.plans.write(first) == first
    # A restart with numPartitions=4 plans the same batch again: the stored plan wins.
    assert journal.plans.write(later) == first
    assert journal.plans.read(3) == first


def test_a_replay_after_a_restart_with_other_options_uses_the_stored_plan(location: str) -> None:
    """Batch 1 was planned with 2 receivers and a limit of 10; the driver died before Spark
    committed it, and the query restarts with 4 receivers and a limit of 100. The replay plans
    the first run's receivers and limits: new receivers would receive fresh messages that a
    write-then-skip sink drops (and the acknowledgement then deletes)."""
    first = options_for(location, numPartitions="2", maxMessagesPerTrigger="10")
    # The first run's latestOffset numbered batches 1 and 2 (Spark logged both).
    StateMarkers(Journal(location, first)).advance(planned=2)
    state = Coordinator(first, FakeSqs(), QUEUE_URL, Journal(location, first))
    try:
        planned_first = state.plan({"batch": 0}, {"batch": 1})
    finally:
        state.close()

    later = options_for(location, numPartitions="4", maxMessagesPerTrigger="100")
    restarted = Coordinator(later, FakeSqs(), QUEUE_URL, Journal(location, later))
    try:
        replayed = restarted.plan({"batch": 0}, {"batch": 1})
        # New options apply from the next new batch.
        following = restarted.plan({"batch": 1}, {"batch": 2})
    finally:
        restarted.close()
    assert [(p.receiver, p.max_messages) for p in planned_first] == [(0, 5), (1, 5)]
    assert [(p.receiver, p.max_messages) for p in replayed] == [(0, 5), (1, 5)]
    assert [(p.receiver, p.max_messages) for p in following] == [(r, 25) for r in range(4)]


def test_two_writers_at_the_commit_point_of_one_local_entry_have_one_winner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both writers are held at the moment they make their file visible, so that both have
    done every check first: only a create-if-absent done by the file system itself (link())
    leaves exactly one winner; any check-then-write lets both win."""
    import os

    from spark_sqs.journal import LocalStore

    barrier = threading.Barrier(2)
    for name in ("link", "replace", "rename"):
        real = getattr(os, name)

        def held(src: str, dst: str, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if "/batches/" in str(dst):
                barrier.wait(30)
            return _real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, name, held)
    store = LocalStore(str(tmp_path / "journal"))
    results: list[bool] = []
    threads = [
        threading.Thread(
            target=lambda n=n: results.append(store.create("batches/1/00000.arrow", b"%d" % n))
        )
        for n in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [False, True]


def test_a_batch_removed_by_key_lists_nothing_and_leaves_the_rest_to_the_sweep(
    location: str,
) -> None:
    """A settled batch of this run goes by key: its plan, its receivers' entries and extension
    markers. What only a mishap writes (an attempt record of a replay) is left for the sweep
    (``Batches.collect``), which removes the files of finished batches that are not live."""
    from spark_sqs.driver.planning import new_plan

    journal = Journal(location, make_options(location))
    journal.plans.write(new_plan(4, 10, 2))
    journal.entries.write(4, 0, messages_to_table([sqs_message(0)], QUEUE_URL))
    journal.entries.write(4, 1, messages_to_table([sqs_message(1)], QUEUE_URL))
    journal.entries.write_extension(4, 1, until=5)
    journal.store.create("batches/000000000004/attempts/00000-run-s0-t1-n0.json", b"{}")
    journal.plans.write(new_plan(5, 10, 1))
    journal.entries.write(5, 0, messages_to_table([sqs_message(2)], QUEUE_URL))
    listed: list[str] = []
    list_ = journal.store.list
    journal.store.list = lambda prefix: (listed.append(prefix), list_(prefix))[1]  # type: ignore[method-assign]
    journal.batches.remove(4, files=journal.entries.names((0, 1)))
    assert listed == []
    assert journal.entries.read(4, 0) is None and journal.batches.is_finished(4)
    assert journal.store.list("batches/000000000004") == [
        "batches/000000000004/attempts/00000-run-s0-t1-n0.json"
    ]
    # Batch 5 is live (its plan): the sweep leaves it, whatever the bound.
    assert journal.batches.collect(6) == 1
    assert journal.batches.list() == [5]
    assert journal.entries.read(5, 0) is not None
