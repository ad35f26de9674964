"""The duplicate window (journal/window.py, executor/duplicates.py): segments, expiry, merging,
the receiver's lookup and the acknowledgement's order, on a local and an ``s3://`` journal."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest

from spark_sqs.acknowledgement.assigned import acknowledge_assigned
from spark_sqs.acknowledgement.deletes import RESEGMENT_AFTER, delete_messages
from spark_sqs.driver.planning import ReceiverPartition
from spark_sqs.errors import JournalOutcomeUnknown
from spark_sqs.executor import duplicates, filtering
from spark_sqs.executor.receiver import read_partition
from spark_sqs.executor.receiving import Clocks
from spark_sqs.journal import (
    WINDOW_DROPPED,
    AckAssignment,
    BatchPlan,
    Journal,
    JournalState,
    ReceiverPlan,
    open_store,
    window,
)
from spark_sqs.journal.plans import plan_key
from spark_sqs.schema import messages_to_table
from spark_sqs.sqs.batching import BatchResult, Entry
from tests.factories import (
    FIFO_QUEUE_URL,
    QUEUE_URL,
    make_options,
    planned_on_a_window_clock,
    sqs_message,
)
from tests.fakes import FakeSqs, HookedStore, ListHidingStore

NOW = 1_700_000_000.0


@pytest.fixture
def location(journal_location: str) -> str:
    return journal_location


@pytest.fixture
def unnumbered(monkeypatch: pytest.MonkeyPatch) -> None:
    """For tests that write segments of batches their journal never numbered (no planned
    markers), about seals and reads, not numbering: a forward past such a batch probes
    FORWARD_PROBES markers before it leaves the segment where it is
    (``test_a_batch_no_newer_number_is_found_above_keeps_its_segment``); two do here."""
    monkeypatch.setattr(window, "FORWARD_PROBES", 2)


def journal_at(location: str, **options: Any) -> tuple[Journal, HookedStore]:
    opts = make_options(location, region="us-east-1", **options)
    store = HookedStore(open_store(location, opts.connection))
    return Journal(location, opts, store=store), store


def ids(*numbers: int) -> list[str]:
    return [sqs_message(n)["MessageId"] for n in numbers]


# -- the records -----------------------------------------------------------------------------


def test_a_segment_holds_sorted_digests_not_ids() -> None:
    table = window.segment_table(["b", "a", "c", "a"])
    assert table.column_names == ["h1", "h2"]
    assert table.num_rows == 3
    h1 = table.column("h1").to_pylist()
    assert h1 == sorted(h1)
    assert window.digest("a") in set(zip(h1, table.column("h2").to_pylist(), strict=True))


def lookup(batch: int, receivers: tuple[int, ...] = (0,), start: int | None = None, **kw: Any):
    return duplicates.Lookup(batch, receivers, batch if start is None else start, **kw)


@pytest.mark.usefixtures("unnumbered")
def test_acknowledged_ids_are_seen_while_their_batch_is_in_the_plan_s_range(
    location: str,
) -> None:
    journal, store = journal_at(location)
    journal.window.write(ids(1, 2), batch=3, who="r000000")
    assert store.inner.read(window.part_key(3, "r000000", 0)) is not None
    cache = duplicates.DuplicateWindow(40)
    assert cache.refresh(store, NOW, lookup(3)) == 1
    assert cache.seen(ids(1, 3)) == set(ids(1))
    # A second refresh reads nothing new, by key: each writer's next number, absent.
    store.calls.clear()
    assert cache.refresh(store, NOW + 1, lookup(3)) == 0
    assert store.calls == [
        ("read", window.part_key(3, "r000000", 1)),
        ("read", window.part_key(3, "x", 0)),
    ]
    # Kept whatever the reader's clock says: the batch is in the range of the plan.
    cache.refresh(store, NOW + 10 * 40, lookup(4, start=3))
    assert cache.seen(ids(1)) == set(ids(1))
    # Forgotten once a plan's range starts after it.
    cache.refresh(store, NOW, lookup(4))
    assert cache.seen(ids(1)) == set()
    assert cache.size == 0


@pytest.mark.usefixtures("unnumbered")
def test_segments_of_batches_below_the_driver_s_range_are_collected(location: str) -> None:
    journal, store = journal_at(location)
    now = [0.0]
    journal.window.range = window.WindowRange(40, clock=lambda: now[0], start_from=3)
    journal.window.write(ids(1), batch=3, who="r000000")
    journal.window.write(ids(2), batch=4, who="r000000")
    journal.window.range.removed(3)
    # Within the window (and its margin) of batch 3's removal, both are kept.
    now[0] = 90.0
    assert journal.window.range.window_from(4) == 3
    assert journal.window.collect(NOW, oldest_pending=4) == 0
    now[0] = 40 + window.EXPIRY_MARGIN + 1
    assert journal.window.range.window_from(4) == 4
    assert journal.window.collect(NOW, oldest_pending=4) == 1
    assert store.inner.list("window") == [window.part_key(4, "r000000", 0)]


@pytest.mark.usefixtures("unnumbered")
def test_a_writer_numbers_its_segments_densely_and_two_attempts_both_land(location: str) -> None:
    journal, store = journal_at(location)
    journal.window.write(ids(1), batch=3, who="r000001")
    journal.window.write(ids(2), batch=3, who="r000001")
    # A concurrent attempt of the same task (its own process) tries number 0 first: taken, so
    # it takes the next free one.
    other = Journal(location, journal._options, store=store)
    other.window.write(ids(3), batch=3, who="r000001")
    assert store.inner.list("window") == [window.part_key(3, "r000001", k) for k in range(3)]
    cache = duplicates.DuplicateWindow(40)
    assert cache.refresh(store, NOW, lookup(3, (1,))) == 3
    assert cache.seen(ids(1, 2, 3, 4)) == set(ids(1, 2, 3))


@pytest.mark.usefixtures("unnumbered")
@pytest.mark.parametrize("effect", [True, False], ids=["after-the-effect", "before-it"])
def test_a_create_with_an_unknown_outcome_is_read_back(location: str, effect: bool) -> None:
    journal, store = journal_at(location)
    failed: list[str] = []

    def lose(method: str, key: str) -> None:
        if method == "create" and not failed:
            failed.append(key)
            raise JournalOutcomeUnknown("lost response")

    if effect:
        store.after = lose
    else:
        store.before = lose
    journal.window.write(ids(1), batch=3, who="r000000")
    # One segment at number 0 either way: ours found by reading it back, or created again.
    assert store.inner.list("window") == [window.part_key(3, "r000000", 0)]
    cache = duplicates.DuplicateWindow(40)
    cache.refresh(store, NOW, lookup(3))
    assert cache.seen(ids(1)) == set(ids(1))


@pytest.mark.usefixtures("unnumbered")
def test_a_sealed_batch_is_read_from_its_merged_segment_once(location: str) -> None:
    journal, store = journal_at(location)
    journal.window.write(ids(1), batch=7, who="r000000")
    journal.window.write(ids(2), batch=7, who="r000001")
    journal.window.write(ids(3), batch=7, who="x")
    # The sealer (a receiver of batch 8) seals batch 7 with the ids it acknowledges.
    seal = window.Seal(7, (0, 1), window_from=5)
    journal.window.write(ids(4), batch=8, who="r000000", seal=seal)
    merged = window.read_table(store, window.merged_key(7))
    assert merged is not None and merged.num_rows == 4
    assert window.window_from_of(merged) == 5
    assert store.inner.read(window.part_key(8, "r000000", 0)) is None, "in the seal, not a part"
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, NOW, lookup(8, start=7))
    assert cache.seen(ids(1, 2, 3, 4, 5)) == set(ids(1, 2, 3, 4))
    # Sealed: never read again.
    store.calls.clear()
    cache.refresh(store, NOW, lookup(8, start=7))
    assert all(window.merged_key(7) != k and "/000000000007/" not in k for _, k in store.calls)
    # A second sealer (a retry) finds the seal and writes its ids as a segment of its own.
    journal.window.write(ids(5), batch=8, who="r000000", seal=seal)
    cache.refresh(store, NOW, lookup(8, start=7))
    assert cache.seen(ids(5)) == set(ids(5))


@pytest.mark.usefixtures("unnumbered")
def test_a_segment_written_after_its_batch_was_sealed_is_forwarded(location: str) -> None:
    """The hole a merge that hides parts had: a straggler of batch 7 writes a segment after
    batch 7 was sealed; a worker that read the seal before must still see it."""
    journal, store = journal_at(location)
    journal.window.write(ids(1), batch=7, who="r000000")
    journal.window.write([], batch=8, who="r000000", seal=window.Seal(7, (0,)))
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, NOW, lookup(8, start=7))
    journal.window.write(ids(2), batch=7, who="r000000")
    assert store.inner.read(window.part_key(8, "x", 0)) is not None, "forwarded to batch 8"
    cache.refresh(store, NOW, lookup(8, start=7))
    assert cache.seen(ids(1, 2)) == set(ids(1, 2))


def straggler_at_seal(store: HookedStore, late_ids: list[str]) -> Any:
    """A store hook: between the sealer's reads and its create of batch 7's seal, a writer
    creates a segment of batch 7 with ``late_ids`` and finds no seal yet (once)."""
    late = window.ipc_bytes(window.segment_table(late_ids))

    def straggler(method: str, key: str) -> None:
        if method == "create" and key == window.merged_key(7):
            store.before = None
            window.create_dense(store.inner, 7, "r000000", late)

    return straggler


@pytest.mark.usefixtures("unnumbered")
def test_a_segment_created_while_the_seal_was_made_is_forwarded_by_the_sealer(
    location: str,
) -> None:
    journal, store = journal_at(location)
    journal.window.write(ids(1), batch=7, who="r000000")
    store.before = straggler_at_seal(store, ids(2))
    journal.window.write([], batch=8, who="r000001", seal=window.Seal(7, (0,)))
    merged = window.read_table(store, window.merged_key(7))
    assert merged is not None and merged.num_rows == 1
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, NOW, lookup(8, (1,), start=7))
    assert cache.seen(ids(1, 2)) == set(ids(1, 2))


@pytest.mark.parametrize("finder", ["retry", "driver"])
def test_a_segment_created_while_a_sealer_that_then_died_sealed_is_still_forwarded(
    location: str, finder: str
) -> None:
    """As above, but the sealer (a receiver of batch 8) is killed right after its seal's
    create, before its probe; Spark retries its task, whose seal finds batch 7 sealed (or no
    retry comes and the driver removes batch 7). The straggler's segment, created between the
    first sealer's reads and its create (its writer saw no seal), must still reach a reader
    that reads batch 7's seal: whoever finds the seal probes from the ends it records."""
    journal, store = journal_at(location)
    straggler = straggler_at_seal(store, ids(2))

    def killed(method: str, key: str) -> None:
        if method == "create" and key == window.merged_key(7):
            store.after = None
            raise RuntimeError("task killed")

    journal.plans.write(BatchPlan(7, (ReceiverPlan(0, 10),)))
    journal.window.write(ids(1), batch=7, who="r000000")
    store.before, store.after = straggler, killed
    seal = window.Seal(7, (0,))
    with pytest.raises(RuntimeError):
        journal.window.write([], batch=8, who="r000001", seal=seal)
    sealed = window.read_table(store, window.merged_key(7))
    assert sealed is not None and window.sealed_ends(sealed) == {"r000000": 1, "x": 0}
    if finder == "retry":
        # Spark's retry of the sealer's task.
        journal.window.write([], batch=8, who="r000001", seal=seal)
    else:
        journal.window.range = window.WindowRange(600)
        journal.batches.remove(7)
    assert store.inner.read(window.part_key(8, "x", 0)) is not None, "forwarded to batch 8"
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, NOW, lookup(8, (1,), start=7))
    assert cache.seen(ids(1, 2)) == set(ids(1, 2))


