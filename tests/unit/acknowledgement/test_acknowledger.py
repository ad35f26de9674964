"""The driver's acknowledgement (spark_sqs/acknowledgement/acknowledger.py): cumulative
acknowledgement, settlement from the next batch's reports, the lease and the heartbeat around
it. The batched calls it sends are tested in tests/unit/sqs/test_batching.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from spark_sqs.acknowledgement.acknowledger import (
    COLLECT_EVERY,
    IDLE_SWEEP_SECONDS,
    Acknowledger,
)
from spark_sqs.acknowledgement.assigned import acknowledge_assigned
from spark_sqs.acknowledgement.reports import AckReports, report_key
from spark_sqs.acknowledgement.rule import By
from spark_sqs.driver.heartbeat import BatchVisibility, Heartbeat
from spark_sqs.errors import (
    JournalInUseError,
    SqsAccessError,
    SqsSourceError,
    TransientSqsError,
)
from spark_sqs.journal import (
    BatchPlan,
    EntryReceipts,
    Journal,
    JournalState,
    LocalStore,
    ReceiverPlan,
)
from spark_sqs.schema import messages_to_table
from spark_sqs.sqs.batching import BatchCaller, BatchResult, Entry
from tests.factories import QUEUE_URL, make_options, sqs_message
from tests.fakes import (
    NOW,
    Clock,
    FakeJournal,
    FakeSqs,
    HookedStore,
    ListHidingStore,
    VisibilitySqs,
)

# -- Acknowledger ------------------------------------------------------------------------------

VISIBILITY = 120
INTERVAL = 24.0
WINDOW = 3600.0
START = 100.0  # the driver's monotonic clock when a test starts
MARGIN = 6.0  # handle_margin(120): max(2 s, 5 % of the visibility timeout)


Outcome = BatchResult | Exception


class FakeCaller:
    """Answers ``delete`` with ``outcomes(entries)``; succeeds for everything by default."""

    queue_url = QUEUE_URL

    def __init__(self, outcomes: Callable[[list[Entry]], Outcome] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.outcomes = outcomes or (lambda es: BatchResult(succeeded=[e.message_id for e in es]))

    def delete(self, entries: Sequence[Entry]) -> BatchResult:
        self.calls.append([e.message_id for e in entries])
        outcome = self.outcomes(list(entries))
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def handles(batch: int, count: int) -> list[tuple[str, str]]:
    return [(f"b{batch}-m{i}", f"b{batch}-h{i}") for i in range(count)]


def batch_of_call(call: list[str]) -> int:
    return int(call[0].split("-")[0][1:])


def inherited(*batches: int) -> dict[int, tuple[int, ...]]:
    """Batches found pending at start (inherited from an earlier run), each with the one
    receiver (0) its plan names."""
    return {batch: (0,) for batch in batches}


def real_heartbeat(journal: Any, clock: Clock, sqs: VisibilitySqs | None = None) -> Heartbeat:
    """The driver's heartbeat on the acknowledger's clock; it ticks only when a test says."""
    caller = BatchCaller(
        sqs or VisibilitySqs(clock), QUEUE_URL, sleep=lambda s: None, parallelism=1, attempts=1
    )
    return Heartbeat(journal, caller, visibility_timeout=VISIBILITY, interval=INTERVAL, clock=clock)


def make_acknowledger(
    journal: FakeJournal,
    fake: FakeCaller,
    *,
    delete: bool = True,
    clock: Clock | None = None,
    wall: Clock | None = None,
    retry_after: float = 5.0,
    heartbeat: Any = None,
    confirm: Callable[[], None] | None = None,
) -> tuple[Acknowledger, list[int]]:
    acked: list[int] = []
    ack = Acknowledger(
        journal,
        fake,  # type: ignore[arg-type]
        delete=delete,
        on_acked=lambda b, _: acked.append(b),
        visibility_timeout=VISIBILITY,
        dedupe_window=WINDOW,
        heartbeat=heartbeat,
        clock=clock or Clock(START),
        wall_clock=wall or Clock(NOW),
        retry_after=retry_after,
        confirm=confirm,
    )
    return ack, acked


def this_run(
    journal: FakeJournal, fake: FakeCaller, *batches: int, **kwargs: Any
) -> tuple[Acknowledger, list[int], Clock]:
    """An acknowledger with a heartbeat, whose ``batches`` were planned in this run just now
    (each with receiver 0): their handles are known valid for a visibility timeout."""
    clock = Clock(START)
    ack, acked = make_acknowledger(
        journal, fake, clock=clock, heartbeat=real_heartbeat(journal, clock), **kwargs
    )
    ack.start(min(batches, default=1) - 1, {})
    for batch in batches:
        ack.track(batch, receivers=(0,))
    return ack, acked, clock


def test_garbage_is_swept_every_hundredth_acknowledgement_and_when_idle() -> None:
    """A settled batch's own files go by key; the sweep only catches what a mishap left, so a
    steady stream sweeps every COLLECT_EVERY (100) batches, an idle one at once and then at most
    once every IDLE_SWEEP_SECONDS."""
    last = COLLECT_EVERY + 2
    journal = FakeJournal({b: handles(b, 1) for b in range(1, last + 1)})
    ack, _, clock = this_run(journal, FakeCaller(), *range(1, last + 1))
    ack.acknowledge_through(COLLECT_EVERY - 1)
    assert journal.collected == [1], "at start only"
    ack.acknowledge_through(COLLECT_EVERY + 1)
    # At the 100th acknowledgement (the oldest pending was 101 then).
    assert journal.collected == [1, COLLECT_EVERY + 1]
    ack.acknowledge_through(last)
    ack.sweep_when_idle()  # batches acknowledged since the sweep
    assert journal.collected == [1, COLLECT_EVERY + 1, last + 1]
    ack.sweep_when_idle()  # nothing new, and too soon
    assert journal.collected == [1, COLLECT_EVERY + 1, last + 1]
    clock.sleep(IDLE_SWEEP_SECONDS)  # stragglers may have left files since
    ack.sweep_when_idle()
    assert journal.collected == [1, COLLECT_EVERY + 1, last + 1, last + 1]


def test_acknowledges_every_pending_batch_up_to_n() -> None:
    journal = FakeJournal({1: handles(1, 3), 2: handles(2, 2), 3: handles(3, 1)})
    fake = FakeCaller()
    ack, acked, _ = this_run(journal, fake, 1, 2, 3)

    stats = ack.acknowledge_through(2)

    assert [batch_of_call(c) for c in fake.calls] == [1, 2]
    assert fake.calls[0] == ["b1-m0", "b1-m1", "b1-m2"]
    assert journal.removed == [1, 2]
    # Drop sets of the batches before the oldest pending one are swept at start (what a dead
    # run left), then every COLLECT_EVERY-th acknowledgement and when idle: not per batch.
    assert journal.collected == [1]
    assert acked == [1, 2]
    assert ack.acked_batch == 2
    assert ack.pending == [3]
    ack.sweep_when_idle()  # batch 3 is pending: not idle
    assert journal.collected == [1]
    assert (stats.batches, stats.deleted, stats.delete_failed, stats.pending_retry) == (2, 5, 0, 0)
    # Planned in this run a moment ago: their handles are valid by this driver's clock.
    assert stats.uncertain == 0
    assert journal.dedupe_records == {}


def test_deletes_use_the_journaled_receipt_handles() -> None:
    journal = FakeJournal({1: handles(1, 2)})
    seen: list[list[tuple[str, str]]] = []

    def outcome(es: list[Entry]) -> Outcome:
        seen.append([(e.message_id, e.receipt_handle) for e in es])
        return BatchResult(succeeded=[e.message_id for e in es])

    ack, _ = make_acknowledger(journal, FakeCaller(outcome))
    ack.start(0, inherited(1))
    ack.acknowledge_through(1)

    assert seen == [[("b1-m0", "b1-h0"), ("b1-m1", "b1-h1")]]


def test_entries_are_read_for_the_receivers_the_plan_names() -> None:
    journal = FakeJournal({1: handles(1, 2)})
    journal.add(EntryReceipts(1, 3, NOW, ("b1-r3",), ("b1-h-r3",)))
    journal.add(EntryReceipts(1, 7, NOW, ("b1-r7",), ("b1-h-r7",)))  # a receiver of no plan
    fake = FakeCaller()
    ack, _ = make_acknowledger(journal, fake)
    ack.start(0, {1: (0, 3, 5)})  # receiver 5 wrote nothing

    ack.acknowledge_through(1)

    assert fake.calls == [["b1-m0", "b1-m1", "b1-r3"]]


def test_acknowledging_again_does_nothing() -> None:
    journal = FakeJournal({1: handles(1, 2)})
    fake = FakeCaller()
    ack, acked = make_acknowledger(journal, fake)
    ack.start(0, inherited(1))
    ack.acknowledge_through(1)
    reads = len(journal.reads)

    stats = ack.acknowledge_through(1)
    ack.acknowledge_through(0)

    assert len(fake.calls) == 1
    assert len(journal.reads) == reads
    assert acked == [1]
    assert journal.removed == [1]
    assert stats.batches == 0 and stats.deleted == 0
    assert ack.totals.batches == 1 and ack.totals.deleted == 2


def test_tracked_batches_are_acknowledged_once_committed() -> None:
    journal = FakeJournal({})
    fake = FakeCaller()
    ack, acked = make_acknowledger(journal, fake)
    ack.start(4, {})
    ack.track(5, receivers=(0,))
    journal.add_pairs(5, handles(5, 2))

    assert ack.acknowledge_through(4).batches == 0
    assert fake.calls == []
    assert ack.acknowledge_through(5).batches == 1
    assert fake.calls == [["b5-m0", "b5-m1"]]
    assert acked == [5]
    assert ack.pending == []


def test_transient_failure_keeps_the_batch_pending_until_retry_after() -> None:
    journal = FakeJournal({1: handles(1, 2), 2: handles(2, 1)})
    outcomes: list[Outcome] = [
        BatchResult(succeeded=["b1-m0"], transient={"b1-m1": "InternalError"}),
    ]
    fake = FakeCaller(
        lambda es: outcomes.pop(0) if outcomes else BatchResult([e.message_id for e in es])
    )
    clock = Clock(START)
    ack, acked = make_acknowledger(journal, fake, clock=clock, retry_after=5.0)
    ack.start(0, inherited(1, 2))

    stats = ack.acknowledge_through(2)

    assert stats.pending_retry == 1
    assert stats.batches == 0
    assert ack.pending == [1, 2]
    assert ack.acked_batch == 0
    assert acked == []
    assert journal.removed == []
    # Later batches wait behind the failed one.
    assert [batch_of_call(c) for c in fake.calls] == [1]

    clock.now += 4.9
    assert ack.acknowledge_through(2).batches == 0
    assert len(fake.calls) == 1, "retried before retry_after"

    clock.now += 0.2
    stats = ack.acknowledge_through(2)
    assert stats.batches == 2
    assert [batch_of_call(c) for c in fake.calls] == [1, 1, 2]
    assert acked == [1, 2]
    assert journal.removed == [1, 2]
    assert ack.pending == []


def test_later_batches_wait_behind_a_failed_one() -> None:
    journal = FakeJournal({1: handles(1, 1), 2: handles(2, 1), 3: handles(3, 1)})

    def outcome(es: list[Entry]) -> Outcome:
        if es[0].message_id.startswith("b2-"):
            return BatchResult(transient={"b2-m0": "ServiceUnavailable"})
        return BatchResult(succeeded=[e.message_id for e in es])

    fake = FakeCaller(outcome)
    ack, acked = make_acknowledger(journal, fake)
    ack.start(0, inherited(1, 2, 3))

    ack.acknowledge_through(3)

    assert [batch_of_call(c) for c in fake.calls] == [1, 2]
    assert acked == [1]
    assert ack.acked_batch == 1
    assert ack.pending == [2, 3]
    assert journal.removed == [1]
    assert 3 in journal.stored


def test_retriable_exception_from_the_caller_keeps_the_batch_pending() -> None:
    journal = FakeJournal({1: handles(1, 3)})
    fake = FakeCaller(lambda es: TransientSqsError("network down"))
    ack, acked = make_acknowledger(journal, fake)
    ack.start(0, inherited(1))

    stats = ack.acknowledge_through(1)

    assert stats.pending_retry == 3
    assert ack.pending == [1]
    assert acked == []
    assert journal.removed == []


def test_a_batch_whose_delete_failed_transiently_stays_heartbeated() -> None:
    """The module's promise: a batch whose deletes failed transiently stays pending and
    heartbeated until a retry succeeds (an AWS outage delays deletion, never lets messages
    reappear)."""
    journal = FakeJournal({1: handles(1, 2)})
    clock = Clock(START)
    visibility = VisibilitySqs(clock)
    heartbeat = real_heartbeat(journal, clock, visibility)
    fake = FakeCaller(lambda es: TransientSqsError("network down"))
    ack, _ = make_acknowledger(journal, fake, clock=clock, heartbeat=heartbeat)
    ack.start(0, {})
    ack.track(1, receivers=(0,))
    clock.now += 30.0

    assert ack.acknowledge_through(1).pending_retry == 2
    clock.now += VISIBILITY - 2 * INTERVAL - 1.0 - 30.0  # the batch's handles near expiry
    heartbeat.tick()

    assert sorted(visibility.handles_sent()) == ["b1-h0", "b1-h1"]


def test_non_retriable_exception_from_the_caller_propagates() -> None:
    journal = FakeJournal({1: handles(1, 1)})
    fake = FakeCaller(lambda es: SqsAccessError("denied. Fix: allow sqs:DeleteMessage"))
    ack, acked = make_acknowledger(journal, fake)
    ack.start(0, inherited(1))

    with pytest.raises(SqsAccessError):
        ack.acknowledge_through(1)
    assert ack.pending == [1]
    assert acked == []
    assert journal.removed == []


def test_permanent_failures_do_not_block_acknowledgement_and_are_deduped() -> None:
    journal = FakeJournal({1: handles(1, 3)})
    fake = FakeCaller(
        lambda es: BatchResult(
            succeeded=["b1-m0", "b1-m2"], permanent={"b1-m1": "ReceiptHandleIsInvalid"}
        )
    )
    ack, acked, _ = this_run(journal, fake, 1)

    stats = ack.acknowledge_through(1)

    assert (stats.batches, stats.deleted, stats.delete_failed) == (1, 2, 1)
    assert acked == [1]
    assert journal.removed == [1]
    # SQS may deliver b1-m1 again: its id is remembered for the dedupe window.
    assert journal.dedupe_records == {1: (["b1-m1"], START + WINDOW)}
    assert stats.uncertain == 1
    assert "b1-m1" in ack.drop_ids(2)


def test_handles_past_the_planning_time_plus_the_timeout_are_deleted_and_recorded_for_dedupe() -> (
    None
):
    # Planned 200 s ago on this driver's clock with a 120 s visibility timeout and no
    # extension: on a standard queue SQS answers the delete with success but may keep the
    # message. The entry says it was received just now, on its executor's clock: not used.
    journal = FakeJournal({1: handles(1, 2)}, received_at=NOW + 199)
    fake = FakeCaller()
    ack, acked, clock = this_run(journal, fake, 1)
    clock.now += 200

    stats = ack.acknowledge_through(1)

    assert fake.calls == [["b1-m0", "b1-m1"]]
    assert journal.dedupe_records == {1: (["b1-m0", "b1-m1"], clock.now + WINDOW)}
    assert stats.uncertain == 2
    assert acked == [1]


def test_an_inherited_batch_the_driver_deletes_is_recorded_for_dedupe() -> None:
    """A batch found pending at start: no clock of this driver knows when its handles were
    received (nor were they extended since), so its deletes may not take effect, however
    recent its entries' receive times look."""
    journal = FakeJournal({1: handles(1, 2)}, received_at=NOW)
    fake = FakeCaller()
    clock = Clock(START)
    ack, acked = make_acknowledger(
        journal, fake, clock=clock, heartbeat=real_heartbeat(journal, clock)
    )
    ack.start(0, inherited(1))

    stats = ack.acknowledge_through(1)

    assert fake.calls == [["b1-m0", "b1-m1"]]
    assert journal.dedupe_records == {1: (["b1-m0", "b1-m1"], START + WINDOW)}
    assert stats.uncertain == 2


