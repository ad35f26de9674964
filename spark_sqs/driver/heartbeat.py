"""Visibility heartbeat: keeps received messages invisible until acknowledged. Runs on: driver.

A background thread on the driver's reader wakes every ``heartbeatInterval`` seconds (monotonic
clock), finds the journal entries of every unacknowledged batch that could need it (a batch
planned in this run only once its visibility timeout nears its end: batches acknowledged sooner
cost nothing here), and extends with
``ChangeMessageVisibilityBatch`` each message whose visibility would run out before the next
two ticks. It never asks for more than SQS's 12 hours from the receive, and warns, naming the
batch, when a message gets within an hour of that ceiling.

When the batch's plan asks for it (``BatchPlan.extend_by``: set by the driver once batches run
long relative to the visibility timeout), each receiver makes the first extension itself right
after journaling and records it in a marker (executor/extension.py). The heartbeat reads each
planned receiver's marker by key and reads an entry only if it has no marker (its receiver
died or failed in between) or once the marker's reach nears: its cost per batch no longer grows
with the number of messages.

Time is judged on this process's monotonic clock only. A batch planned in this run was
received after it was planned, so its messages stay invisible at least until the planning time
plus ``visibilityTimeout`` (plus ``extend_by`` where a receiver's marker says it extended):
that is when the heartbeat first extends them, whatever the executors' clocks say. A batch
inherited from an earlier run has no such bound and is extended at once. An expiry the
heartbeat estimated is tried (SQS refuses an expired handle, and the message is then lost);
only one it confirmed by an extension marks the message lost once it passes.

Failures are sorted: an entry whose handle is stale or whose message is gone can never be
extended, so the message is marked lost (the acknowledger then records it for redelivery
dedupe); transient failures are retried by the batch caller with backoff and again at the next
tick. A failed tick is logged and counted; the thread never dies and never raises into Spark. A
failure only a person can fix (access denied, queue deleted) is kept in ``fatal``, and the
driver stops the query with it at the next batch boundary. ``stop()`` cancels and waits.

``lock`` guards the bookkeeping only: journal reads and SQS calls run outside it, so planning
and acknowledgement never wait for them. A batch being acknowledged is forgotten first; an
extension that races with a delete fails harmlessly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import JournalInUseError, QueueNotFoundError, SqsAccessError, SqsSourceError
from ..journal import EntryReceipts
from ..sqs.batching import BatchCaller, Entry, entries_of

if TYPE_CHECKING:
    from ..journal import Journal

logger = logging.getLogger(__name__)

MAX_INVISIBLE_SECONDS = 43200.0
CEILING_WARNING_SECONDS = 3600.0
# How far an extension reaches at least. A journaled message never needs to become visible
# again (a replay reads it from the journal; every release sets its visibility to 0 on its
# own), so extending it by more than visibilityTimeout costs nothing, and each message is then
# extended once per this many seconds instead of once per visibilityTimeout: the driver's
# work for a batch that outlives the timeout falls by that ratio.
EXTENSION_FLOOR_SECONDS = 900


@dataclass
class HeartbeatStats:
    ticks: int = 0
    extended: int = 0
    failed_permanent: int = 0
    failed_transient: int = 0
    lost: int = 0
    tick_errors: int = 0


@dataclass
class _Tracked:
    handle: str = field(repr=False)
    expires: float  # monotonic time at which the message becomes visible again (at the latest)
    ceiling: float  # monotonic time 12 h after the receive (at the earliest)
    queue: str | None = None  # the queue of the message (several queues: queues.py)
    receiver: int = -1  # the journal entry it came from
    # True once an extension succeeded: ``expires`` is then known, not a lower bound.
    confirmed: bool = False


@dataclass(frozen=True)
class BatchVisibility:
    """What the heartbeat knows about a batch when it is acknowledged: times on the driver's
    monotonic clock (the clock the heartbeat and the acknowledger share), never an executor's."""

    expires_at: dict[str, float]  # message id -> when its visibility ends, at the earliest
    lost: frozenset[str]  # message ids that may already be visible again
    # When the batch was planned in this run: no receive of it started earlier, so its
    # messages stay invisible until this plus visibilityTimeout (None: inherited).
    planned_at: float | None = None
    # Receiver -> until when its own extension keeps its entry invisible (its marker; the
    # batch's planning time plus the plan's extend_by), for entries the heartbeat has not read.
    held_until: dict[int, float] = field(default_factory=dict)
    # Receiver -> when the first of its entry's tracked messages becomes visible again, for
    # entries the heartbeat read: a bound on that entry alone, where the batch's earliest would
    # make every entry's deletes uncertain for one entry's sake.
    entry_expires: dict[int, float] = field(default_factory=dict)