def test_a_forward_along_sealed_batches_leaves_no_copies_for_their_removals_to_multiply(
    location: str,
) -> None:
    """Found by the simulation (``python -m sim --seed 50474 --unkind all,lapses --queues 2``,
    a livelock): a forward used to leave a copy in every sealed batch it passed, and the
    removal of a sealed batch probes its seal and forwards what lies past it, again leaving a
    copy in every sealed batch after it. Along a run of sealed batches removed one after
    another the copies doubled per batch (the driver's sweep created thousands of segments
    and never ended). A straggler's late segment of batch 2 goes to batch 10, the first not
    sealed, past seven sealed batches: only the removal of batch 2 finds it again."""
    journal, store = journal_at(location)
    journal.window.range = window.WindowRange(600)
    for batch in range(2, 11):
        journal.plans.write(BatchPlan(batch, (ReceiverPlan(0, 10),)))
    for batch in range(2, 10):
        window.seal_batch(store, batch, (0,), window.segment_table(ids(batch)))
    journal.window.write(ids(99), batch=2, who="r000000")
    store.calls.clear()
    for batch in range(2, 10):
        journal.batches.remove(batch)
    created = [k for m, k in store.calls if m == "create" and k.startswith("window/")]
    # The removal of batch 2 forwards it once more: x-00000 (the straggler's forward) is
    # taken, so it lands as x-00001. Nothing else is created.
    assert created == [window.part_key(10, "x", 0), window.part_key(10, "x", 1)]
    assert store.inner.read(window.part_key(10, "x", 1)) is not None
    for batch in range(3, 10):
        assert store.inner.read(window.part_key(batch, "x", 0)) is None, f"a copy in {batch}"
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, NOW, lookup(11, start=10))
    assert cache.seen(ids(99)) == set(ids(99))