def test_handles_about_to_expire_are_recorded_for_dedupe() -> None:
    # 3 s of visibility left is within the safety margin (max(2 s, 5 % of 120 s) = 6 s).
    journal = FakeJournal({1: handles(1, 1)}, received_at=NOW)
    ack, _, clock = this_run(journal, FakeCaller(), 1)
    clock.now += VISIBILITY - 3
    assert ack.acknowledge_through(1).uncertain == 1


def test_a_handle_that_expires_during_the_driver_s_delete_phase_is_recorded_for_dedupe() -> None:
    """20 s of visibility left when the driver starts deleting batch 1 itself (beyond the 6 s
    margin; the heartbeat's tick that would extend it is a few seconds late); its delete call
    reaches SQS 30 s later (throttling and botocore's retries). The
    handle had expired by then: SQS reports success on a standard queue yet may keep the
    message, so its redeliveries must be dropped, as for the settlement, which judges after
    the deletes."""
    journal = FakeJournal({1: handles(1, 1)}, received_at=NOW)
    clock = Clock(START)

    def slow(entries: list[Entry]) -> Outcome:
        clock.now += 30
        return BatchResult(succeeded=[e.message_id for e in entries])

    ack, _ = make_acknowledger(
        journal, FakeCaller(slow), clock=clock, heartbeat=real_heartbeat(journal, clock)
    )
    ack.start(0, {})
    ack.track(1, receivers=(0,))
    clock.now += VISIBILITY - 20
    assert ack.acknowledge_through(1).uncertain == 1
    assert journal.dedupe_records == {1: (["b1-m0"], clock.now + WINDOW)}


