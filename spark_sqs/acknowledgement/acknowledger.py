"""Cumulative, idempotent acknowledgement of committed micro-batches: the driver's
bookkeeping. Runs on: driver.

What is due and who deletes it is the rule's (``rule``). The driver settles a committed batch
from the reports (``reports``) of the receivers that deleted its entries on the executors
(``assigned``), or deletes it itself (``deletes``) with parallel 10-entry batch calls
(``spark_sqs.sqs.batching``): when no next batch comes, or when a report it needs cannot be read
or says an assigned entry was not found. Deletes that may not have taken effect are recorded for
redelivery dropping; transient failures keep the batch pending and heartbeated until a retry
succeeds.

What a batch holds is read by key: the entries of the receivers its plan names, the reports of
the receivers the next plan assigned. Whether a handle may have expired before its delete is
judged here, on the driver's monotonic clock, against what the driver knows (the batch's
planning time, the heartbeat's extensions), never against an executor's clock. Before it
deletes or marks a batch acknowledged, the driver confirms it still holds the journal's lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import SqsSourceError
from ..journal import AckAssignment, BatchPlan
from ..journal.window import DRIVER
from ..sqs.batching import BatchCaller, entries_of, handle_margin
from .deletes import delete_messages, lost_ids, window_ids
from .reports import AckReports, batch_counters, entry_of
from .rule import By, due

if TYPE_CHECKING:
    from ..driver.heartbeat import BatchVisibility, Heartbeat
    from ..executor.envelopes import PayloadDeleter
    from ..journal import EntryReceipts, Journal

logger = logging.getLogger(__name__)

# The journal's garbage is swept by LIST (old drop sets, acknowledgement reports nobody reads,
# expired duplicate-window segments, files of finished batches a mishap left) at start, then
# every this many acknowledged batches, and when idle: it costs storage only (nothing reads it),
# and a settled batch's own files go by key, so in steady state the sweep only catches mishaps:
# about 0.05 LIST a batch.
COLLECT_EVERY = 100
# While idle (nothing pending), the sweep is repeated at most this often (the driver's
# monotonic clock): stragglers of acknowledged batches may leave files after a sweep.
IDLE_SWEEP_SECONDS = 60.0


def driver_parallelism(receivers: int) -> int:
    """Concurrent batch calls the driver makes to delete (and extend) a micro-batch.

    Spark runs nothing else of the query while ``latestOffset`` deletes the previous batch, and
    that batch was received by ``receivers`` receivers with one call in flight each. Four calls
    per receiver keep the delete phase at about a quarter of the receive phase (SQS answers a
    batch delete about as fast as a receive); the bound keeps threads and connections modest.
    """
    return max(8, min(64, 4 * receivers))


@dataclass
class AckStats:
    batches: int = 0
    messages: int = 0
    deleted: int = 0
    delete_failed: int = 0
    pending_retry: int = 0
    uncertain: int = 0
    # One dict of counters per batch acknowledged by this call.
    per_batch: list[dict[str, Any]] = field(default_factory=list)

    _SUMMED = ("batches", "messages", "deleted", "delete_failed", "pending_retry", "uncertain")

    def add(self, other: AckStats) -> None:
        for name in self._SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class Acknowledger:
    """Cumulative, idempotent acknowledgement of journaled batches. Runs on: driver.

    A committed batch is acknowledged in one of two ways. Normally the next batch's plan
    assigns its entries to that batch's receivers (``assignments``), which delete them on the
    executors; once the next batch commits, ``acknowledge_through`` settles it from their
    reports: no per-message work here. When no next batch comes (an idle queue, the end of
    ``Trigger.AvailableNow``, the first call after a restart), the driver deletes it itself
    with parallel batch calls. Either way the acknowledged watermark never passes a batch whose
    messages may still be in SQS, and a batch whose deletes failed transiently stays pending
    (and heartbeated) and is retried after a backoff, so an AWS outage delays deletion but
    never fails the query.

    A delete may not take effect: its handle expired (SQS then reports success on standard
    queues yet keeps the message), the heartbeat lost the message, or SQS rejected the handle.
    The ids of such messages are written to the journal's dedupe record for ``dedupe_window``
    seconds (this driver's monotonic clock; a record read at start is kept that long from the
    start), and receivers drop and delete any redelivery of them.
    """

    def __init__(
        self,
        journal: Journal,
        caller: BatchCaller,
        *,
        delete: bool,
        on_acked: Callable[[int, dict[str, Any]], None],
        visibility_timeout: int,
        dedupe_window: float,
        heartbeat: Heartbeat | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        retry_after: float = 5.0,
        on_deleted: PayloadDeleter | None = None,
        duplicate_window: float = 0.0,
        confirm: Callable[[], None] | None = None,
        reports: AckReports | None = None,
    ) -> None:
        self._journal = journal
        self._reports = reports if reports is not None else AckReports(journal)
        self._duplicate_window = duplicate_window
        # Called with a batch's entries and its uncertain ids once its messages are deleted,
        # before its entries are removed (extended payloads are deleted there).
        self._on_deleted = on_deleted
        # Raises if this query no longer holds the journal's lease (journal/lease.py).
        self._confirm = confirm
        self._caller = caller
        self._delete = delete
        self._on_acked = on_acked
        self._visibility = visibility_timeout
        self._window = dedupe_window
        self._heartbeat = heartbeat
        self._clock = clock
        self._wall = wall_clock
        self._retry_after = retry_after
        self._margin = handle_margin(visibility_timeout)
        self._pending: set[int] = set()
        # The receivers each pending batch's plan (or carry record) names: its entries are
        # read by key under these numbers.
        self._receivers: dict[int, tuple[int, ...]] = {}
        # Seconds the receivers of a pending batch extended their own entries by (its plan's
        # extend_by; 0: they did not).
        self._extend_by: dict[int, int] = {}
        # Upper bound of the messages of each batch planned in this run (its plan's limits).
        self._limits: dict[int, int] = {}
        # Batches of this run planned with deleteAfterJournal: their receivers delete what they
        # journal, so once Spark has committed one (every task ended) it holds nothing in flight
        # but what a failed delete left, which its acknowledgement deletes.
        self._deleting: set[int] = set()
        # The newest batch Spark has committed, as the coordinator reported it.
        self._committed: int | None = None
        # Batches found pending at start: their handles may have lapsed while no driver
        # heartbeated them, so SQS may hand their messages out again until they are settled.
        self._inherited: set[int] = set()
        self._inherited_ids: dict[int, frozenset[str]] = {}
        # Pending batches found at start that a pending plan retired (no receivers of their
        # own), with their plan's receivers: only the in-flight count reads them.
        self._retired: dict[int, tuple[int, ...]] = {}
        self._retired_ids: dict[int, frozenset[str]] = {}
        # Committed batch -> the batch whose receivers acknowledge it, and which of them.
        self._assigned: dict[int, int] = {}
        self._reporters: dict[int, set[int]] = {}
        # Acknowledging batch -> every receiver of it that writes a report.
        self._report_writers: dict[int, set[int]] = {}
        # (batch, receiver) -> until when (monotonic) the entry's handles were known valid when
        # its deletes were assigned: the bound the settlement checks against its own clock.
        self._valid_until: dict[tuple[int, int], float] = {}
        self._acked = 0
        self._collections = 0
        # Batches acknowledged since the last sweep, and when it ran (monotonic).
        self._unswept = 0
        self._swept_at = 0.0
        self._legacy_metrics = True
        self._not_before = 0.0
        # Dedupe id -> until when (monotonic) its redeliveries are dropped.
        self.dedupe: dict[str, float] = {}
        self.totals = AckStats()

    @property
    def pending(self) -> list[int]:
        return sorted(self._pending)

    @property
    def acked_batch(self) -> int:
        return self._acked

    def start(
        self,
        acked_batch: int,
        pending: Mapping[int, tuple[int, ...]],
        plans: Mapping[int, BatchPlan] | None = None,
        retired: Iterable[int] = (),
    ) -> None:
        """``pending``: the live batches found at start, with their receivers (read by key);
        ``plans``: their stored plans, whose acknowledgement assignments still hold;
        ``retired``: those of them that a pending plan retired (``Coordinator._find_pending``
        decides which), each with no receivers of its own in ``pending``; the in-flight count
        reads what their own plans' receivers journaled."""
        self._acked = acked_batch
        self._pending = set(pending)
        self._receivers.update(pending)
        self._inherited = set(pending)
        # A retired batch without a plan of its own (its carry record only) names no receivers.
        plans = plans or {}
        self._retired = {
            b: tuple(r.receiver for r in plans[b].receivers) for b in retired if b in plans
        }
        self.dedupe = self._journal.dedupe.read(self._clock(), self._window)
        for plan in plans.values():
            self.assign(plan)
        if self._heartbeat is not None:
            for batch, receivers in pending.items():
                # No extend_by: the planning time, which bounds a marker's reach, is unknown.
                self._heartbeat.watch(batch, receivers=receivers)
        self._collect()  # what a run that died mid-collection left

    def _collect(self) -> None:
        """Sweep at start and then every ``COLLECT_EVERY``-th acknowledged batch (see
        ``sweep``); the batches between pay no LIST. What a settled batch is known to leave
        (its files, the reports read) is removed by key with it."""
        if self._collections % COLLECT_EVERY == 0:
            self.sweep()
        else:
            self._unswept += 1
        self._collections += 1

    def sweep(self) -> None:
        """Remove what no live batch needs, found by LIST (best effort; storage only): every
        batch before the oldest pending one is done, so its drop sets and leftover files (those
        not live by key) can go, and the acknowledgement reports no pending batch's
        acknowledgement reads (those of replanned or adopted batches, of stragglers that wrote
        after their batch's removal, of a driver that died before removing them); expired
        window segments (readers skip them)."""
        oldest = min([*self._pending, self._acked + 1])
        self._journal.drops.collect(oldest)
        reading = {by for b, by in self._assigned.items() if b in self._pending}
        self._reports.collect(oldest, reading)
        self._journal.window.collect(self._wall(), oldest)
        self._journal.dedupe.collect(self._clock())
        self._journal.batches.collect(oldest)
        if self._legacy_metrics:
            # An earlier version's metrics/ files (journal/metrics.py): listed until none is left.
            self._legacy_metrics = self._journal.metrics.collect_legacy(self._acked)
        self._unswept = 0
        self._swept_at = self._clock()

    def sweep_when_idle(self) -> None:
        """Nothing is pending (an idle queue): sweep, if a batch was acknowledged since the last
        sweep or ``IDLE_SWEEP_SECONDS`` have passed, so garbage never waits for a busy stream."""
        if self._pending:
            return
        if not self._unswept and self._clock() - self._swept_at < IDLE_SWEEP_SECONDS:
            return
        if self._confirm is not None:
            # Only the journal's owner removes anything from it.
            self._confirm()
        self.sweep()

    def track(
        self,
        batch: int,
        limit: int | None = None,
        *,
        deletes_on_journal: bool = False,
        receivers: tuple[int, ...] | None = None,
        extend_by: int = 0,
    ) -> None:
        """A batch was planned: it will need acknowledging once Spark commits it.
        ``deletes_on_journal``: its plan has its receivers delete what they journal;
        ``receivers``: those its plan names; ``extend_by``: its plan's."""
        self._pending.add(batch)
        if limit is not None:
            self._limits[batch] = limit
        if receivers is not None:
            self._receivers[batch] = tuple(receivers)
        if extend_by:
            self._extend_by[batch] = extend_by
        if deletes_on_journal:
            self._deleting.add(batch)
        else:
            self._deleting.discard(batch)
        if self._heartbeat is not None:
            self._heartbeat.watch(
                batch,
                planned=batch not in self._inherited,
                receivers=receivers,
                extend_by=extend_by,
            )

    def inherit(self, batch: int) -> None:
        """``batch`` delivers entries received long before it was planned (adopted from
        orphans): its handles may be close to expiry, as an inherited batch's are."""
        self._inherited.add(batch)
        self._inherited_ids.pop(batch, None)
        if self._heartbeat is not None:
            self._heartbeat.discover_now(batch)

    def forget(self, batch: int) -> None:
        """The batch's entries moved elsewhere (adopted into a later batch)."""
        self._pending.discard(batch)
        self._forget_batch(batch)
        if self._heartbeat is not None:
            self._heartbeat.forget(batch)

    def _forget_batch(self, batch: int) -> None:
        """Every per-batch record but ``_pending``, once ``batch`` is acknowledged or moved."""
        self._limits.pop(batch, None)
        self._deleting.discard(batch)
        self._inherited.discard(batch)
        self._inherited_ids.pop(batch, None)
        self._retired.pop(batch, None)
        self._retired_ids.pop(batch, None)
        self._receivers.pop(batch, None)
        self._extend_by.pop(batch, None)
        self._forget_assignment(batch)

    def _forget_assignment(self, batch: int) -> None:
        """What the driver kept of ``batch``'s acknowledgement assignment, once the batch is
        acknowledged or moved: every per-batch record here ends with its batch, so a
        long-running driver holds only what its pending batches need."""
        self._assigned.pop(batch, None)
        self._reporters.pop(batch, None)
        for key in [k for k in self._valid_until if k[0] == batch]:
            del self._valid_until[key]
        # An acknowledging batch no pending batch is assigned to any more: its reports are
        # settled or never will be (the driver deleted the batch itself); the LIST of
        # AckReports.collect removes what is left of them.
        assigned = set(self._assigned.values())
        for by in [b for b in self._report_writers if b not in assigned]:
            del self._report_writers[by]

    def receivers_of(self, batch: int) -> tuple[int, ...]:
        return self._receivers.get(batch, ())

    def assign(self, plan: BatchPlan) -> None:
        """``plan``'s receivers acknowledge the batches it lists."""
        for batch in plan.acknowledges:
            if batch in self._pending:
                self._assigned[batch] = plan.batch
                self._reporters[batch] = {a.by for a in plan.acks if a.batch == batch}
        if plan.acks:
            self._report_writers[plan.batch] = {a.by for a in plan.acks}

    def unassigned(self, committed: int) -> list[int]:
        """Committed pending batches whose deletes no planned batch's receivers were given yet
        (none without deleteOnCommit: nothing is deleted, the driver removes the entries)."""
        if not self._delete:
            return []
        return [b for b in sorted(self._pending) if b <= committed and b not in self._assigned]

    def assignments(self, committed: int, receivers: list[int]) -> tuple[AckAssignment, ...]:
        """Spread the entries of the committed, unassigned pending batches over ``receivers``
        of the batch being planned (only with deleteOnCommit: otherwise nothing is deleted
        and the driver removes the entries itself). Every receiver the committed batch's plan
        names is assigned (every one wrote an entry before the batch committed); a receiver
        that finds no entry reports none."""
        if not receivers:
            return ()
        due = self.unassigned(committed)
        out: list[AckAssignment] = []
        now, wall = self._clock(), self._wall()
        for batch in due:
            visibility = self._heartbeat.snapshot(batch) if self._heartbeat is not None else None
            held = self._held_by_receivers(batch, visibility)
            lost = tuple(sorted(visibility.lost)) if visibility else ()
            for entry in self.receivers_of(batch):
                valid = max(self._entry_valid_until(visibility, entry), held.get(entry, 0.0))
                self._valid_until[(batch, entry)] = valid
                out.append(
                    AckAssignment(
                        batch,
                        entry,
                        receivers[len(out) % len(receivers)],
                        # For people reading the plan only, as wall time: the settlement
                        # judges the bound above, on this driver's clock.
                        valid_until=wall + (valid - now) if valid else 0.0,
                        lost=lost,
                    )
                )
        return tuple(out)

    def _held_by_receivers(
        self, batch: int, visibility: BatchVisibility | None
    ) -> dict[int, float]:
        """Receiver -> until when its own extension holds its entry (its marker, read by key),
        bounded on this clock by the batch's planning time plus the plan's extend_by."""
        extend_by = self._extend_by.get(batch, 0)
        if not extend_by or visibility is None or visibility.planned_at is None:
            return {}
        until = visibility.planned_at + extend_by
        known = dict(visibility.held_until)
        unknown = [r for r in self.receivers_of(batch) if r not in known]
        for receiver in self._journal.entries.extended_receivers(batch, unknown) if unknown else ():
            known[receiver] = until
        return known

    def _entry_valid_until(self, visibility: BatchVisibility | None, entry: int) -> float:
        """The earliest time (this driver's monotonic clock) a handle of ``entry`` may
        expire, as far as this driver knows: what the heartbeat tracks of that entry, else
        what its receiver's marker says it extended to, else the receive baseline (a
        visibility timeout from the batch's planning; 0 for an inherited batch). Not the
        batch's earliest: one entry near expiry must not make every delete of the batch
        uncertain, and an entry the heartbeat has not read yet is bounded by its own receive,
        never by other entries' extensions."""
        if visibility is None:
            return 0.0
        if entry in visibility.entry_expires:
            return visibility.entry_expires[entry]
        if entry in visibility.held_until:
            return visibility.held_until[entry]
        if visibility.planned_at is not None:
            return visibility.planned_at + self._visibility
        return 0.0

    def drop_ids(self, before_or_at: int, receive_window: float = 0.0) -> frozenset[str]:
        """Ids a receiver of batch ``before_or_at`` must drop: recorded uncertain
        acknowledgements, messages whose visibility the heartbeat lost, and everything
        journaled by batches inherited from an earlier run (their handles may have expired
        while no heartbeat ran, and SQS may hand them out again). Batches planned in this run
        stay invisible under the heartbeat and cost nothing here, unless one of their handles
        may expire within ``receive_window`` seconds (the next batch's receiving): a late or
        failing heartbeat must not let a redelivery into the next batch."""
        now = self._clock()
        self.dedupe = {i: until for i, until in self.dedupe.items() if until > now}
        ids = set(self.dedupe)
        for batch in sorted(self._pending):
            # A batch of this run planned before this one is complete (committed); the batch
            # being planned has no entries of this run yet.
            if (batch in self._inherited and batch <= before_or_at) or (
                batch < before_or_at and self._may_lapse(batch, now, receive_window)
            ):
                ids.update(self._journaled_ids(batch))
        if self._heartbeat is not None:
            for batch in self._pending:
                ids.update(self._heartbeat.snapshot(batch).lost)
        return frozenset(ids)

    def _journaled_ids(self, batch: int) -> frozenset[str]:
        """Every id the receivers of ``batch`` journaled (entries, else parts), read by key."""
        if batch not in self._inherited_ids:
            self._inherited_ids[batch] = self._journal.entries.batch_message_ids(
                batch, self.receivers_of(batch)
            )
        return self._inherited_ids[batch]

    def _may_lapse(self, batch: int, now: float, window: float) -> bool:
        if self._heartbeat is None:
            return True
        visibility = self._heartbeat.snapshot(batch)
        needed = now + window + self._margin
        # Entry by entry: an entry the heartbeat has not read is bounded by its own marker or
        # receive, never by what the heartbeat extended of other entries. Lost ids are
        # dropped apart (drop_ids).
        entries = self.receivers_of(batch)
        held = self._held_by_receivers(batch, visibility)
        return not entries or any(
            max(self._entry_valid_until(visibility, e), held.get(e, 0.0)) < needed for e in entries
        )

    def acknowledge_through(self, batch: int, *, by: By = By.DRIVER) -> AckStats:
        """Acknowledge the pending batches up to ``batch`` (committed by Spark) that the rule
        says are due (``rule.due``): with ``by=RECEIVERS``, ``batch`` itself, if no receivers
        were assigned it yet, is left for the batch about to be planned."""
        stats = AckStats()
        # Only ever called with a batch Spark has committed.
        self._committed = batch if self._committed is None else max(self._committed, batch)
        if not any(b <= batch for b in self._pending) or self._clock() < self._not_before:
            return stats
        for step in due(self._pending, batch, self._assigned, by=by, deleting=self._delete):
            if step.settle_from is not None:
                done = self._settle(step.batch, step.settle_from, stats)
            else:
                done = self._acknowledge(step.batch, stats)
            if not done:
                # Later batches wait too: the acknowledged watermark must never pass a batch
                # whose messages are still in SQS.
                self._not_before = self._clock() + self._retry_after
                break
        self.totals.add(stats)
        return stats

    def pending_messages(self) -> int:
        """Messages journaled by batches not yet acknowledged (received, not deleted), at most:
        the plan limits of this run's batches, plus the counted entries of inherited batches and of
        batches that adopted orphaned entries. A committed deleteAfterJournal batch of this run
        counts nothing: its receivers deleted its messages as they journaled them."""
        total = 0
        # Pending retired batches (each leaves _retired with _pending: _forget_batch). Only
        # while one is pending (rare): the ids counted, so that none of its copies counts twice.
        retired = list(self._retired)
        counted: set[str] = set()
        for batch in self._pending:
            # Only batches planned in this run are in _deleting (inherited ones stay counted).
            committed = self._committed is not None and batch <= self._committed
            if committed and batch in self._deleting and batch not in self._inherited:
                continue
            total += self._limits.get(batch, 0)
            # Inherited batches, and batches of this run that adopted orphaned entries (their
            # plan gives the adopting receivers no limit), hold what is journaled.
            if batch in self._inherited or batch not in self._limits:
                ids = self._journaled_ids(batch)
                total += len(ids)
                if retired:
                    counted.update(ids)
        # A retired batch has no receivers of its own, but until its adopter's copies are all
        # made (an adoption cut short by a crash), a message may be journaled only there: in
        # flight all the same. Counted once, beside the copies already counted.
        for batch in retired:
            if batch not in self._retired_ids:
                self._retired_ids[batch] = self._journal.entries.batch_message_ids(
                    batch, self._retired[batch]
                )
            fresh = self._retired_ids[batch] - counted
            total += len(fresh)
            counted.update(fresh)
        return total

    def _settle(self, batch: int, by: int, stats: AckStats) -> bool:
        """``batch`` was acknowledged by the receivers of ``by``, which Spark committed: its
        counters come from their reports, read by key. A delete whose handle may have expired
        before it reached SQS is judged now, on this clock: every delete came before this
        moment, so a handle known valid until after it was valid for them. False if it must be
        retried later."""
        expected = sorted(self._reporters.get(batch, set()))
        reports = {r: report for r in expected if (report := self._reports.read(by, r))}
        missing = [r for r in expected if r not in reports]
        unfound = [e for report in reports.values() for e in report.missing_of(batch)]
        if unfound:
            logger.warning(
                "batch %d: receivers of batch %d did not find its entries %s; the driver "
                "deletes the batch itself",
                batch,
                by,
                sorted(unfound),
            )
            self._assigned.pop(batch, None)
            return self._acknowledge(batch, stats)
        if missing:
            # Every receiver that acknowledges runs before it journals and the batch committed,
            # so its report exists: one that cannot be read must not make the driver forget an
            # uncertain delete. It deletes the batch itself, as when no batch follows
            # (deleting twice is harmless; expired handles count as uncertain).
            logger.warning(
                "batch %d: no acknowledgement report from receivers %s of batch %d; the driver "
                "deletes the batch itself",
                batch,
                missing,
                by,
            )
            self._assigned.pop(batch, None)
            return self._acknowledge(batch, stats)
        mine = [e for r in reports.values() for e in r.of_batch(batch)]
        uncertain = {i for e in mine for i in e.uncertain} | self._expired_before_settling(batch)
        self._record_uncertain(batch, uncertain, stats)
        rows = sum(e.rows for e in mine)
        stats.deleted += sum(e.deleted for e in mine)
        stats.delete_failed += sum(e.delete_failures for e in mine)
        stats.per_batch.append(
            batch_counters(batch, mine, uncertain=len(uncertain), acknowledged_by=by)
        )
        # Every receiver of ``by`` that reports: its record ends with the last batch it settles.
        writers = self._report_writers.get(by, set(expected))
        # The last batch ``by`` settles takes its reports along in its removal's one
        # delete_many (they were read above; the acked marker is written before it).
        last = not any(m == by for b, m in self._assigned.items() if b != batch)
        # The window's sealer of ``batch`` is the first receiver of the next batch assigned to
        # acknowledge it (executor/filtering.py ``window_seal``): its report was read, so its
        # seal and the probe after it are done, and the removal need not probe again.
        self._finish(
            batch,
            rows,
            stats,
            reports=self._reports.keys(by, writers) if last else (),
            probed=by == batch + 1 and bool(expected),
        )
        return True

    def _expired_before_settling(self, batch: int) -> set[str]:
        """Ids of ``batch``'s entries whose handles this driver cannot show were valid until
        now: their deletes (made by the next batch's receivers, before now) may have come too
        late. The bound is the larger of what was known when the deletes were assigned and
        what the heartbeat knows now; an assignment of an earlier run is unknown, so all its
        ids count. Entries are read only for those."""
        now = self._clock()
        visibility = self._heartbeat.snapshot(batch) if self._heartbeat is not None else None
        out: set[str] = set()
        for receiver in self.receivers_of(batch):
            known = self._valid_until.get((batch, receiver), 0.0)
            if visibility is not None:
                known = max(known, visibility.entry_expires.get(receiver, 0.0))
            if known < now + self._margin:
                out.update(self._journal.entries.receiver_ids(batch, receiver))
        return out

    def _finish(
        self,
        batch: int,
        rows: int,
        stats: AckStats,
        reports: Sequence[str] = (),
        probed: bool = False,
    ) -> None:
        """``batch`` is acknowledged: the acknowledged watermark and the batch's counters (the
        last of ``stats.per_batch``, which its acknowledged marker holds) go to ``on_acked``,
        then its files are removed (``probed``: ``Batches.remove``)."""
        if self._confirm is not None:
            # A driver paused past its lease must not mark batches another query may own.
            self._confirm()
        if self._heartbeat is not None:
            self._heartbeat.forget(batch)
        self._acked = max(self._acked, batch)
        # The acknowledged marker names the dedupe records still kept; those let go are removed
        # now (no request when none was), not left for a sweep a short run may never reach: a
        # record found unnamed at a start is kept a whole window again.
        now = self._clock()
        self._journal.dedupe.expire(now)
        self._on_acked(self._acked, stats.per_batch[-1])
        self._journal.dedupe.collect(now)
        # A batch planned in this run without deleteAfterJournal holds what its receivers
        # write under their names (read by key); anything else goes by LIST, or to the sweep.
        by_key = batch in self._receivers and batch not in self._inherited
        files = (
            self._journal.entries.names(self.receivers_of(batch))
            if by_key and batch not in self._deleting
            else None
        )
        self._journal.batches.remove(batch, also=reports, files=files, probed=probed)
        self._pending.discard(batch)
        self._collect()
        self._forget_batch(batch)
        stats.batches += 1
        stats.messages += rows

    def _record_uncertain(self, batch: int, uncertain: set[str], stats: AckStats) -> None:
        if not uncertain:
            return
        now = self._clock()
        self._journal.dedupe.write(
            batch, sorted(uncertain), now=now, window=self._window, wall=self._wall()
        )
        for message_id in uncertain:
            self.dedupe[message_id] = now + self._window
        stats.uncertain += len(uncertain)
        logger.warning(
            "batch %d: %d acknowledgements may not have taken effect; redeliveries of those "
            "messages will be dropped for %.0fs (dedupeWindow)",
            batch,
            len(uncertain),
            self._window,
        )

    def _acknowledge(self, batch: int, stats: AckStats) -> bool:
        """The driver deletes ``batch`` itself (no next batch's receivers will)."""
        receipts = self._journal.entries.batch_receipts(batch, self.receivers_of(batch))
        entries = [e for r in receipts for e in entries_of(r)]
        if self._delete and entries and self._confirm is not None:
            self._confirm()
        # What the heartbeat knows of the handles, taken before it forgets the batch: they are
        # judged against the clock once the deletes are made (``_expired``), not before.
        bounds, lost = self._handle_bounds(batch, receipts) if self._delete else ({}, set())
        uncertain = set(lost)
        if self._heartbeat is not None:
            # From here on the batch is being deleted: extending it would only race.
            self._heartbeat.forget(batch)
        deleted = failures = 0
        if self._delete and entries:
            deletion = delete_messages(
                self._journal,
                self._caller,
                [entries],
                window=window_ids(receipts),
                queue_url=self._caller.queue_url,
                duplicate_window=self._duplicate_window,
                batch=batch,
                who=DRIVER,
                clock=self._clock,
                doubtful=[uncertain],
                catch=SqsSourceError,
                # No next batch's receiver seals this batch: the driver does, with its ids.
                seal=self._journal.window.driver_seal(batch, self.receivers_of(batch)),
            )
            error = deletion.error
            if isinstance(error, SqsSourceError):
                if not error.retriable:
                    raise error
                logger.warning(
                    "batch %d: deleting %d messages failed, will retry: %s",
                    batch,
                    len(entries),
                    error,
                )
                stats.pending_retry += len(entries)
                self._rewatch(batch)
                return False
            transient = deletion.transient
            if transient:
                logger.warning(
                    "batch %d: %d of %d deletes failed transiently (%s), will retry",
                    batch,
                    len(transient),
                    len(entries),
                    sorted(set(transient.values())),
                )
                stats.pending_retry += len(transient)
                self._rewatch(batch)
                return False
            deleted = deletion.deleted
            permanent = deletion.permanent
            failures = len(permanent)
            # Every delete call was made by now: a handle that may have expired before this
            # moment may have expired before its delete (a slow seal, throttled or retried
            # calls, a pause), which SQS can answer with success and keep the message.
            uncertain = deletion.uncertain | self._expired(bounds)
            if permanent:
                logger.warning(
                    "batch %d: %d deletes failed permanently (%s)",
                    batch,
                    len(permanent),
                    sorted(set(permanent.values())),
                )
        stats.deleted += deleted
        stats.delete_failed += failures
        self._record_uncertain(batch, uncertain, stats)
        if self._on_deleted is not None and self._delete:
            self._on_deleted(receipts, uncertain)
        rows = sum(r.rows for r in receipts)
        stats.per_batch.append(
            batch_counters(
                batch,
                [entry_of(r) for r in receipts],
                uncertain=len(uncertain),
                deleted=deleted,
                delete_failures=failures,
            )
        )
        self._finish(batch, rows, stats)
        logger.info(
            "batch %d: acknowledged %d messages (%s)",
            batch,
            len(entries),
            "deleted" if self._delete else "deleteOnCommit=false, left in the queue",
        )
        return True

    def _rewatch(self, batch: int) -> None:
        """A batch whose deletes must be retried is kept invisible meanwhile: its handles'
        bounds were forgotten with it, so it is extended at the next tick (as inherited)."""
        if self._heartbeat is not None:
            self._heartbeat.watch(batch, receivers=self.receivers_of(batch))

    def _handle_bounds(
        self, batch: int, receipts: list[EntryReceipts]
    ) -> tuple[dict[str, float], set[str]]:
        """Until when (this driver's monotonic clock) each message's handle is known valid, as
        far as the batch's planning time, the heartbeat's extensions and the receivers' markers
        tell, and the messages the heartbeat lost (their deletes may not take effect, whenever
        they are made). Read before the heartbeat forgets the batch: nothing extends it after."""
        visibility = self._heartbeat.snapshot(batch) if self._heartbeat is not None else None
        held = self._held_by_receivers(batch, visibility)
        bounds: dict[str, float] = {}
        lost: set[str] = set()
        for r in receipts:
            baseline = max(
                self._entry_valid_until(visibility, r.receiver), held.get(r.receiver, 0.0)
            )
            gone = lost_ids(r.message_ids, visibility.lost) if visibility is not None else set()
            lost |= gone
            for message_id in r.message_ids:
                if message_id in gone:
                    continue
                expires = baseline
                if visibility is not None:
                    expires = max(expires, visibility.expires_at.get(message_id, 0.0))
                bounds[message_id] = expires
        return bounds, lost

    def _expired(self, bounds: Mapping[str, float]) -> set[str]:
        """Messages whose handle may have expired by now (within the margin): called once the
        deletes are made, as the settlement judges its receivers' deletes (``_settle``)."""
        needed = self._clock() + self._margin
        return {i for i, expires in bounds.items() if expires < needed}