def test_a_seal_of_an_earlier_version_or_a_finished_sealer_s_is_not_probed_again(
    location: str,
) -> None:
    """The probe from a seal's recorded ends costs a GET per writer: a removal whose caller
    knows the sealer finished (the next batch's sealer reported) reads the seal alone, and a
    seal without ends (an earlier version's) is probed nowhere."""
    journal, store = journal_at(location)
    journal.window.range = window.WindowRange(600)
    for batch in (4, 5):
        journal.plans.write(BatchPlan(batch, (ReceiverPlan(0, 10), ReceiverPlan(1, 10))))
        window.seal_batch(store, batch, (0, 1), window.segment_table(ids(batch)))
    # An earlier version's seal of batch 6: the same digests, no ends.
    journal.plans.write(BatchPlan(6, (ReceiverPlan(0, 10),)))
    store.inner.create(window.merged_key(6), window.ipc_bytes(window.segment_table(ids(6))))
    store.calls.clear()
    journal.batches.remove(4, probed=True)
    journal.batches.remove(6)
    window_reads = [k for m, k in store.calls if m == "read" and k.startswith("window/")]
    assert window_reads == [window.merged_key(4), window.merged_key(6)]
    store.calls.clear()
    journal.batches.remove(5)
    window_reads = [k for m, k in store.calls if m == "read" and k.startswith("window/")]
    assert window_reads == [
        window.merged_key(5),
        window.part_key(5, "r000000", 0),
        window.part_key(5, "r000001", 0),
        window.part_key(5, "x", 0),
    ]


def test_a_batch_is_sealed_before_its_plan_is_removed(location: str) -> None:
    journal, store = journal_at(location)
    journal.plans.write(BatchPlan(4, (ReceiverPlan(0, 10), ReceiverPlan(1, 10))))
    journal.window.write(ids(1), batch=4, who="r000001")
    journal.window.range = window.WindowRange(600)
    journal.batches.remove(4)
    assert journal.plans.read(4) is None
    assert window.read_table(store, window.merged_key(4)) is not None
    # A reader that never saw batch 4 reads its seal.
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, time.time(), lookup(5, start=4), journal.batches.live_receivers)
    assert cache.seen(ids(1)) == set(ids(1))


def restarted_range(journal: Journal, acked: int) -> window.WindowRange:
    """The range a driver starting now builds (``Coordinator.start``), on a fresh clock."""
    return window.WindowRange(600, clock=lambda: 0.0, start_from=journal.window.start_from(acked))


@pytest.mark.parametrize("newest", ["planned", "carry"])
def test_a_driver_that_died_before_sealing_its_newest_acknowledged_batch_keeps_older_ids(
    location: str, newest: str
) -> None:
    """A driver dies between batch 3's acknowledged marker and its seal (``before_removal``).
    Batch 2, acknowledged and removed a moment before, holds ids deleted within the window.
    The next driver's range must still start at or below 2: from batch 3's plan (the
    ``windowFrom`` it was planned with), or, for a batch with no plan (a carry batch), from
    batch 2's seal. Starting after the acknowledged batch forgot batch 2: its seal was swept
    at that start and a redelivered copy reached the sink (seed 25153, ``--unkind all``)."""
    journal, store = journal_at(location)
    window.seal_batch(store, 1, (0,), window.segment_table(ids(1)), window_from=1)
    window.seal_batch(store, 2, (0,), window.segment_table(ids(2)), window_from=1)
    if newest == "planned":
        journal.plans.write(BatchPlan(3, (ReceiverPlan(0, 10),), window_from=2))
    journal.window.write(ids(3), batch=3, who="r000000")
    assert store.inner.read(window.merged_key(3)) is None, "batch 3 not sealed"
    store.calls.clear()
    start = journal.window.start_from(3)
    assert start == (2 if newest == "planned" else 1)
    reads = [k for m, k in store.calls if m == "read"]
    assert reads[:2] == [window.merged_key(3), plan_key(3)], "by key"
    assert not [c for c in store.calls if c[0] == "list"]
    journal.window.range = restarted_range(journal, 3)
    # Only what is below the recorded range goes (batch 1's seal, when batch 3's plan says 2).
    assert journal.window.collect(NOW, oldest_pending=3) == start - 1
    assert store.inner.read(window.merged_key(2)) is not None, "batch 2's seal is kept"
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(
        store,
        NOW,
        lookup(4, start=journal.window.range.window_from(3)),
        journal.batches.live_receivers,
    )
    assert cache.seen(ids(2)) == set(ids(2)), "a copy of batch 2's id is dropped"


def test_a_starting_driver_reads_a_sealed_batch_s_range_from_its_seal_alone(
    location: str,
) -> None:
    journal, store = journal_at(location)
    window.seal_batch(store, 5, (0,), window.segment_table(ids(1)), window_from=3)
    store.calls.clear()
    assert journal.window.start_from(5) == 3
    assert store.calls == [("read", window.merged_key(5))]
    # Nothing recorded within START_PROBES batches below: their segments were swept.
    store.calls.clear()
    assert journal.window.start_from(40) == 41
    assert len(store.calls) == 1 + 1 + 2 * (window.START_PROBES - 1)


def test_a_writer_stalled_past_the_window_forwards_the_segment_of_its_swept_batch(
    location: str,
) -> None:
    """The stall residual: a writer of batch 4 checks that its batch is live, stalls for more
    than the window and its margin, and creates its segment once batch 4 was sealed, removed
    and its segments swept (no seal any more, below every new plan's windowFrom). The segment
    goes on to the newest numbered batch, where a later reader finds it."""
    journal, store = journal_at(location)
    clock = planned_on_a_window_clock(journal, 30)
    journal.plans.write(BatchPlan(4, (ReceiverPlan(0, 10),)))
    journal.plans.write(BatchPlan(30, (ReceiverPlan(0, 10),)))
    journal.window.write(ids(1), batch=4, who="r000000")
    # The writer's check, then its stall: the driver seals and removes batch 4 and, once the
    # window and its margin passed, sweeps its segments.
    assert journal.batches.live_receivers(4) == (0,)
    journal.batches.remove(4)
    clock[0] = 600 + window.EXPIRY_MARGIN + 1
    assert journal.window.collect(time.time(), oldest_pending=30) >= 2
    assert window.read_table(store, window.merged_key(4)) is None
    journal.window.write(ids(2), batch=4, who="r000000")
    assert store.inner.read(window.part_key(30, "x", 0)) is not None, "forwarded to batch 30"
    cache = duplicates.DuplicateWindow(600)
    start = journal.window.range.window_from(30)
    assert start == 30
    cache.refresh(store, time.time(), lookup(31, start=start), journal.batches.live_receivers)
    assert cache.seen(ids(2)) == set(ids(2))