def test_a_handle_that_expires_while_the_driver_writes_its_window_segment_is_kept_for_dedupe(
    journal_location: str,
) -> None:
    """The driver deletes batch 1 itself with 20 s of visibility left by its clock (beyond the
    6 s margin). Its window segment, written before the deletes, takes 30 s (a slow store,
    its retries); the heartbeat forgot the batch when the deletion began, so nothing extends
    it meanwhile. The deletes reach SQS after the handles expired: their ids are in the
    journal's dedupe record, where a restart finds them."""
    options = make_options(journal_location, region="us-east-1")
    clock = Clock(START)

    def slow_window(method: str, key: str) -> None:
        if method == "create" and key.startswith("window/"):
            clock.now += 30.0

    store = HookedStore(Journal(journal_location, options).store, before=slow_window)
    journal = Journal(journal_location, options, store=store)
    journal.state.write(JournalState(planned_batch=1))
    journal.plans.write(BatchPlan(1, (ReceiverPlan(0, 10),)))
    journal.entries.write(1, 0, messages_to_table([sqs_message(n) for n in range(2)], QUEUE_URL))
    fake = FakeCaller()
    ack = Acknowledger(
        journal,
        fake,  # type: ignore[arg-type]
        delete=True,
        on_acked=lambda b, _: None,
        visibility_timeout=VISIBILITY,
        dedupe_window=WINDOW,
        heartbeat=real_heartbeat(journal, clock),
        clock=clock,
        wall_clock=Clock(NOW),
        duplicate_window=600.0,
    )
    ack.start(0, {})
    ack.track(1, receivers=(0,))
    clock.now += VISIBILITY - 20

    stats = ack.acknowledge_through(1)

    assert ("create", "window/") in [(m, k[:7]) for m, k in store.calls]
    assert sorted(fake.calls[0]) == sorted(ids_of(0, 1))
    assert stats.uncertain == 2
    again = Journal(journal_location, options)
    assert set(again.dedupe.read(0.0, WINDOW)) == ids_of(0, 1)