class Heartbeat:
    def __init__(
        self,
        journal: Journal,
        caller: BatchCaller,
        *,
        visibility_timeout: int,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        on_tick: Callable[[], None] | None = None,
        extend_by: int | None = None,
    ) -> None:
        self._journal = journal
        # Seconds each extension asks for (capped by the 12-hour ceiling): visibilityTimeout
        # unless the caller allows more (see EXTENSION_FLOOR_SECONDS).
        self.extend_by = visibility_timeout if extend_by is None else extend_by
        # Renews the journal's lease: on the same clock, and stopped with the heartbeat.
        self._on_tick = on_tick
        self._caller = caller
        self._visibility = visibility_timeout
        self._interval = interval
        self._clock = clock
        self.lock = threading.RLock()
        self._tracked: dict[int, dict[str, _Tracked]] = {}
        self._seen_receivers: dict[int, set[int]] = {}
        # Batch -> the receivers its plan (or carry record) names: read by key, never listed.
        self._receivers: dict[int, tuple[int, ...]] = {}
        # Batch -> seconds its receivers extended their own entries by (the plan's extend_by).
        self._self_extended: dict[int, int] = {}
        # Batch -> monotonic time it was planned in this run (absent: inherited).
        self._planned_at: dict[int, float] = {}
        self._discover_after: dict[int, float] = {}
        self._lost: dict[int, set[str]] = defaultdict(set)
        # Batch -> receiver -> monotonic time until which its receiver extended it (marker).
        self._held: dict[int, dict[int, float]] = {}
        self._warned: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stats = HeartbeatStats()
        # The first failure no retry can fix; the driver raises it into Spark.
        self.fatal: SqsSourceError | None = None

    # -- batches --------------------------------------------------------------------------------

    def watch(
        self,
        batch: int,
        planned: bool = False,
        *,
        receivers: tuple[int, ...] | None = None,
        extend_by: int = 0,
    ) -> None:
        """Keep ``batch`` invisible: the entries of ``receivers`` (its plan's). A batch
        ``planned`` just now is first read once one of its messages could need extending (its
        receives started after now): a batch that is acknowledged within the visibility
        timeout costs the heartbeat nothing. ``extend_by``: its receivers extend their own
        entries by that much (the plan's), and say so in a marker."""
        with self.lock:
            if receivers is not None:
                self._receivers[batch] = tuple(receivers)
            if extend_by:
                self._self_extended[batch] = extend_by
            if batch in self._tracked:
                return
            self._tracked[batch] = {}
            self._seen_receivers[batch] = set()
            if planned:
                now = self._clock()
                self._planned_at[batch] = now
                margin = max(2.0, 0.05 * self._visibility)
                self._discover_after[batch] = (
                    now + self._visibility - 2 * self._interval - 1.0 - margin
                )

    def discover_now(self, batch: int) -> None:
        """Read ``batch`` at the next tick (it holds entries received long ago)."""
        with self.lock:
            self._discover_after.pop(batch, None)
            self._planned_at.pop(batch, None)

    def snapshot(self, batch: int) -> BatchVisibility:
        with self.lock:
            tracked = self._tracked.get(batch, {})
            entry_expires: dict[int, float] = {}
            for t in tracked.values():
                if t.expires < entry_expires.get(t.receiver, float("inf")):
                    entry_expires[t.receiver] = t.expires
            return BatchVisibility(
                expires_at={i: t.expires for i, t in tracked.items()},
                lost=frozenset(self._lost.get(batch, ())),
                planned_at=self._planned_at.get(batch),
                held_until=dict(self._held.get(batch, {})),
                entry_expires=entry_expires,
            )

    def forget(self, batch: int) -> None:
        with self.lock:
            self._tracked.pop(batch, None)
            self._seen_receivers.pop(batch, None)
            self._receivers.pop(batch, None)
            self._self_extended.pop(batch, None)
            self._planned_at.pop(batch, None)
            self._discover_after.pop(batch, None)
            self._lost.pop(batch, None)
            self._held.pop(batch, None)
            self._warned.discard(batch)

    def watched(self) -> list[int]:
        with self.lock:
            return sorted(self._tracked)

    # -- thread ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="spark-sqs-heartbeat", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.tick_safely()

    def tick_safely(self) -> None:
        """One tick that never raises: the thread's body. The lease renewals and the tick fail
        apart: a store fault on a renewal must not skip the visibility extensions, nor a slow
        failing tick the renewal after it."""
        if self._on_tick is not None:
            self._safely(self._on_tick)
        self._safely(self.tick)
        if self._on_tick is not None:
            # Again after the tick's journal and SQS calls, which may take a while (retries
            # with backoff): the lease must not look abandoned meanwhile.
            self._safely(self._on_tick)

    def _safely(self, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as exc:
            # Never let the thread die: a dead heartbeat would let messages reappear.
            self.stats.tick_errors += 1
            if (
                isinstance(exc, (SqsAccessError, QueueNotFoundError, JournalInUseError))
                and self.fatal is None
            ):
                self.fatal = exc
            logger.exception(
                "visibility heartbeat tick failed (%d so far); retrying in %.1fs",
                self.stats.tick_errors,
                self._interval,
            )

    # -- one pass -------------------------------------------------------------------------------

    def tick(self) -> None:
        """Discover new entries, then extend what runs out before the next two ticks. Journal
        and SQS calls run outside ``lock``, which planning and acknowledgement also take."""
        # An entry its receiver extended is read only once the marker's reach comes within
        # one tick of the extension horizon: then it is tracked in time to be extended.
        ahead = 3 * self._interval + 1.0 + max(2.0, 0.05 * self._visibility)
        with self.lock:
            self.stats.ticks += 1
            now = self._clock()
            due = [
                (
                    batch,
                    # Seen, or held by its own extension for a while yet (no need to read its
                    # marker again every tick).
                    set(self._seen_receivers[batch])
                    | {r for r, until in self._held.get(batch, {}).items() if until - now > ahead},
                    self._receivers.get(batch, ()),
                    self._self_extended.get(batch, 0),
                    self._planned_at.get(batch),
                )
                for batch in self._tracked
                if self._discover_after.get(batch, 0.0) <= now
            ]
        found: list[EntryReceipts] = []
        held: list[tuple[int, int, float]] = []
        for batch, seen, receivers, extend_by, planned_at in due:
            unseen = [r for r in receivers if r not in seen]
            marked: set[int] = set()
            if extend_by and planned_at is not None and unseen:
                # The reach is bounded by this driver's clock: the receiver extended after the
                # batch was planned, by extend_by.
                until = planned_at + extend_by
                if until - self._clock() > ahead:
                    marked = self._journal.entries.extended_receivers(batch, unseen)
                    held += [(batch, r, until) for r in marked]
            for receiver in unseen:
                if receiver in marked:
                    continue
                receipts = self._journal.entries.read_receipts(batch, receiver)
                if receipts is not None:
                    found.append(receipts)
        with self.lock:
            for batch, receiver, deadline in held:
                if batch in self._tracked:
                    self._held.setdefault(batch, {})[receiver] = deadline
            for receipts in found:
                self._track_entry(receipts)
            lost_before = self.stats.lost
            by_timeout, now = self._due_extensions()
        for timeout, entries in by_timeout.items():
            self._extend(timeout, entries, now)
        if self.stats.lost > lost_before:
            logger.warning(
                "visibility heartbeat: lost track of %d messages (stale handle, gone, or "
                "visibility already expired); a redelivery of them will be dropped",
                self.stats.lost - lost_before,
            )

    def _track_entry(self, receipts: EntryReceipts) -> None:
        tracked = self._tracked.get(receipts.batch)
        seen = self._seen_receivers.get(receipts.batch)
        if tracked is None or seen is None or receipts.receiver in seen:
            return  # forgotten (acknowledged) meanwhile, or seen by an earlier tick
        seen.add(receipts.receiver)
        now = self._clock()
        # When the messages were received, bounded on this clock: not before the batch was
        # planned (a batch of this run); unknown for an inherited batch, which is extended at
        # once. The entry's receive time is another host's clock and is not used.
        planned_at = self._planned_at.get(receipts.batch)
        expires = now if planned_at is None else planned_at + self._visibility
        marker = self._held.get(receipts.batch, {}).pop(receipts.receiver, None)
        if marker is not None:
            expires = max(expires, marker)
        for entry in entries_of(receipts):
            tracked[entry.message_id] = _Tracked(
                handle=entry.receipt_handle,
                expires=expires,
                # 12 hours from the receive, which came after the planning. For an inherited
                # batch it is unknown (only another host's clock says): SQS refuses an
                # extension past it, and the message is then counted lost, as it would be.
                ceiling=(now if planned_at is None else planned_at) + MAX_INVISIBLE_SECONDS,
                queue=entry.queue_url,
                receiver=receipts.receiver,
            )

    def _due_extensions(self) -> tuple[dict[int, list[tuple[int, str, _Tracked]]], float]:
        now = self._clock()
        horizon = now + 2 * self._interval + 1.0
        by_timeout: dict[int, list[tuple[int, str, _Tracked]]] = defaultdict(list)
        for batch, tracked in self._tracked.items():
            for message_id, t in list(tracked.items()):
                if t.expires <= now and t.confirmed:
                    self._mark_lost(batch, message_id, "its visibility timeout passed")
                    continue
                if t.ceiling - now <= CEILING_WARNING_SECONDS and batch not in self._warned:
                    self._warned.add(batch)
                    logger.warning(
                        "batch %d: messages are %.0f minutes from SQS's 12-hour visibility "
                        "ceiling; they will become visible again then. Make the batch finish "
                        "sooner (lower maxMessagesPerTrigger, faster sink)",
                        batch,
                        (t.ceiling - now) / 60.0,
                    )
                if t.expires > horizon:
                    continue
                timeout = int(min(self.extend_by, t.ceiling - now))
                if timeout <= 0:
                    self._mark_lost(batch, message_id, "it reached the 12-hour ceiling")
                    continue
                by_timeout[timeout].append((batch, message_id, t))
        return by_timeout, now

    def _extend(self, timeout: int, due: list[tuple[int, str, _Tracked]], now: float) -> None:
        entries = [Entry(message_id, t.handle, t.queue) for _, message_id, t in due]
        result = self._caller.change_visibility(entries, timeout)
        ok = set(result.succeeded)
        with self.lock:
            for batch, message_id, t in due:
                if batch not in self._tracked:
                    continue  # acknowledged while we extended: nothing to record
                if message_id in ok:
                    t.expires = now + timeout
                    t.confirmed = True
                elif message_id in result.permanent:
                    self.stats.failed_permanent += 1
                    self._mark_lost(batch, message_id, result.permanent[message_id])
            self.stats.extended += len(ok)
            self.stats.failed_transient += len(result.transient)
        if result.permanent or result.transient:
            logger.warning(
                "visibility heartbeat: extended %d, %d failed permanently (%s), %d transiently "
                "(retried next tick)",
                len(ok),
                len(result.permanent),
                sorted(set(result.permanent.values())),
                len(result.transient),
            )
        else:
            logger.debug("visibility heartbeat: extended %d messages by %ds", len(ok), timeout)

    def _mark_lost(self, batch: int, message_id: str, why: str) -> None:
        if batch not in self._tracked:
            return
        self._tracked[batch].pop(message_id, None)
        self._lost[batch].add(message_id)
        self.stats.lost += 1
        logger.debug("batch %d: lost the visibility of a message: %s", batch, why)