def test_a_stalled_writer_of_an_idle_queue_forwards_into_the_next_batch_to_be_planned(
    location: str,
) -> None:
    """As above with every batch removed and swept (an idle queue): the segment goes on to the
    newest numbered batch, then the first not numbered yet, whose receivers read it."""
    journal, store = journal_at(location)
    clock = planned_on_a_window_clock(journal, 30)
    for batch in (4, 30):
        journal.plans.write(BatchPlan(batch, (ReceiverPlan(0, 10),)))
        journal.window.write(ids(batch), batch=batch, who="r000000")
        journal.batches.remove(batch)
    clock[0] = 600 + window.EXPIRY_MARGIN + 1
    assert journal.window.collect(time.time(), oldest_pending=31) >= 4
    journal.window.write(ids(2), batch=4, who="r000000")
    assert store.inner.read(window.part_key(31, "x", 0)) is not None, "forwarded to batch 31"
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, time.time(), lookup(31, start=31), journal.batches.live_receivers)
    assert cache.seen(ids(2)) == set(ids(2))


def test_a_segment_forwarded_into_a_number_that_is_never_planned_is_still_read(
    location: str,
) -> None:
    """An idle queue: the driver deleted batch 7 itself, sealed and removed it. A straggler of
    batch 7 deletes a redelivery afterwards: its segment goes on to batch 8, not numbered yet.
    The driver numbers 8 and dies before Spark logs the offset; the restart numbers and plans
    9 (its windowFrom from batch 7's seal). Batch 8 never gets a plan or a seal, so a reader
    of 9 must still read its forwarded segment, or a copy SQS hands out is delivered again."""
    journal, store = journal_at(location)
    planned_on_a_window_clock(journal, 7)
    journal.plans.write(BatchPlan(7, (ReceiverPlan(0, 10),)))
    journal.window.write(ids(1), batch=7, who="r000000")
    journal.batches.remove(7)
    assert window.read_table(store, window.merged_key(7)) is not None
    journal.window.write(ids(2), batch=7, who="r000000")
    assert store.inner.read(window.part_key(8, "x", 0)) is not None, "forwarded to batch 8"
    # The dead driver's number, then the restart's, which is planned.
    journal.state.write(JournalState(planned_batch=8), JournalState(planned_batch=7))
    journal.state.write(JournalState(planned_batch=9), JournalState(planned_batch=8))
    start = journal.window.start_from(7)
    assert start <= 8
    journal.plans.write(BatchPlan(9, (ReceiverPlan(0, 10),), window_from=start))
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, time.time(), lookup(9, start=start), journal.batches.live_receivers)
    assert cache.seen(ids(1, 2)) == set(ids(1, 2))


class _DriverDeletes:
    """The driver's batch deleter: every delete succeeds."""

    queue_url = QUEUE_URL

    def delete(self, entries: Any) -> BatchResult:
        return BatchResult(succeeded=[e.message_id for e in entries])


def test_a_restart_after_the_acked_marker_of_an_unsealed_batch_keeps_earlier_batches_in_range(
    location: str,
) -> None:
    """Batch 5's messages are deleted by the driver (sealed, removed, in the range for the
    window). Batch 6 holds no message: the driver acknowledges it without a delete, so no
    seal precedes its acknowledged marker, and the driver is killed between that marker and
    the seal its removal makes. The restart's range must still hold batch 5: a copy of one of
    its messages SQS hands out within the window is dropped."""
    from spark_sqs.acknowledgement.acknowledger import Acknowledger
    from spark_sqs.acknowledgement.rule import By

    journal, store = journal_at(location)
    clock = planned_on_a_window_clock(journal, 6)
    for batch, messages in ((5, [sqs_message(1)]), (6, [])):
        journal.plans.write(BatchPlan(batch, (ReceiverPlan(0, 10),), window_from=5))
        journal.entries.write(batch, 0, messages_to_table(messages, QUEUE_URL))
    known = [JournalState(planned_batch=6, acked_batch=4)]

    def on_acked(batch: int, counters: Any) -> None:
        state = JournalState(planned_batch=6, acked_batch=batch)
        journal.state.write(state, known[0], metrics=counters)
        known[0] = state

    ack = Acknowledger(
        journal,
        _DriverDeletes(),  # type: ignore[arg-type]
        delete=True,
        on_acked=on_acked,
        visibility_timeout=120,
        dedupe_window=600,
        clock=lambda: clock[0],
        duplicate_window=600,
    )
    ack.start(4, {5: (0,), 6: (0,)})
    ack.acknowledge_through(5, by=By.DRIVER)
    assert window.read_table(store, window.merged_key(5)) is not None

    def killed(method: str, key: str) -> None:
        if method == "create" and key == window.merged_key(6):
            raise RuntimeError("driver killed")

    store.before = killed
    clock[0] = 10.0
    with pytest.raises(RuntimeError):
        ack.acknowledge_through(6, by=By.DRIVER)
    store.before = None
    assert journal.state.read().acked_batch == 6
    # The restart, seconds later: its range starts from the newest acknowledged batch's seal.
    start = journal.window.start_from(journal.state.read().acked_batch)
    assert start <= 5