def test_fresh_handles_are_not_recorded_for_dedupe() -> None:
    # 60 s left by this driver's clock; the entry's receive time (another host's clock, far
    # behind) would say long expired.
    journal = FakeJournal({1: handles(1, 1)}, received_at=NOW - 10_000)
    ack, _, clock = this_run(journal, FakeCaller(), 1)
    clock.now += VISIBILITY - 60
    assert ack.acknowledge_through(1).uncertain == 0
    assert journal.dedupe_records == {}


def test_delete_false_removes_entries_without_deleting() -> None:
    journal = FakeJournal({1: handles(1, 2), 2: handles(2, 2)}, received_at=NOW - 10_000)
    fake = FakeCaller(lambda es: SqsSourceError("must not be called"))
    ack, acked = make_acknowledger(journal, fake, delete=False)
    ack.start(0, inherited(1, 2))

    stats = ack.acknowledge_through(2)

    assert fake.calls == []
    assert journal.removed == [1, 2]
    assert acked == [1, 2]
    assert stats.batches == 2
    assert stats.deleted == 0
    assert ack.pending == []
    # Messages are meant to come back: nothing is recorded to drop them.
    assert journal.dedupe_records == {}


def test_batch_without_entries_is_acknowledged_without_calls() -> None:
    journal = FakeJournal({})
    fake = FakeCaller()
    ack, acked = make_acknowledger(journal, fake)
    ack.start(0, inherited(1))

    assert ack.acknowledge_through(1).batches == 1
    assert fake.calls == []
    assert acked == [1]


def test_on_acked_gets_the_watermark_which_never_goes_back() -> None:
    # A restart found entries of batch 3 although batch 7 was already acknowledged (the driver
    # stopped between recording the watermark and removing the entries).
    journal = FakeJournal({3: handles(3, 1), 8: handles(8, 1), 9: handles(9, 1)})
    fake = FakeCaller()
    ack, acked = make_acknowledger(journal, fake)
    ack.start(7, inherited(3, 8, 9))

    ack.acknowledge_through(9)

    assert acked == [7, 8, 9]
    assert ack.acked_batch == 9
    assert journal.removed == [3, 8, 9]


def test_watermark_is_recorded_before_entries_are_removed() -> None:
    journal = FakeJournal({1: handles(1, 1)})
    events: list[str] = []
    original_remove = journal.remove_batch

    def remove(
        batch: int, also: Sequence[str] = (), files: Any = None, probed: bool = False
    ) -> None:
        events.append(f"remove {batch}")
        original_remove(batch, also, files)

    journal.remove_batch = remove  # type: ignore[method-assign]
    ack = Acknowledger(
        journal,
        FakeCaller(),  # type: ignore[arg-type]
        delete=True,
        on_acked=lambda b, _: events.append(f"acked {b}"),
        visibility_timeout=VISIBILITY,
        dedupe_window=WINDOW,
        wall_clock=Clock(NOW),
    )
    ack.start(0, inherited(1))
    ack.acknowledge_through(1)

    assert events == ["acked 1", "remove 1"]


# -- the lease ---------------------------------------------------------------------------------


class Lease:
    """``Lease.confirm`` as the acknowledger sees it: records each call, raises once told the
    journal was taken over (``JournalInUseError``) from the ``fail_from``-th call on."""

    def __init__(self, events: list[str], fail_from: int | None = None) -> None:
        self.events = events
        self.fail_from = fail_from
        self.calls = 0

    def confirm(self) -> None:
        self.calls += 1
        self.events.append("confirm")
        if self.fail_from is not None and self.calls >= self.fail_from:
            raise JournalInUseError("another query took the journal over (injected)")


def recording(journal: FakeJournal, events: list[str]) -> FakeCaller:
    """A caller that records its deletes in ``events``; the journal records its removals."""
    original_remove = journal.remove_batch

    def remove(
        batch: int, also: Sequence[str] = (), files: Any = None, probed: bool = False
    ) -> None:
        events.append(f"remove {batch}")
        original_remove(batch, also, files)

    journal.remove_batch = remove  # type: ignore[method-assign]

    def outcome(es: list[Entry]) -> Outcome:
        events.append("delete")
        return BatchResult(succeeded=[e.message_id for e in es])

    return FakeCaller(outcome)