@pytest.mark.parametrize("span", [1, 12, 60])
def test_a_worker_holds_a_few_slices_of_batches_and_forgets_them_below_the_range(
    tmp_path: Any, span: int
) -> None:
    """The worker's layout: sorted runs per slice of consecutive batches, at most
    ``MAX_SLICES``, each forgotten once its newest batch is below the plan's range; what is
    held is the range and at most a slice more, whatever the readers' clocks."""
    store = open_store(str(tmp_path / "journal"))
    cache = duplicates.DuplicateWindow(600)
    width = max(1, -(-span // duplicates.SLICES))
    for batch in range(1, 121):
        table = window.segment_table(ids(2 * batch, 2 * batch + 1))
        store.create(window.merged_key(batch), window.ipc_bytes(table))
        start = max(1, batch - span + 1)
        cache.refresh(store, NOW - batch * 1000, lookup(batch + 1, start=start))
        assert cache.slices <= duplicates.MAX_SLICES
        in_range = ids(*(2 * b for b in range(start, batch + 1)))
        assert cache.seen(in_range) == set(in_range), "the range is held"
        # Two ids a batch: the range and at most two slices' spans below it.
        assert cache.size <= 2 * (batch - start + 1 + 2 * width), "and little more"
    assert cache.seen(ids(2)) == set(), "batch 1 forgotten"


def test_a_range_that_grows_merges_its_narrow_first_slices(tmp_path: Any) -> None:
    store = open_store(str(tmp_path / "journal"))
    cache = duplicates.DuplicateWindow(600)
    for batch in range(1, 101):
        store.create(window.merged_key(batch), window.ipc_bytes(window.segment_table(ids(batch))))
        cache.refresh(store, NOW, lookup(batch + 1, start=1))
        assert cache.slices <= duplicates.MAX_SLICES
    assert cache.seen(ids(*range(1, 101))) == set(ids(*range(1, 101)))
    assert cache.size == 100


def stalled_writer_of(journal: Journal, clock: list[float], planned: int, idle: bool) -> int:
    """Batches 4 and ``planned`` have plans (every number to ``planned`` handed out); the
    writer of batch 4 checks it is live and stalls while the driver removes batch 4 (and,
    ``idle``, ``planned``: no batch live) and, once the window and its margin passed, sweeps
    them. Returns the oldest batch not removed, where a forwarded segment must be read."""
    for batch in (4, planned):
        journal.plans.write(BatchPlan(batch, (ReceiverPlan(0, 10),)))
    journal.window.write(ids(1), batch=4, who="r000000")
    assert journal.batches.live_receivers(4) == (0,)
    for batch in (4, planned) if idle else (4,):
        journal.batches.remove(batch)
    clock[0] = 600 + window.EXPIRY_MARGIN + 1
    oldest = planned + 1 if idle else planned
    assert journal.window.collect(time.time(), oldest_pending=oldest) >= 2
    assert window.read_table(journal.store, window.merged_key(4)) is None
    return oldest


def read_by(journal: Journal, store: Any, oldest: int, planned: int) -> set[str]:
    """What a receiver of the batch after ``planned`` drops of ids 1 and 2 (its plan's
    ``windowFrom``: ``oldest``)."""
    assert journal.window.range is not None
    cache = duplicates.DuplicateWindow(600)
    start = journal.window.range.window_from(oldest)
    assert start == oldest
    cache.refresh(
        store, time.time(), lookup(planned + 1, start=start), journal.batches.live_receivers
    )
    return cache.seen(ids(1, 2))


@pytest.mark.parametrize("idle", [False, True], ids=["live", "idle"])
def test_a_stalled_writer_forwards_by_key_while_listings_lag_the_planned_markers(
    location: str, idle: bool
) -> None:
    """A writer stalled past the window finds where its segment goes by reading the planned
    markers by key: a listing that shows none of them yet (a store whose listings lag) once
    kept it in its swept batch, where no reader looks."""
    opts = make_options(location, region="us-east-1")
    store = ListHidingStore(
        open_store(location, opts.connection), lambda key: key.startswith("state/planned-")
    )
    journal = Journal(location, opts, store=store)
    clock = planned_on_a_window_clock(journal, 30)
    oldest = stalled_writer_of(journal, clock, 30, idle)
    store.calls.clear()
    journal.window.write(ids(2), batch=4, who="r000000")
    assert [k for m, k in store.calls if m == "list"] == []
    assert store.inner.read(window.part_key(oldest, "x", 0)) is not None
    assert read_by(journal, store, oldest, 30) == set(ids(2))


@pytest.mark.parametrize("planned", [30, 100])
def test_a_stalled_writer_reads_one_planned_marker_per_16_batches_and_lists_nothing(
    location: str, planned: int
) -> None:
    """The markers of the newest 16 numbers are kept: from the stalled writer's batch, every
    16th marker is read until one exists (one GET per 16 batches numbered in the stall), then
    the following ones up to the first absent one (the newest number)."""
    journal, store = journal_at(location)
    clock = planned_on_a_window_clock(journal, planned)
    oldest = stalled_writer_of(journal, clock, planned, idle=False)
    store.calls.clear()
    journal.window.write(ids(2), batch=4, who="r000000")
    hit = next(4 + 16 * j for j in range(1, planned) if 4 + 16 * j > planned - 16)
    markers = [4, *range(20, hit, 16), *range(hit, planned + 2)]
    assert [(m, k) for m, k in store.calls if m != "create"] == [
        ("read", window.merged_key(4)),
        ("read", plan_key(4)),
        *(("read", f"state/planned-{n:012d}") for n in markers),
        ("read", window.merged_key(planned)),
        ("read", plan_key(planned)),
    ]
    assert len(markers) == {30: 1 + 1 + 11, 100: 1 + 6 + 1}[planned]
    assert read_by(journal, store, oldest, planned) == set(ids(2))


def test_a_marker_a_dead_driver_left_behind_does_not_keep_a_segment_in_a_swept_batch(
    location: str,
) -> None:
    """The driver that numbered batch 20 died between its marker's create and the removal of
    batch 4's (the next driver removes the one below its own number only): batch 4's marker
    stays. A stalled writer of batch 4 must not take batch 5 (marker absent) for one not
    numbered yet: batch 4's neighbours are gone, so it is no newest number."""
    journal, store = journal_at(location)
    clock = planned_on_a_window_clock(journal, 19)

    def dies(method: str, key: str) -> None:
        if method == "delete" and key == "state/planned-000000000004":
            raise RuntimeError("driver killed")

    store.before = dies
    with pytest.raises(RuntimeError):
        journal.state.write(JournalState(planned_batch=20), JournalState(planned_batch=19))
    store.before = None
    known = journal.state.read()
    assert known.planned_batch == 20
    for n in range(21, 31):
        journal.state.write(JournalState(planned_batch=n), known)
        known = JournalState(planned_batch=n)
    assert store.inner.read("state/planned-000000000004") is not None
    oldest = stalled_writer_of(journal, clock, 30, idle=True)
    journal.window.write(ids(2), batch=4, who="r000000")
    assert store.inner.read(window.part_key(oldest, "x", 0)) is not None
    assert read_by(journal, store, oldest, 30) == set(ids(2))


def test_a_batch_no_newer_number_is_found_above_keeps_its_segment(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer of batch 50 of a journal that was deleted and started anew (numbered to 10
    since): no marker above it, none of its own. Its segment stays in batch 50 (its receivers
    read it once this journal plans it), after FORWARD_PROBES reads, with no LIST."""
    monkeypatch.setattr(window, "FORWARD_PROBES", 8)
    journal, store = journal_at(location)
    planned_on_a_window_clock(journal, 10)
    store.calls.clear()
    journal.window.write(ids(2), batch=50, who="r000000")
    assert store.inner.read(window.part_key(50, "r000000", 0)) is not None
    assert [k for m, k in store.calls if m in ("create", "list")] == [
        window.part_key(50, "r000000", 0)
    ]
    probes = [k for m, k in store.calls if k.startswith("state/")]
    assert probes == [f"state/planned-{50 + 16 * j:012d}" for j in range(9)]


@pytest.mark.parametrize("by", ["writer", "sealer"])
def test_a_segment_forwarded_into_a_batch_numbered_long_ago_and_never_planned_goes_on(
    location: str, by: str
) -> None:
    """Batch 5 was numbered and never planned (its driver died before Spark logged the offset;
    the restart numbered 6 on), and more than 16 numbers were handed out since: its planned
    marker is gone, as a batch's not numbered yet is absent. Batch 4 is sealed and removed
    within the window. A segment of batch 4 created after its seal (a straggler that checked
    its batch before: ``writer``), or while the seal was made (forwarded by the ``sealer``),
    goes on to batch 5, which has no plan and no seal: no reader reads it there. It once
    stayed there (an absent marker taken for a batch not numbered yet), and a copy of its ids
    reached the sink. Batch 4's marker is gone too: batch 5 was numbered, and the segment goes
    on to the newest number, found by key."""
    journal, store = journal_at(location)
    planned_on_a_window_clock(journal, 30)
    journal.plans.write(BatchPlan(4, (ReceiverPlan(0, 10),)))
    journal.window.write(ids(1), batch=4, who="r000000")
    for batch in range(6, 31):
        journal.plans.write(BatchPlan(batch, (ReceiverPlan(0, 10),)))
    # Batches 6 to 29 acknowledged, sealed and removed; 30 pending.
    for batch in range(6, 30):
        journal.batches.remove(batch)
    late = window.ipc_bytes(window.segment_table(ids(2)))
    if by == "sealer":
        # The straggler creates its segment between the sealer's reads and its create, and
        # finds no seal yet: the sealer forwards it.
        def straggler(method: str, key: str) -> None:
            if method == "create" and key == window.merged_key(4):
                store.before = None
                window.create_dense(store.inner, 4, "r000000", late)

        store.before = straggler
    journal.batches.remove(4)
    store.before = None
    assert window.read_table(store, window.merged_key(4)) is not None
    store.calls.clear()
    if by == "writer":
        journal.window.write(ids(2), batch=4, who="r000000")
        # Batch 5's marker and batch 4's are absent: 5 was numbered, and every 16th marker
        # from it is read until one exists, then the following ones (the newest number).
        # Batch 4 is sealed: batch 5's seal is read before the copy (a sealed batch is
        # passed by), and again after it.
        assert [(m, k) for m, k in store.calls if m != "create"] == [
            ("read", window.merged_key(4)),
            ("read", window.merged_key(5)),
            ("read", window.merged_key(5)),
            ("read", plan_key(5)),
            *(("read", f"state/planned-{n:012d}") for n in (5, 4, 5, *range(21, 32))),
            ("read", window.merged_key(30)),
            ("read", plan_key(30)),
        ]
    else:
        assert store.inner.read(window.part_key(4, "r000000", 1)) == late
    assert journal.window.range is not None
    start = journal.window.range.window_from(30)
    assert start <= 4, "batch 4 is in the readers' range"
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, time.time(), lookup(31, start=start), journal.batches.live_receivers)
    assert cache.seen(ids(1, 2)) == set(ids(1, 2))
    assert store.inner.read(window.part_key(30, "x", 0)) is not None, "forwarded to batch 30"


def test_a_segment_forwarded_past_the_newest_number_waits_there_for_its_receivers(
    location: str,
) -> None:
    """The other side of the rule above: batch 20 is the newest number, sealed and removed by
    the driver (an idle queue). A straggler's segment of it goes on to batch 21, not numbered
    yet: batch 20's marker exists with its 15 predecessors', so 21's absent one means what it
    says, and the segment stays for 21's receivers."""
    journal, store = journal_at(location)
    planned_on_a_window_clock(journal, 20)
    journal.plans.write(BatchPlan(20, (ReceiverPlan(0, 10),)))
    journal.batches.remove(20)
    store.calls.clear()
    journal.window.write(ids(2), batch=20, who="r000000")
    assert [(m, k) for m, k in store.calls if m != "create"] == [
        ("read", window.merged_key(20)),
        ("read", window.merged_key(21)),
        ("read", window.merged_key(21)),
        ("read", plan_key(21)),
        *(("read", f"state/planned-{n:012d}") for n in (21, *range(20, 4, -1))),
    ]
    assert store.inner.read(window.part_key(21, "x", 0)) is not None
    journal.state.write(JournalState(planned_batch=21), JournalState(planned_batch=20))
    journal.plans.write(BatchPlan(21, (ReceiverPlan(0, 10),)))
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, time.time(), lookup(21, start=20), journal.batches.live_receivers)
    assert cache.seen(ids(2)) == set(ids(2))


def test_an_earlier_version_s_segments_are_listed_once_while_live(location: str) -> None:
    journal, store = journal_at(location)
    old = window.LegacyKey(int(NOW) + 60, 3, "r000000-ack")
    store.inner.create(old.key, window.ipc_bytes(window.segment_table(ids(1))))
    gone = window.LegacyKey(int(NOW) - 1, 2, "driver")
    store.inner.create(gone.key, window.ipc_bytes(window.segment_table(ids(2))))
    assert journal.window.legacy_until(NOW) == old.expires
    cache = duplicates.DuplicateWindow(600)
    store.calls.clear()
    cache.refresh(store, NOW, lookup(4, legacy_until=old.expires))
    assert [m for m, _ in store.calls].count("list") == 1
    assert cache.seen(ids(1, 2)) == set(ids(1))
    store.calls.clear()
    cache.refresh(store, NOW + 1, lookup(4, legacy_until=old.expires))
    assert [m for m, _ in store.calls].count("list") == 0, "never again"
    # A worker whose plan says none may be live does not list at all.
    fresh = duplicates.DuplicateWindow(600)
    fresh.refresh(store, old.expires + 1, lookup(4, legacy_until=old.expires))
    assert [m for m, _ in store.calls].count("list") == 0
    # The sweep removes the expired one.
    assert journal.window.collect(NOW) == 1
    assert store.inner.list("window") == [old.key]


class _NoDeletes:
    def delete(self, entries: Any) -> Any:
        raise AssertionError("nothing to delete")


def test_nothing_is_recorded_with_the_window_off_or_for_a_fifo_queue(location: str) -> None:
    journal, store = journal_at(location)
    for seconds, queue in ((0, QUEUE_URL), (600, FIFO_QUEUE_URL)):
        delete_messages(journal, _NoDeletes(), [], window=[(i, None) for i in ids(1)],
                        queue_url=queue, duplicate_window=seconds, batch=1,
                        who="r000000")  # fmt: skip
    assert store.inner.list("window") == []
    # A FIFO queue is never looked up either: no store request at all.
    store.calls.clear()
    assert (
        duplicates.copies(
            store, location, 600, ids(1), queue_url=FIFO_QUEUE_URL, now=NOW, lookup=lookup(1)
        )
        == set()
    )
    assert store.calls == []


class _Deletes:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    def delete(self, entries: Any) -> Any:
        self.deleted += [e.message_id for e in entries]
        return BatchResult(succeeded=[e.message_id for e in entries])


def test_a_deleter_that_stalled_after_its_segment_writes_it_again_before_deleting(
    location: str,
) -> None:
    """Found by the simulation (``python -m sim --seed 6896 --unkind all``, 2 duplicated): a
    receiver wrote its segment, stalled for 72 s sealing the previous batch, then deleted. Its
    batch may be sealed and removed during such a stall, and leave the driver's range
    (``duplicateWindow`` plus a minute after its removal) before a copy of the delete comes: the
    segment written again before the delete goes on to a batch that is live then."""
    journal, store = journal_at(location)
    driver = planned_on_a_window_clock(journal, 4)  # the driver's monotonic clock
    for batch in (3, 4):
        journal.plans.write(BatchPlan(batch, (ReceiverPlan(0, 10),)))
    deleter_clock = [1000.0]  # the deleter's monotonic clock: another origin

    def stall(method: str, key: str) -> None:
        # After the segment's create: 90 s pass; the driver seals and removes batch 3.
        if method == "create" and key == window.part_key(3, "r000000", 0):
            store.after = None
            journal.batches.remove(3)
            driver[0] += 90
            deleter_clock[0] += 90

    store.after = stall
    deleter = _Deletes()
    delete_messages(journal, deleter, [[Entry(i, f"h-{i}") for i in ids(1, 2)]],
                    window=[(i, None) for i in ids(1, 2)], queue_url=QUEUE_URL,
                    duplicate_window=600, batch=3, who="r000000",
                    clock=lambda: deleter_clock[0])  # fmt: skip
    assert deleter.deleted == ids(1, 2)
    assert store.inner.read(window.part_key(3, "r000000", 1)) is not None, "written again"
    assert store.inner.read(window.part_key(4, "x", 0)) is not None, "forwarded to batch 4"
    # 599 s after the delete batch 3 is out of the range; the copy is found in batch 4.
    driver[0] += 599
    start = journal.window.range.window_from(4)
    assert start == 4
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, NOW, lookup(4, start=start), journal.batches.live_receivers)
    assert cache.seen(ids(1, 2)) == set(ids(1, 2)), "599 s after the delete"
    # A deleter that did not stall (its clock within RESEGMENT_AFTER) writes one segment.
    times = iter([deleter_clock[0], deleter_clock[0] + RESEGMENT_AFTER])
    delete_messages(journal, _Deletes(), [[Entry(i, f"h-{i}") for i in ids(3)]],
                    window=[(i, None) for i in ids(3)], queue_url=QUEUE_URL,
                    duplicate_window=600, batch=4, who="r000000",
                    clock=lambda: next(times))  # fmt: skip
    assert store.inner.read(window.part_key(4, "r000000", 0)) is not None
    assert store.inner.read(window.part_key(4, "r000000", 1)) is None


@pytest.mark.parametrize("moved", ["wall", "monotonic"])
def test_the_stall_before_a_delete_is_judged_on_the_monotonic_clock(
    location: str, moved: str
) -> None:
    """A receiver acknowledging batch 2 seals it with its segment; then its clock moves on by
    more than ``RESEGMENT_AFTER`` before the delete call. Only the monotonic clock tells a
    stall: a wall clock that jumps (an NTP step) writes nothing again."""
    journal, store = journal_at(location, duplicateWindow="600")
    journal.entries.write(2, 0, messages_to_table([sqs_message(n) for n in range(3)], QUEUE_URL))
    journal.plans.write(BatchPlan(2, (ReceiverPlan(0, 10),)))
    journal.plans.write(
        BatchPlan(3, (ReceiverPlan(0, 10),), acks=(AckAssignment(2, 0, 0, time.time() + 600),))
    )
    mono, wall = [1000.0], [NOW]

    def stall(method: str, key: str) -> None:
        if method == "create" and key == window.merged_key(2):
            if moved == "wall":
                wall[0] += 3600
            else:
                mono[0] += RESEGMENT_AFTER + 1

    store.after = stall
    sqs = FakeSqs(available=0)
    partition = ReceiverPartition(3, 0, 10, QUEUE_URL, journal._options)
    list(
        read_partition(
            partition,
            client_factory=lambda: sqs,
            journal=journal,
            clock=lambda: mono[0],
            wall_clock=lambda: wall[0],
        )
    )
    assert [e["Id"] for _, entries in sqs.batch_calls for e in entries], "deleted"
    merged = window.read_table(store, window.merged_key(2))
    assert merged is not None and merged.num_rows == 3, "the seal holds the acknowledged ids"
    again = store.inner.read(window.part_key(3, "r000000", 0))
    assert (again is not None) == (moved == "monotonic")


def test_a_reader_whose_wall_clock_runs_far_ahead_still_drops_a_copy(location: str) -> None:
    """No decision compares two hosts' clocks: a receiver whose wall clock is twice the window
    ahead of the deleter's keeps the deleted ids while their batch is in its plan's range (the
    driver's, on its monotonic clock), so a copy SQS hands out right after the delete is
    dropped. Before, the segment's expiry (the deleter's clock plus the window) had passed by
    the reader's clock."""
    journal, store = journal_at(location, duplicateWindow="600")
    journal.plans.write(BatchPlan(3, (ReceiverPlan(0, 10),)))
    # Receiver 1 of batch 4 seals batch 3 (3 % 2): the reader, receiver 0, reads its parts.
    journal.plans.write(BatchPlan(4, (ReceiverPlan(0, 10), ReceiverPlan(1, 10)), window_from=3))
    deleter = _Deletes()
    delete_messages(journal, deleter, [[Entry(i, f"h-{i}") for i in ids(1)]],
                    window=[(i, None) for i in ids(1)], queue_url=QUEUE_URL,
                    duplicate_window=600, batch=3, who="r000000")  # fmt: skip
    assert deleter.deleted == ids(1)
    sqs = FakeSqs(script=[[sqs_message(1, receive_count=2), sqs_message(2)]])
    ahead = time.time() + 2 * 600
    out = pa.Table.from_batches(
        list(
            read_partition(
                ReceiverPartition(4, 0, 10, QUEUE_URL, journal._options),
                client_factory=lambda: sqs,
                journal=journal,
                wall_clock=lambda: ahead,
            )
        )
    )
    assert out.column("messageId").to_pylist() == ids(2)
    entry = journal.entries.read(4, 0)
    assert entry is not None and entry.schema.metadata[WINDOW_DROPPED] == b"1"
    assert store.inner.read(window.merged_key(3)) is None, "read from its parts"


# -- receivers --------------------------------------------------------------------------------


def test_a_receiver_drops_and_deletes_a_copy_of_an_acknowledged_message(location: str) -> None:
    journal, store = journal_at(location)
    journal.plans.write(BatchPlan(4, (ReceiverPlan(0, 10),)))
    # Batch 2 acknowledged message 1 cleanly (sealed into batch 3's window by the driver); SQS
    # now hands out a copy of it with message 2.
    journal.window.write(ids(1), batch=3, who="x", seal=window.Seal(3, (0,)))
    sqs = FakeSqs(script=[[sqs_message(1, receive_count=2), sqs_message(2)]])
    partition = ReceiverPartition(4, 0, 10, QUEUE_URL, make_options(location, region="us-east-1"))
    out = pa.Table.from_batches(
        list(read_partition(partition, client_factory=lambda: sqs, journal=journal))
    )
    assert out.column("messageId").to_pylist() == ids(2)
    entry = journal.entries.read(4, 0)
    assert entry is not None and entry.schema.metadata[WINDOW_DROPPED] == b"1"
    deleted = [
        e["ReceiptHandle"]
        for action, entries in sqs.batch_calls
        if action == "delete"
        for e in entries
    ]
    assert deleted == [sqs_message(1, receive_count=2)["ReceiptHandle"]], "the copy is deleted"


@pytest.mark.usefixtures("unnumbered")
def test_the_acknowledgement_writes_its_segment_before_the_first_delete(location: str) -> None:
    journal, store = journal_at(location, duplicateWindow="600")
    table = messages_to_table([sqs_message(n) for n in range(3)], QUEUE_URL)
    journal.entries.write(2, 0, table)
    order: list[str] = []
    store.before = lambda method, key: order.append(f"{method} {key.split('/')[0]}")
    sqs = FakeSqs()
    original = sqs.delete_message_batch

    def delete(**kwargs: Any) -> Any:
        order.append("DeleteMessageBatch")
        return original(**kwargs)

    sqs.delete_message_batch = delete  # type: ignore[method-assign]
    acknowledge_assigned(
        journal, sqs, QUEUE_URL, 3, 0, [AckAssignment(2, 0, 0, valid_until=time.time() + 600)],
        duplicate_window=600,
    )  # fmt: skip
    assert order.index("create window") < order.index("DeleteMessageBatch")
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, time.time(), lookup(3))
    assert cache.seen(ids(0, 1, 2, 3)) == set(ids(0, 1, 2))


def test_one_receiver_of_each_batch_seals_the_previous_batch(location: str) -> None:
    journal, store = journal_at(location)
    journal.plans.write(BatchPlan(4, (ReceiverPlan(0, 10), ReceiverPlan(1, 10))))
    journal.plans.write(BatchPlan(5, (ReceiverPlan(0, 10), ReceiverPlan(1, 10)), window_from=4))
    journal.window.write(ids(1), batch=4, who="r000000")
    journal.window.write(ids(2), batch=4, who="r000001")
    options = make_options(location, region="us-east-1")
    # With no acknowledgement assigned, receiver 4 % 2 == 0 seals; receiver 1 does not.
    for receiver in (1, 0):
        sqs = FakeSqs(available=0)
        partition = ReceiverPartition(5, receiver, 10, QUEUE_URL, options)
        list(read_partition(partition, client_factory=lambda sqs=sqs: sqs, journal=journal))
        sealed = store.inner.read(window.merged_key(4)) is not None
        assert sealed == (receiver == 0)
    merged = window.read_table(store, window.merged_key(4))
    assert merged is not None and merged.num_rows == 2


def test_a_straggler_s_delete_after_the_seal_still_drops_a_later_copy(location: str) -> None:
    """A straggling attempt of committed batch 4 drops a redelivery and deletes it after batch
    5's receiver sealed batch 4's segments; SQS hands out a copy later (batch 6): dropped."""
    journal, store = journal_at(location)
    options = make_options(location, region="us-east-1")
    receivers = (ReceiverPlan(0, 10), ReceiverPlan(1, 10))
    journal.plans.write(BatchPlan(4, receivers, window_from=4))
    journal.plans.write(BatchPlan(5, receivers, window_from=4))
    # Batch 4's receivers wrote segments (a merge of several parts is what could hide more).
    journal.window.write(ids(7), batch=4, who="r000000")
    journal.window.write(ids(8), batch=4, who="r000001")
    for receiver in (0, 1):
        sqs = FakeSqs(available=0)
        partition = ReceiverPartition(5, receiver, 10, QUEUE_URL, options)
        list(read_partition(partition, client_factory=lambda sqs=sqs: sqs, journal=journal))
    assert store.inner.read(window.merged_key(4)) is not None
    # A worker looks batch 4 up now (reads the seal), then the straggler of batch 4 deletes.
    duplicates.forget_all()
    sqs = FakeSqs(available=0)
    list(read_partition(ReceiverPartition(5, 1, 10, QUEUE_URL, options),
                        client_factory=lambda: FakeSqs(script=[[sqs_message(9)]]),
                        journal=journal))  # fmt: skip
    straggler = ReceiverPartition(4, 1, 10, QUEUE_URL, options)
    redelivered = sqs_message(1, receive_count=2)
    filtering.delete_redeliveries(journal, sqs, straggler, [redelivered], Clocks())
    # Batch 6: SQS hands out a copy of message 1.
    journal.plans.write(BatchPlan(6, receivers, window_from=4))
    copy = FakeSqs(script=[[sqs_message(1, receive_count=3), sqs_message(2)]])
    out = pa.Table.from_batches(
        list(
            read_partition(
                ReceiverPartition(6, 1, 10, QUEUE_URL, options),
                client_factory=lambda: copy,
                journal=journal,
            )
        )  # fmt: skip
    )
    assert out.column("messageId").to_pylist() == ids(2)