def test_the_lease_is_confirmed_before_the_driver_deletes_and_before_a_batch_is_marked() -> None:
    events: list[str] = []
    journal = FakeJournal({1: handles(1, 2)})
    ack = Acknowledger(
        journal,
        recording(journal, events),  # type: ignore[arg-type]
        delete=True,
        on_acked=lambda b, _: events.append(f"acked {b}"),
        visibility_timeout=VISIBILITY,
        dedupe_window=WINDOW,
        wall_clock=Clock(NOW),
        confirm=Lease(events).confirm,
    )
    ack.start(0, inherited(1))

    ack.acknowledge_through(1)

    assert events == ["confirm", "delete", "confirm", "acked 1", "remove 1"]


@pytest.mark.parametrize(("fail_from", "deleted"), [(1, False), (2, True)])
def test_a_confirm_that_raises_stops_the_deletes_and_the_acknowledgement(
    fail_from: int, deleted: bool
) -> None:
    """Lost before the deletes: nothing is deleted; lost after them (a pause past the lease):
    the batch is not marked acknowledged nor removed. Another query may own the journal."""
    events: list[str] = []
    journal = FakeJournal({1: handles(1, 2)})
    fake = recording(journal, events)
    ack, acked = make_acknowledger(journal, fake, confirm=Lease(events, fail_from).confirm)
    ack.start(0, inherited(1))

    with pytest.raises(JournalInUseError):
        ack.acknowledge_through(1)

    assert ("delete" in events) is deleted
    assert acked == [] and ack.acked_batch == 0
    assert journal.removed == [] and ack.pending == [1]


# -- drop_ids (redelivery dedupe) --------------------------------------------------------------


def test_drop_ids_are_recorded_ids_and_ids_of_unacknowledged_batches() -> None:
    journal = FakeJournal({4: handles(4, 2), 6: handles(6, 1)})
    # An earlier driver's record: kept for the window from this start.
    journal.dedupe_records[2] = (["old-1", "old-2"], None)
    clock = Clock(START)
    ack, _ = make_acknowledger(journal, FakeCaller(), clock=clock)
    ack.start(3, inherited(4, 6))

    # Batch 5 is being planned: batch 4 is not acknowledged yet, batch 6 is later.
    assert ack.drop_ids(5) == {"old-1", "old-2", "b4-m0", "b4-m1"}

    clock.now += 100
    ack.acknowledge_through(6)
    # Inherited batches the driver deleted itself: their deletes are uncertain, recorded for
    # the dedupe window, after which nothing is dropped.
    assert ack.drop_ids(7) == {"old-1", "old-2", "b4-m0", "b4-m1", "b6-m0"}
    clock.now = START + WINDOW
    assert ack.drop_ids(7) == {"b4-m0", "b4-m1", "b6-m0"}, "recorded ids expire"
    clock.now += 100
    assert ack.drop_ids(7) == frozenset()


def test_a_wall_clock_jump_does_not_expire_the_driver_s_own_dedupe_ids_early() -> None:
    """The driver's wall clock is stepped forward (NTP, a VM resumed) past the window: the ids
    it recorded are judged on its monotonic clock, so their redeliveries are still dropped."""
    journal = FakeJournal({1: handles(1, 2)})
    clock, wall = Clock(START), Clock(NOW)
    ack, _ = make_acknowledger(journal, FakeCaller(), clock=clock, wall=wall)
    ack.start(0, inherited(1))
    assert ack.acknowledge_through(1).uncertain == 2

    wall.now += 2 * WINDOW
    clock.now += 1.0
    assert ack.drop_ids(2) == {"b1-m0", "b1-m1"}
    clock.now = START + WINDOW - 1.0
    assert ack.drop_ids(2) == {"b1-m0", "b1-m1"}
    clock.now = START + WINDOW
    assert ack.drop_ids(2) == frozenset()


def test_an_acknowledged_marker_names_no_dedupe_record_kept_its_window(tmp_path: Path) -> None:
    """A record the driver kept for its window is let go of before the next acknowledged
    marker, even when that batch records nothing: a marker naming it would make the next start
    keep it a window more, and a driver that keeps running would never let it go."""
    location = str(tmp_path / "journal")
    journal = Journal(location, make_options(location))
    journal.entries.write(1, 0, messages_to_table([sqs_message(0)], QUEUE_URL))
    journal.dedupe.write(0, ["old"], now=START - WINDOW + 10.0, window=WINDOW, wall=NOW)
    named: list[list[str]] = []
    clock = Clock(START)
    ack = Acknowledger(
        journal,
        FakeCaller(),  # type: ignore[arg-type]
        delete=False,  # nothing is deleted: nothing is uncertain
        on_acked=lambda b, _: named.append(sorted(journal.dedupe.keys)),
        visibility_timeout=VISIBILITY,
        dedupe_window=WINDOW,
        clock=clock,
        wall_clock=Clock(NOW),
    )
    ack.start(0, inherited(1))
    assert ack.drop_ids(2) == {"old", sqs_message(0)["MessageId"]}
    clock.now = START + 10.0

    assert ack.acknowledge_through(1).uncertain == 0

    assert named == [[]]
    # Removed at that acknowledgement, not left for a sweep a short run may never reach (a
    # record found unnamed at a start is kept a whole window again).
    assert journal.store.list("dedupe") == []
    assert ack.drop_ids(2) == frozenset()