# -- duplicateAttribute ------------------------------------------------------------------------


def with_attribute(n: int, value: str, receive_count: int = 1) -> dict[str, Any]:
    message = sqs_message(n, receive_count=receive_count)
    message["MessageAttributes"] = {
        "spark_sqs.dedupeId": {"DataType": "String", "StringValue": value}
    }
    return message


def test_copies_are_recognised_by_the_attribute_too(location: str) -> None:
    journal, store = journal_at(location)
    options = make_options(location, region="us-east-1", duplicateAttribute="spark_sqs.dedupeId")
    journal.plans.write(BatchPlan(4, (ReceiverPlan(0, 10),)))
    # A sink batch sent row "a" twice (two messages, two ids, one dedupe id); the first copy
    # was delivered and acknowledged earlier.
    journal.window.write([window.attribute_key("a")], batch=3, who="x", seal=window.Seal(3, (0,)))
    sqs = FakeSqs(script=[[with_attribute(1, "a"), with_attribute(2, "b"), with_attribute(3, "b")]])
    partition = ReceiverPartition(4, 0, 10, QUEUE_URL, options)
    got = pa.Table.from_batches(
        list(read_partition(partition, client_factory=lambda: sqs, journal=journal))
    )
    # "a" was acknowledged; the second "b" is a copy of the first within this receive.
    assert got.column("messageId").to_pylist() == ids(2)
    entry = journal.entries.read(4, 0)
    assert entry is not None and entry.schema.metadata[WINDOW_DROPPED] == b"2"
    # The entry carries "b"'s key: its acknowledgement puts it in the window.
    journal.plans.write(
        BatchPlan(5, (ReceiverPlan(0, 10),), acks=(AckAssignment(4, 0, 0, time.time() + 600),))
    )
    later = ReceiverPartition(5, 0, 10, QUEUE_URL, options)
    list(read_partition(later, client_factory=lambda: FakeSqs(), journal=journal))
    duplicates.forget_all()
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, time.time(), lookup(5, start=3))
    assert cache.seen([window.attribute_key("b"), *ids(2)]) == {window.attribute_key("b"), *ids(2)}


def test_without_the_option_the_attribute_is_ignored(location: str) -> None:
    journal, _ = journal_at(location)
    journal.plans.write(BatchPlan(4, (ReceiverPlan(0, 10),)))
    sqs = FakeSqs(script=[[with_attribute(2, "b"), with_attribute(3, "b")]])
    partition = ReceiverPartition(4, 0, 10, QUEUE_URL, make_options(location, region="us-east-1"))
    got = pa.Table.from_batches(
        list(read_partition(partition, client_factory=lambda: sqs, journal=journal))
    )
    assert got.column("messageId").to_pylist() == ids(2, 3)