def test_a_restarted_driver_whose_wall_clock_runs_ahead_keeps_the_dedupe_ids_a_window(
    journal_location: str,
) -> None:
    """A driver records uncertain acknowledgements; the next driver starts on another host
    whose wall clock runs two windows ahead. The record's written expiry is the first host's
    wall clock: judged by the second's, it would be long past, and a redelivery of those
    messages would be delivered again. The restart keeps them a whole window from its start,
    on its own monotonic clock."""
    options = make_options(journal_location, region="us-east-1")
    first = Journal(journal_location, options)
    first.state.read()
    first.entries.write(1, 0, messages_to_table([sqs_message(n) for n in range(2)], QUEUE_URL))
    ack, acked = make_acknowledger(first, FakeCaller())  # type: ignore[arg-type]
    ack.start(0, inherited(1))
    assert ack.acknowledge_through(1).uncertain == 2
    first.state.write(JournalState(planned_batch=1, acked_batch=1))

    clock = Clock(7.0)  # another host: its monotonic clock has its own origin
    wall = Clock(NOW + 2 * WINDOW)
    again = Journal(journal_location, options)
    assert again.state.read().acked_batch == 1
    restarted, _ = make_acknowledger(again, FakeCaller(), clock=clock, wall=wall)  # type: ignore[arg-type]
    restarted.start(1, {})

    clock.now += 30.0
    assert restarted.drop_ids(2) == ids_of(0, 1), "a redelivery shortly after the start is dropped"
    clock.now = 7.0 + WINDOW - 1.0
    assert restarted.drop_ids(2) == ids_of(0, 1)
    clock.now = 7.0 + WINDOW
    assert restarted.drop_ids(2) == frozenset()


def test_a_batch_of_this_run_is_dropped_once_its_handles_may_lapse_by_the_driver_s_clock() -> None:
    """A batch planned in this run stays invisible under the heartbeat: its ids cost the next
    plan nothing, unless planning + visibilityTimeout (this driver's monotonic clock) falls
    within the next batch's receiving."""
    journal = FakeJournal({5: handles(5, 2)}, received_at=NOW - 10_000)
    ack, _, clock = this_run(journal, FakeCaller(), 5)
    ids = {"b5-m0", "b5-m1"}

    assert ack.drop_ids(6) == frozenset()
    assert ack.drop_ids(6, receive_window=VISIBILITY - MARGIN - 1) == frozenset()
    assert ack.drop_ids(6, receive_window=VISIBILITY - MARGIN + 1) == ids
    clock.now += VISIBILITY - MARGIN + 1
    assert ack.drop_ids(6) == ids


# -- with a heartbeat --------------------------------------------------------------------------


class FakeHeartbeat:
    def __init__(
        self,
        events: list[str],
        lost: frozenset[str] = frozenset(),
        planned_at: float | None = None,
    ) -> None:
        self.events = events
        self.lost = lost
        self.planned_at = planned_at
        self.expires_at: dict[str, float] = {}
        self.entry_expires: dict[int, float] = {}
        self.watched: list[tuple[int, bool, tuple[int, ...] | None]] = []
        self.lock = self

    def __enter__(self) -> None:
        self.events.append("lock")

    def __exit__(self, *exc: object) -> None:
        self.events.append("unlock")

    def watch(
        self,
        batch: int,
        planned: bool = False,
        *,
        receivers: tuple[int, ...] | None = None,
        extend_by: int = 0,
    ) -> None:
        self.watched.append((batch, planned, receivers))

    def discover_now(self, batch: int) -> None:
        self.events.append(f"discover {batch}")

    def forget(self, batch: int) -> None:
        self.events.append(f"forget {batch}")

    def snapshot(self, batch: int) -> BatchVisibility:
        return BatchVisibility(
            expires_at=dict(self.expires_at),
            lost=self.lost,
            planned_at=self.planned_at,
            entry_expires=dict(self.entry_expires),
        )


def test_heartbeat_watches_pending_batches_and_forgets_one_before_deleting_it() -> None:
    events: list[str] = []
    heartbeat = FakeHeartbeat(events)
    journal = FakeJournal({2: handles(2, 1)})

    def outcome(es: list[Entry]) -> Outcome:
        events.append("delete")
        return BatchResult(succeeded=[e.message_id for e in es])

    ack, _ = make_acknowledger(journal, FakeCaller(outcome), heartbeat=heartbeat)
    ack.start(1, {2: (0, 3)})
    ack.track(3, receivers=(0, 1))
    # Found pending at start: inherited; planned now: with the time it was planned. Each with
    # the receivers its plan names, which are all the heartbeat reads.
    assert heartbeat.watched == [(2, False, (0, 3)), (3, True, (0, 1))]

    ack.acknowledge_through(2)

    # No extension of the batch starts once its deletion starts.
    assert events.index("forget 2") < events.index("delete")


def test_heartbeat_lost_messages_are_recorded_for_dedupe() -> None:
    heartbeat = FakeHeartbeat([], lost=frozenset({"b1-m1"}), planned_at=START)
    journal = FakeJournal({1: handles(1, 2)})
    ack, _ = make_acknowledger(journal, FakeCaller(), heartbeat=heartbeat)
    ack.start(0, {})
    ack.track(1, receivers=(0,))

    ack.acknowledge_through(1)

    assert journal.dedupe_records == {1: (["b1-m1"], START + WINDOW)}


def test_heartbeat_extensions_keep_old_handles_valid() -> None:
    # Inherited (received before this run), but the heartbeat extended the visibility until a
    # minute from now on this driver's clock.
    heartbeat = FakeHeartbeat([])
    journal = FakeJournal({1: handles(1, 2)}, received_at=NOW - 3600)
    heartbeat.expires_at = {"b1-m0": START + 60, "b1-m1": START + 60}
    heartbeat.entry_expires = {0: START + 60}
    ack, _ = make_acknowledger(journal, FakeCaller(), heartbeat=heartbeat)
    ack.start(0, inherited(1))

    assert ack.acknowledge_through(1).uncertain == 0
    assert journal.dedupe_records == {}


# -- settlement from the next batch's reports ---------------------------------------------------


class Run:
    """One driver run on a real journal: the acknowledger and its heartbeat on one monotonic
    clock, each batch planned as the coordinator plans it (its receivers delete the committed
    batch's entries the plan assigns them, on the executors, then journal their own)."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        hidden: Callable[[str], bool] = lambda key: False,
        confirm: Callable[[], None] | None = None,
        pending: dict[int, tuple[int, ...]] | None = None,
        plans: dict[int, BatchPlan] | None = None,
    ) -> None:
        """``pending``, ``plans``: what the journal holds at start (a restart)."""
        location = str(tmp_path / "journal")
        self.store = ListHidingStore(LocalStore(location), hidden)
        self.journal = Journal(location, make_options(location), store=self.store)
        self.clock = Clock(START)
        self.wall = Clock(NOW)  # the driver's and the executors' wall clock
        self.visibility = VisibilitySqs(self.clock)  # what the heartbeat extends through
        self.heartbeat = real_heartbeat(self.journal, self.clock, self.visibility)
        self.executors = FakeSqs()  # the SQS the receivers delete through
        self.driver = FakeCaller()  # the SQS the driver deletes through
        self.events: list[str] = []
        self.ack = Acknowledger(
            self.journal,
            self.driver,  # type: ignore[arg-type]
            delete=True,
            on_acked=lambda b, _: self.events.append(f"acked {b}"),
            visibility_timeout=VISIBILITY,
            dedupe_window=WINDOW,
            heartbeat=self.heartbeat,
            clock=self.clock,
            wall_clock=self.wall,
            confirm=confirm,
        )
        self.ack.start(0, pending or {}, plans)

    def plan(self, batch: int, entries: dict[int, list[int]]) -> BatchPlan:
        """Plan ``batch`` now with the receivers ``entries`` names; each deletes what the plan
        assigns it, then journals the messages numbered ``entries[receiver]``."""
        receivers = tuple(sorted(entries))
        self.ack.track(batch, 10 * len(receivers), receivers=receivers)
        plan = self.journal.plans.write(
            BatchPlan(
                batch,
                tuple(ReceiverPlan(r, 10) for r in receivers),
                acks=self.ack.assignments(batch - 1, list(receivers)),
            )
        )
        self.ack.assign(plan)
        for receiver in receivers:
            acknowledge_assigned(
                self.journal,
                self.executors,
                QUEUE_URL,
                batch,
                receiver,
                plan.acks_by(receiver),
                clock=self.clock,
            )
            messages = [sqs_message(n) for n in entries[receiver]]
            self.journal.entries.write(batch, receiver, messages_to_table(messages, QUEUE_URL))
        return plan

    def deleted_by_executors(self) -> list[str]:
        return sorted(e["ReceiptHandle"] for a, es in self.executors.batch_calls for e in es)

    def dedupe(self) -> set[str]:
        return set(self.journal.dedupe.read(self.clock.now, WINDOW))


def ids_of(*numbers: int) -> set[str]:
    return {sqs_message(n)["MessageId"] for n in numbers}


def test_settlement_reads_the_reports_of_the_receivers_the_plan_names_by_key(
    tmp_path: Path,
) -> None:
    """Batch 1's entries are deleted by batch 2's receivers 0 and 1 (receiver 2 was given none).
    The driver settles batch 1 from their reports, read by key: the store's LIST shows none of
    them (a listing that lags), and a missed report would make the driver forget an uncertain
    delete, or delete the batch again itself."""
    run = Run(tmp_path, hidden=lambda key: key.startswith("acks/"))
    run.plan(1, {0: [0, 1], 1: [2]})
    run.clock.now += 30.0
    plan = run.plan(2, {0: [3], 1: [4], 2: [5]})
    assert sorted({a.by for a in plan.acks}) == [0, 1]
    assert run.journal.store.list("acks") == []
    run.clock.now += 30.0
    run.store.calls.clear()

    stats = run.ack.acknowledge_through(2, by=By.RECEIVERS)

    assert run.events == ["acked 1"]
    assert run.driver.calls == [], "settled from the reports: the driver deleted nothing"
    assert run.deleted_by_executors() == [f"AQEB-receipt-{n}-1" for n in range(3)]
    read = [k for m, k in run.store.calls if m == "read" and k.startswith("acks/")]
    assert read == [report_key(2, 0), report_key(2, 1)]
    assert (stats.batches, stats.deleted, stats.uncertain) == (1, 3, 0)
    [counters] = stats.per_batch
    assert counters["acknowledgedBy"] == 2 and counters["journaled"] == 3
    assert run.dedupe() == set()
    assert run.ack.pending == [2]


def test_an_assigned_entry_whose_bound_passed_at_settlement_is_recorded_uncertain(
    tmp_path: Path,
) -> None:
    """The executors report every delete certain, and their clocks (and the plan's wall-clock
    valid_until, for people only) say the handles were valid. But the driver cannot show on
    its own clock that they were valid until the settlement (every delete came before it): the
    bound known at assignment, planning + visibilityTimeout, is within the margin of now."""
    run = Run(tmp_path)
    run.plan(1, {0: [0, 1], 1: [2]})
    run.clock.now = START + VISIBILITY - 50.0
    plan = run.plan(2, {0: [3], 1: [4]})
    assert all(a.valid_until > run.wall.now for a in plan.acks)
    reports = [AckReports(run.journal).read(2, r) for r in (0, 1)]
    assert [e.uncertain for r in reports if r is not None for e in r.entries] == [(), ()]
    run.clock.now = START + VISIBILITY - MARGIN + 1.0

    stats = run.ack.acknowledge_through(2, by=By.RECEIVERS)

    assert stats.uncertain == 3
    assert stats.per_batch[0]["uncertainAcknowledgements"] == 3
    assert run.dedupe() == ids_of(0, 1, 2)
    assert run.events == ["acked 1"] and run.driver.calls == []


def test_at_settlement_each_entry_is_judged_by_its_own_bound_as_the_heartbeat_knows_it_now(
    tmp_path: Path,
) -> None:
    """Batch 2 was planned (assigning batch 1's deletes) before the heartbeat extended batch 1:
    then it extended receiver 0's entry (confirmed by SQS), and receiver 1's extension failed,
    so that entry's bound stays planning + visibilityTimeout. Settled after that bound: only
    receiver 1's ids are uncertain; receiver 0's are covered by what the heartbeat knows now,
    entry by entry (not by the batch's earliest expiry)."""
    run = Run(tmp_path)
    run.plan(1, {0: [0, 1], 1: [2]})
    run.clock.now += 50.0
    run.plan(2, {0: [3], 1: [4]})
    run.visibility.failures["AQEB-receipt-2-1"].append(("InternalError", False))
    run.clock.now = START + VISIBILITY - 2 * INTERVAL - 1.0
    run.heartbeat.tick()
    assert run.heartbeat.snapshot(1).entry_expires == {
        0: run.clock.now + VISIBILITY,
        1: START + VISIBILITY,
    }
    run.clock.now = START + VISIBILITY + 10.0

    stats = run.ack.acknowledge_through(2, by=By.RECEIVERS)

    assert run.dedupe() == ids_of(2)
    assert stats.uncertain == 1


def test_deletes_an_earlier_run_assigned_are_uncertain_at_settlement(tmp_path: Path) -> None:
    """A restart: batch 2's receivers deleted batch 1's entries under the driver that died.
    The new driver knows no bound for those handles on its clock, so every id counts as
    uncertain, although the reports call every delete certain."""
    first = Run(tmp_path)
    first.plan(1, {0: [0, 1], 1: [2]})
    plan = first.plan(2, {0: [3], 1: [4]})

    # A new driver on the same journal, its clock just started.
    again = Run(tmp_path, pending={1: (0, 1), 2: (0, 1)}, plans={2: plan})
    stats = again.ack.acknowledge_through(2, by=By.RECEIVERS)

    assert again.driver.calls == [], "settled from the reports"
    assert again.dedupe() == ids_of(0, 1, 2)
    assert stats.uncertain == 3 and again.events == ["acked 1"]


def test_settlement_confirms_the_lease_before_it_marks_the_batch(tmp_path: Path) -> None:
    events: list[str] = []
    lease = Lease(events)
    run = Run(tmp_path, confirm=lease.confirm)
    run.events = events
    run.plan(1, {0: [0], 1: [1]})
    run.plan(2, {0: [2]})
    events.clear()

    run.ack.acknowledge_through(2, by=By.RECEIVERS)

    assert events == ["confirm", "acked 1"]
    assert run.journal.batches.status(1) == "removed"


def test_a_confirm_that_raises_stops_the_settlement(tmp_path: Path) -> None:
    events: list[str] = []
    lease = Lease(events)
    run = Run(tmp_path, confirm=lease.confirm)
    run.events = events
    run.plan(1, {0: [0], 1: [1]})
    run.plan(2, {0: [2]})
    lease.fail_from = lease.calls + 1

    with pytest.raises(JournalInUseError):
        run.ack.acknowledge_through(2, by=By.RECEIVERS)

    assert "acked 1" not in events
    assert run.ack.acked_batch == 0 and run.ack.pending == [1, 2]
    assert run.journal.batches.status(1) == "live"
    assert AckReports(run.journal).read(2, 0) is not None, "the reports are kept"


def test_driver_parallelism_grows_with_receivers_within_bounds() -> None:
    from spark_sqs.acknowledgement.acknowledger import driver_parallelism

    assert driver_parallelism(1) == 8
    assert driver_parallelism(4) == 16
    assert driver_parallelism(8) == 32
    assert driver_parallelism(1000) == 64


def test_the_in_flight_count_holds_what_only_a_retired_batch_journaled(
    journal_location: str,
) -> None:
    """Found by the simulation (``python -m sim --seed 70004 --poison-faults --unkind pauses``,
    5 messages in flight with ``maxInFlightMessages=4``): batch 12 retired batch 10 and adopts
    its two entries, but a crash cut the adoption short after the first copy. Batch 10 stays
    pending with no receivers of its own (``Coordinator._find_pending``), so the message only
    its second entry holds was counted nowhere, and the next batch received one too many.
    It counts once, and the copy already made is not counted twice."""
    options = make_options(journal_location, region="us-east-1")
    journal = Journal(journal_location, options)
    journal.entries.write(10, 0, messages_to_table([sqs_message(1)], QUEUE_URL))
    journal.entries.write(10, 1, messages_to_table([sqs_message(2)], QUEUE_URL))
    orphan = BatchPlan(10, (ReceiverPlan(0, 5), ReceiverPlan(1, 5)))
    adopter = BatchPlan(
        12,
        (ReceiverPlan(10000, 0, adopt_from=(10, 0)), ReceiverPlan(10001, 0, adopt_from=(10, 1))),
        retires=(10,),
    )
    journal.entries.write(12, 10000, messages_to_table([sqs_message(1)], QUEUE_URL))
    ack, _ = make_acknowledger(journal, FakeCaller())  # type: ignore[arg-type]
    ack.start(9, {10: (), 12: (10000, 10001)}, {10: orphan, 12: adopter}, retired={10})
    assert ack.pending_messages() == 2
    assert ack.drop_ids(12, 30.0) == frozenset([sqs_message(1)["MessageId"]]), (
        "nobody drops what only the retired batch holds"
    )
    ack.forget(10)  # a new plan adopted it again
    assert ack.pending_messages() == 1, "a forgotten retired batch counts nothing any more"
    assert not ack._retired_ids, "nor keeps its ids"


def test_a_retired_batch_with_only_its_carry_record_counts_nothing_of_its_own(
    journal_location: str,
) -> None:
    """Found by the simulation (``--poison-faults --unkind pauses``, seeds 70002-70006, when the
    coordinator first named the retired batches): a retired batch whose own plan is gone (its
    carry record keeps it pending) names no receivers, so nothing of its own is counted; its
    adopter's copies are."""
    options = make_options(journal_location, region="us-east-1")
    journal = Journal(journal_location, options)
    adopter = BatchPlan(12, (ReceiverPlan(10000, 0, adopt_from=(10, 0)),), retires=(10,))
    journal.entries.write(10, 0, messages_to_table([sqs_message(1)], QUEUE_URL))
    journal.entries.write(12, 10000, messages_to_table([sqs_message(2)], QUEUE_URL))
    ack, _ = make_acknowledger(journal, FakeCaller())  # type: ignore[arg-type]
    ack.start(9, {10: (), 12: (10000,)}, {12: adopter}, retired={10})
    assert ack.pending_messages() == 1
