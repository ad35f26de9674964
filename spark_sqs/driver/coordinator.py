"""The coordinator: the driver's side of the per-batch protocol. Runs on: driver.

``spark_sqs.source.SqsStreamReader`` forwards Spark's driver calls here (``initialOffset``,
``latestOffset``, ``partitions``, ``commit``, ``reportLatestOffset``, ``stop``). The coordinator
is created lazily on the first call and never pickled; it owns the journal's lease and drives the
parts that live beside it in this package: the state markers (``state``), queue polling
(``queues``), flow control (``flow_control``), planning (``planning``), the visibility heartbeat
(``heartbeat``) and the batch counters (``metrics``), and the acknowledgement
(``spark_sqs.acknowledgement``: its rule decides what the acknowledger deletes and when). The
protocol it runs, per micro-batch, is described in ``spark_sqs/source.py`` and docs/design.md.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..acknowledgement import rule
from ..acknowledgement.acknowledger import Acknowledger, driver_parallelism
from ..acknowledgement.rule import By
from ..journal import BatchPlan, Journal
from ..journal.lease import Lease
from ..journal.poison import DEAD_LETTER, Narrowing
from ..journal.window import WindowRange, is_fifo
from ..options import SqsOptions
from ..sqs.batching import BatchCaller
from ..sqs.client import SqsClient, check_permissions, make_client, queue_attributes
from . import offsets, poison
from .flow_control import AvailableNow, FlowControl, ReadLimit, batch_size_warning
from .heartbeat import EXTENSION_FLOOR_SECONDS, Heartbeat
from .metrics import BatchReporter
from .planning import (
    MESSAGES_PER_RECEIVER,
    ReceiverPartition,
    new_plan,
    partitions_of,
    receivers_needed,
    with_visible,
)
from .queues import BacklogPoller, resolve_queue_urls, with_queues
from .state import StateMarkers

if TYPE_CHECKING:
    from types import FrameType

    from ..executor.envelopes import PayloadDeleter
    from ..journal import EntryReceipts

logger = logging.getLogger(__name__)


class Coordinator:
    """Everything the driver-side reader keeps between calls."""

    def __init__(
        self,
        options: SqsOptions,
        client: SqsClient,
        queue_url: str,
        journal: Journal,
        lease: Lease | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        run_heartbeat: bool = True,
        parallelism: int | None = None,
        queue_urls: Sequence[str] | None = None,
        default_queue: str | None = None,
        messages_per_receiver: int = MESSAGES_PER_RECEIVER,
    ) -> None:
        # clock, wall_clock, sleep, run_heartbeat (False: the owner calls heartbeat.tick_safely)
        # and parallelism (of batch calls) are seams for the deterministic simulation (sim/);
        # so is messages_per_receiver (planning.receivers_needed), which the simulation and
        # tests lower so that a few messages make batches of several receivers.
        self.messages_per_receiver = messages_per_receiver
        self.options = options
        self._clock = clock
        self._wall = wall_clock
        self.client = client
        self.queue_url = queue_url
        # Several queues (queues.py): every one is polled and planned for; a plan that records
        # no queue per receiver (written before) belongs to the journal's first queue.
        self.queue_urls = list(queue_urls or [queue_url])
        self.default_queue = default_queue or queue_url
        self.journal = journal
        self.lease = lease
        # Names this run in the attempt records of its receivers (journal/poison.py) and in
        # the planned markers: the lease's owner, which is unique per run (and chosen by the
        # simulation, so seeds replay).
        self.run_id = lease.owner[:12] if lease is not None else uuid.uuid4().hex[:12]
        self.markers = StateMarkers(journal, owner=self.run_id)
        self.lock = threading.Lock()
        caller = BatchCaller(
            client,
            queue_url,
            parallelism=driver_parallelism(options.num_partitions)
            if parallelism is None
            else parallelism,
            sleep=sleep,
        )
        self.heartbeat = Heartbeat(
            journal,
            caller,
            visibility_timeout=options.visibility_timeout,
            interval=options.heartbeat_interval,
            clock=clock,
            on_tick=lease.renew if lease is not None else None,
            # With deleteOnCommit=false a committed batch's messages must come back after about
            # visibilityTimeout (the queue's redrive applies to them): extend by no more.
            extend_by=(
                max(options.visibility_timeout, EXTENSION_FLOOR_SECONDS)
                if options.delete_on_commit
                else options.visibility_timeout
            ),
        )
        self.acknowledger = Acknowledger(
            journal,
            caller,
            delete=options.delete_on_commit,
            on_acked=self._on_acked,
            visibility_timeout=options.visibility_timeout,
            dedupe_window=options.dedupe_window,
            heartbeat=self.heartbeat,
            on_deleted=self._payload_deleter() if options.delete_extended_payloads else None,
            clock=clock,
            wall_clock=wall_clock,
            duplicate_window=options.duplicate_window,
            confirm=lease.confirm if lease is not None else None,
        )
        if options.duplicate_window > 0 and not all(is_fifo(q) for q in self.queue_urls):
            # The duplicate window's range (journal/window.py): which batches its readers
            # read, judged on this driver's clock; removals seal their batch first.
            window_range = WindowRange(
                options.duplicate_window,
                clock=clock,
                start_from=journal.window.start_from(self.markers.acked),
            )
            window_range.legacy_until = journal.window.legacy_until(wall_clock())
            journal.window.range = window_range
        pending, plans, retired = self._find_pending(journal)
        self.acknowledger.start(self.markers.acked, pending, plans, retired)
        # Pending batches that a pending plan retired: no new plan's receivers check them.
        self._retired = retired
        # The identity of each pending batch's plan as this driver read or wrote it: a new plan
        # names them, so that its receivers trust no plan created after one was removed.
        self._plan_ids = {b: p.plan_id for b, p in plans.items() if p.plan_id is not None}
        if self.markers.initial is None:
            # Fixed before any batch is numbered: Spark 4.0/4.1 ask for latestOffset first.
            self.markers.advance(initial=self.markers.planned)
        # The journal's identity goes into every offset, and every offset Spark hands back is
        # checked against what this journal numbered before anything acts on it (offsets.py).
        self.identity = journal.meta.identity()
        self.guard = offsets.CheckpointGuard(
            journal.location,
            self.identity,
            known_through=self.markers.planned,
            initial=self.markers.initial,
            read_alias=journal.aliases.read,
        )
        if run_heartbeat:
            self.heartbeat.start()
        self._last_end: int | None = None
        # What initialOffset answered in this run (Spark replays a first batch from it).
        self._initial_given: dict | None = None
        # When each batch of this run was planned (monotonic), until Spark commits it, and how
        # long the last committed one took: the plan asks receivers to extend their messages
        # themselves when batches are slow (_executor_extension). The run's first planned
        # batch carries the query's start-up (Python workers, clients), so its time is not
        # counted (_note_committed).
        self._planned_at: dict[int, float] = {}
        self._first_planned: int | None = None
        self._last_duration = 0.0
        self._extended_seen = 0
        self.flow = FlowControl(options, clock=clock)
        # Message limit of each batch handed to Spark but not planned yet.
        self._limits: dict[int, int] = {}
        self.poller = BacklogPoller(client, self.queue_urls, options.queue_poll_interval, clock)
        self.reporter = BatchReporter(self.heartbeat, self.poller, wall_clock)
        # poisonMessagePolicy=deadLetter: narrows and quarantines replays (poison.py).
        self.quarantine: poison.Quarantine | None = None

    def _find_pending(
        self, journal: Journal
    ) -> tuple[dict[int, tuple[int, ...]], dict[int, BatchPlan], frozenset[int]]:
        """The batches still pending, by key: every number after the newest acknowledged one
        up to the newest planned whose plan (or carry record) exists, with its receivers; their
        plans; and those of them that a pending plan retired. A
        LIST finds the rest only to remove it: files of acknowledged or adopted batches whose
        removal a crash cut short, and entries that attempts of such batches wrote afterwards
        (see executor/journaling.py and parts.py). None of them holds a message that must still be
        delivered, so they are removed, never adopted; a listing that misses some only leaves
        them for a later start."""
        pending: dict[int, tuple[int, ...]] = {}
        plans: dict[int, BatchPlan] = {}
        for batch in range(self.markers.acked + 1, self.markers.planned + 1):
            plan = journal.plans.read(batch)
            receivers = (
                tuple(r.receiver for r in plan.receivers)
                if plan is not None
                else journal.batches.live_receivers(batch)
            )
            if receivers is None:
                continue
            pending[batch] = receivers
            if plan is not None:
                plans[batch] = plan
        # A batch that a pending plan retired is delivered by that plan's batch, through the
        # copies its adoption made (or a replay of it makes). What an attempt of it journaled
        # after the retirement is delivered by nobody (a straggler that died before removing
        # it; a driver that lost the journal may even have planned the batch again): it stays
        # pending, for a plan that adopts it again, with no receivers of its own to
        # acknowledge (which would delete those messages), to extend or to drop, and no new
        # plan's receivers count what it holds (``_new_plan``).
        retired = frozenset(retired_by(plans) & set(pending))
        for orphan in retired:
            pending[orphan] = ()
        for leftover in [b for b in journal.batches.list() if b not in pending]:
            logger.info("removing leftover journal files of finished batch %d", leftover)
            journal.batches.remove(leftover)
        journal.aliases.collect(self.markers.acked)
        return pending, plans, retired

    @classmethod
    def start(cls, options: SqsOptions) -> Coordinator:
        """Connect and check everything a person might have to fix, at query start."""
        # One connection per concurrent batch call, plus the queue poll and GetQueueUrl.
        pool = driver_parallelism(options.num_partitions) + 4
        client = make_client(
            options.connection,
            wait_time_seconds=options.wait_time_seconds,
            max_pool_connections=max(32, pool),
        )
        queue_urls = resolve_queue_urls(client, options.connection)
        queue_url = queue_urls[0]
        for url in queue_urls:
            # Proves the queue exists and the credentials may read it before any batch runs.
            queue_attributes(client, url, ["QueueArn"])
            check_permissions(client, url, delete=options.delete_on_commit)
        journal = Journal(options.journal_location, options)
        journal.meta.probe_writable()
        default_queue = journal.meta.check_owner(*queue_urls)
        lease = Lease(
            journal.store,
            options.journal_location,
            owner=uuid.uuid4().hex,
            interval=options.heartbeat_interval,
        )
        lease.acquire()
        _release_on_sigterm(lease)
        state = cls(
            options,
            client,
            queue_url,
            journal,
            lease,
            queue_urls=queue_urls,
            default_queue=default_queue,
        )
        state.start_poison_policy()
        warning = batch_size_warning(options)
        if warning:
            logger.warning("%s", warning)
        logger.info(
            "SQS source started on %s: journal %s, planned batch %d, acknowledged batch %d, "
            "%d batches awaiting acknowledgement",
            ", ".join(queue_urls),
            options.journal_location,
            state.markers.planned,
            state.markers.acked,
            len(state.acknowledger.pending),
        )
        return state

    def _payload_deleter(self) -> PayloadDeleter:
        """deleteExtendedPayloads: S3 payloads go once their messages are deleted, never
        before, and never those of messages whose deletion may not have taken effect."""
        from ..executor.envelopes import delete_payloads, s3_client

        s3 = s3_client(self.options)

        def delete(receipts: Sequence[EntryReceipts], uncertain: set[str]) -> None:
            delete_payloads(receipts, s3, exclude=uncertain)

        return delete

    def close(self) -> None:
        self.heartbeat.stop()
        if self.lease is not None:
            self.lease.release()

    # -- offsets --------------------------------------------------------------------------------

    def fresh_start(self) -> int:
        """The initial batch: only asked for a new checkpoint, or when Spark restarts a query
        whose first batch never committed (and then replays it from this offset)."""
        with self.lock:
            assert self.markers.initial is not None
            return self.markers.initial

    def initial_offset(self) -> dict:
        """``initialOffset``: the initial batch, with the journal's identity."""
        offset = self.offset(self.fresh_start())
        self._initial_given = offset
        return offset

    def offset(self, batch: int) -> dict:
        return offsets.make(batch, self.identity)

    def latest_offset(
        self, start: Mapping[str, Any] | None, limit: ReadLimit | None = None
    ) -> dict:
        with self.lock:
            planned = self.markers.planned
            # Spark calls latestOffset only once every batch up to `start` is in its commit
            # log. Spark 4.0/4.1 pass no start: then the last batch planned in this run is it,
            # and before the first one nothing is known to be committed. A start this journal
            # cannot go on from is refused before anything is acknowledged (offsets.py).
            committed = (
                self.guard.check_start(start, self.markers.acked, planned_only=False)
                if start is not None
                else self._last_end
            )
            if committed is not None:
                self._note_committed(committed)
                # Settle what the receivers of committed batches acknowledged; the rest waits
                # to see whether a next batch's receivers will delete it.
                self._acknowledge(committed, by=By.RECEIVERS)
            if self.heartbeat.fatal is not None:
                # Raised only now: the heartbeat's thread cannot raise into Spark, and what
                # Spark committed is acknowledged first (no next batch will do it).
                if committed is not None:
                    self._acknowledge(
                        committed,
                        by=rule.once_planned(
                            next_batch=False, available_now=False, heartbeat_failed=True
                        ),
                    )
                raise self.heartbeat.fatal
            # Journaled batches beyond what Spark has committed, outside any replay (the
            # journal outlived its checkpoint, or this is the first call of a 4.0 run): a batch
            # is needed to deliver or settle them, queue empty or not.
            unsettled = [b for b in self.acknowledger.pending if committed is None or b > committed]
            batch_limit = self.flow.batch_limit(limit, self.acknowledger.pending_messages())
            acknowledge_only = False
            if batch_limit == 0 and committed is not None and self.acknowledger.pending:
                # The committed batches alone fill maxInFlightMessages (rule.py).
                by = rule.when_in_flight_is_full(
                    available_now=self.flow.available_now is not None,
                    unassigned=bool(self.acknowledger.unassigned(committed)),
                    queue_has_messages=self.poller.has_messages,
                )
                acknowledge_only = by is By.RECEIVERS
                if not acknowledge_only:
                    self._acknowledge(committed, by=by)
                    batch_limit = self.flow.batch_limit(limit, self.acknowledger.pending_messages())
            remaining = self.flow.remaining_available_now(self.acknowledger.totals.messages)
            if remaining is not None:
                batch_limit = min(batch_limit, remaining)
            start_batch = (
                bool(unsettled)
                or acknowledge_only
                or (
                    batch_limit > 0
                    and self.poller.has_messages()
                    and not self.flow.wait_for_more(self.poller.visible)
                )
            )
            by = rule.once_planned(
                next_batch=start_batch, available_now=self.flow.available_now is not None
            )
            if by is By.DRIVER and committed is not None:
                # No next batch (an idle queue), or Trigger.AvailableNow: the driver deletes
                # the rest itself.
                self._acknowledge(committed, by=by)
            if not start_batch:
                self.acknowledger.sweep_when_idle()
                if start is not None:
                    # Spark compares offsets as strings: an offset of an earlier version (no
                    # journal identity) must come back as it was, or Spark sees new data.
                    return dict(start)
                idle = committed if committed is not None else planned
                self.guard.handed_out.add(idle)
                self.guard.idle.add(idle)
                return self.offset(idle)
            new_batch = planned + 1
            if acknowledge_only:
                logger.info(
                    "batch %d acknowledges batches %s only: they fill maxInFlightMessages=%d",
                    new_batch,
                    self.acknowledger.unassigned(committed or 0),
                    self.options.max_in_flight_messages,
                )
            if self.lease is not None:
                # A number handed out starts a batch: only the journal's owner may.
                self.lease.confirm()
            self.markers.advance(planned=new_batch)
            self.guard.handed_out.add(new_batch)
            self._limits[new_batch] = batch_limit
            self.flow.started_batch()
            return self.offset(new_batch)

    def prepare_available_now(self) -> None:
        """Trigger.AvailableNow: deliver the messages visible now, then report no more data."""
        with self.lock:
            self.poller.poll_next_time()
            self.poller.has_messages()
            visible = self.poller.visible
            self.flow.available_now = AvailableNow(
                target=visible, delivered_at_start=self.acknowledger.totals.messages
            )
            logger.info("Trigger.AvailableNow: delivering the %d visible messages", visible)

    def report(self) -> dict:
        """reportLatestOffset: the newest batch, the queue's backlog and the newest settled
        batch's counters, for query progress."""
        with self.lock:
            report: dict[str, Any] = {
                "batch": self.markers.planned,
                "visibleMessages": self.poller.total.get("ApproximateNumberOfMessages", 0),
                "inFlightMessages": self.poller.total.get(
                    "ApproximateNumberOfMessagesNotVisible", 0
                ),
                "delayedMessages": self.poller.total.get("ApproximateNumberOfMessagesDelayed", 0),
            }
            if len(self.queue_urls) > 1:
                report["queues"] = self._queue_report()
            if self.reporter.latest is not None:
                report["lastBatch"] = self.reporter.latest
            return report

    def _queue_report(self) -> dict[str, dict[str, int]]:
        """Several queues: each queue's backlog (the totals above are their sums)."""
        return {
            url: {
                "visibleMessages": counts.get("ApproximateNumberOfMessages", 0),
                "inFlightMessages": counts.get("ApproximateNumberOfMessagesNotVisible", 0),
                "delayedMessages": counts.get("ApproximateNumberOfMessagesDelayed", 0),
            }
            for url, counts in self.poller.per_queue.items()
        }

    def plan(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> list[ReceiverPartition]:
        with self.lock:
            # Both ends are checked before anything is planned or received: a checkpoint
            # written with another journal is refused here (Spark 4.0/4.1 call no latestOffset
            # with a start; every version replays a logged batch with partitions alone).
            acked = self.markers.acked
            first = self.guard.check_start(start, acked, planned_only=True)
            # Only a start of this journal's own, from the checkpoint: when Spark replays a
            # first batch from initialOffset, a foreign end is the checkpoint's own journal's.
            if self.guard.absorbs(first, end) and dict(start) != self._initial_given:
                return self._absorb(first, end)
            batch = offsets.batch_of(end)
            if batch <= first:
                return []
            batch = self.guard.check_end(end, acked)
            self.guard.planned.add(batch)
            self._last_end = batch
            if batch <= acked:
                # Spark 4.0/4.1 took an idle answer for a batch (a new checkpoint): every
                # batch up to it is acknowledged, so it delivers nothing.
                return []
            if self.lease is not None:
                # A plan assigns deletes and adopts orphans, a replay runs receivers: only the
                # journal's owner may.
                self.lease.confirm()
            stored = self.journal.plans.read(batch)
            replay = stored is not None
            if stored is None:
                # `spark-sqs release` replaced the plan (poison.py); else plan it now.
                stored = poison.released_plan(self.journal, batch) or self.journal.plans.write(
                    self._new_plan(batch, first)
                )
                if self.lease is not None:
                    # Before the plan's receivers are handed out and its adoptions copy and
                    # remove anything: a pause before the create may have let another query take
                    # the journal over, which must not find this plan's receivers at work.
                    self.lease.confirm()
            self._adopt(stored)
            if stored.plan_id is not None:
                self._plan_ids[batch] = stored.plan_id
            for done in [b for b in self._plan_ids if b <= self.markers.acked]:
                del self._plan_ids[done]
            if not replay:
                self._planned_at.setdefault(batch, self._clock())
                if self._first_planned is None:
                    self._first_planned = batch
            if replay and self.quarantine is not None:
                # A batch that keeps failing is narrowed, its last message quarantined.
                self.quarantine.prepare_replay(
                    batch,
                    [r.receiver for r in stored.receivers],
                    receiving=[r.receiver for r in stored.receivers if r.limit > 0],
                )
            self.acknowledger.track(
                batch,
                limit=sum(r.limit for r in stored.receivers),
                deletes_on_journal=stored.deletes_on_journal(self.options.delete_after_journal),
                receivers=tuple(r.receiver for r in stored.receivers),
                # Only a plan made in this run: its planning time bounds the receivers' reach.
                extend_by=0 if replay else stored.extend_by,
            )
            if any(r.adopt_from is not None for r in stored.receivers):
                self.acknowledger.inherit(batch)
            self.acknowledger.assign(stored)
            # The queue is asked again after every batch, rather than after queuePollInterval.
            self.poller.poll_next_time()
            self.reporter.replayed[batch] = len(stored.receivers) if replay else 0
            logger.info(
                "batch %d: %d receivers (%s plan), %d ids to drop, acknowledging %d entries of "
                "batches %s",
                batch,
                len(stored.receivers),
                "stored" if replay else "new",
                stored.drop_count,
                len(stored.acks),
                stored.acknowledges,
            )
            replay_drops = None
            if replay:
                # The stored drop set was made by a driver whose heartbeat kept the pending
                # batches invisible; if it died, their messages may be visible again now.
                replay_drops = self.journal.drops.write(
                    self.acknowledger.drop_ids(batch, receive_window=self._receive_window()),
                    batch,
                )
            if self.lease is not None:
                # Again before the receivers run: a pause between the confirmation above and
                # here (the plan's writes) may have let another query take the journal over.
                self.lease.confirm()
            return [
                replace(p, run=self.run_id)
                for p in partitions_of(
                    stored,
                    self.default_queue,
                    self.options,
                    replay=replay,
                    replay_drops=replay_drops,
                )
            ]

    def _absorb(self, first: int, end: Mapping[str, Any]) -> list[ReceiverPartition]:
        """A batch Spark 4.0/4.1 logged from a refused run on another journal (offsets.py,
        ``CheckpointGuard.absorbs``): it holds nothing, and its end stands for ``first`` from
        now on, also after a restart (an alias recorded by key)."""
        foreign = self.guard.foreign(end)
        assert foreign is not None
        self.journal.aliases.write(foreign, offsets.batch_of(end), first)
        self.guard.planned.add(first)
        self._last_end = first
        logger.warning(
            "batch %s of journal %s (logged while the query ran on another journalLocation and "
            "was refused) delivers nothing; it stands for batch %d of this journal",
            offsets.batch_of(end),
            foreign,
            first,
        )
        return []

    def _new_plan(self, batch: int, first: int) -> BatchPlan:
        """The plan of a batch planned for the first time, from the current options."""
        # Pending batches Spark's offset log does not know (it replays every logged,
        # uncommitted batch before it plans a new one): their journaled messages never reached
        # this query's sink, so this batch delivers them.
        orphans = [b for b in self.acknowledger.pending if b > first and b != batch]
        # A narrowed orphan's carry batch goes with it, even one whose carry record or entries
        # do not exist yet (the run that narrowed it died first): the adoption finishes the
        # step (``_adopt``), and a carry batch it created outside this plan would be adopted by
        # nobody, its number below this batch's, and acknowledged with this batch undelivered.
        carries = {} if self.quarantine is None else self.quarantine.unadopted_carries(orphans)
        orphans += sorted(set(carries) - set(orphans))
        for orphan in orphans:
            # Before their entries are listed: a task of a dead driver still running one of
            # them must stop before it deletes messages this plan would not deliver.
            self.journal.batches.retire(orphan)
        adopted = self._adoptable(orphans, carries)
        limit = self._limits.pop(batch, None)
        if limit is None:
            # Spark logged this batch's end in a run that died before planning it: the limit
            # that run's latestOffset chose is gone. maxInFlightMessages still bounds it.
            limit = self.flow.batch_limit(None, self.acknowledger.pending_messages())
        self.acknowledger.track(batch)
        # The receivers of this batch receive for up to receive_budget_seconds (plus a last
        # long poll): any pending message whose handle may expire by then is dropped.
        drop_ids = self.acknowledger.drop_ids(batch, receive_window=self._receive_window())
        if carries or poison.carry_batches(self.journal, orphans):
            # Messages carried out of a narrowed batch are delivered alone, so that the batch
            # that adopts them narrows them further without mixing in new ones (poison.py).
            limit = 0
        # What the queues held as last polled (in latestOffset): it decides how many receivers
        # this batch needs, and bounds what each of them takes (with_visible).
        visible = self.poller.polled_visible()
        plan = new_plan(
            batch,
            limit,
            self.options.num_partitions,
            adopted=adopted,
            drops=self.journal.drops.write(drop_ids, batch),
            drop_count=len(drop_ids),
            delete_after_journal=self.options.delete_after_journal,
            acknowledging=bool(self.acknowledger.unassigned(first)),
            max_bytes_per_receiver=self.options.max_bytes_per_receiver,
            max_bytes_per_trigger=self.options.max_bytes_per_trigger,
            receiving=receivers_needed(
                visible, self.queue_urls, self.options.num_partitions, self.messages_per_receiver
            ),
        )
        plan = replace(plan, extend_by=self._executor_extension())
        plan = with_queues(plan, self.poller.visible_by_queue(), rotate=batch)
        # The receivers that will receive (not deliver adopted entries) delete the committed
        # batches' messages first: acknowledgement runs on the executors, spread over them.
        fresh = [r.receiver for r in plan.receivers if r.adopt_from is None]
        pending = tuple(b for b in self.acknowledger.pending if b <= batch)
        # What its receivers check for messages held elsewhere (a retired batch: _find_pending).
        checked = tuple(b for b in pending if b not in self._retired)
        window_range = self.journal.window.range
        return replace(
            with_visible(plan, visible, self.default_queue),
            acks=self.acknowledger.assignments(first, fresh),
            pending=checked,
            retires=tuple(sorted(orphans)),
            window_from=(
                window_range.window_from(min((*pending, batch)))
                if window_range is not None
                else None
            ),
            window_legacy_until=window_range.legacy_until if window_range is not None else None,
            plan_id=uuid.uuid4().hex,
            pending_plans=tuple(
                (b, self._plan_ids[b]) for b in checked if b != batch and b in self._plan_ids
            ),
        )

    def _note_committed(self, committed: int) -> None:
        done = [b for b in self._planned_at if b <= committed]
        if not done:
            return
        now = self._clock()
        took = {b: now - self._planned_at.pop(b) for b in done}
        # The run's first batch waited for the query to start (Python workers forked, modules
        # imported, clients made: tens of seconds on a busy machine), not for its pipeline: it
        # would flag the next batch slow and cost that batch one ChangeMessageVisibilityBatch
        # per 10 messages. The heartbeat extends whatever turns out to need it either way, and
        # flags the next plan when it has to (_executor_extension).
        steady = [t for b, t in took.items() if b != self._first_planned]
        if steady:
            self._last_duration = max(steady)

    def _executor_extension(self) -> int:
        """Seconds the receivers of a new batch extend their own messages by once journaled
        (executor/extension.py), or 0. Only when batches are slow: the last one took more than
        a third of the visibility timeout (the run's first batch, which includes the query's
        start-up, does not count), or the heartbeat had to extend messages since the previous
        plan. A fast pipeline pays no extra SQS call; a slow one stops costing the
        driver work per message. Not with deleteOnCommit=false (messages must come back after
        about the timeout) nor deleteAfterJournal (messages are deleted right away)."""
        extended = self.heartbeat.stats.extended
        needed = extended > self._extended_seen
        self._extended_seen = extended
        if not self.options.delete_on_commit or self.options.delete_after_journal:
            return 0
        if needed or self._last_duration > self.options.visibility_timeout / 3:
            return self.heartbeat.extend_by
        return 0

    def _receive_window(self) -> float:
        """How long a batch's receivers receive: a pending message whose handle may expire
        by then must be dropped by them."""
        return self.options.receive_budget_seconds + self.options.wait_time_seconds

    def _adoptable(
        self, orphans: list[int], carries: Mapping[int, tuple[int, ...]] | None = None
    ) -> list[tuple[int, int]]:
        """One location per journaled entry among the orphans, read by key from the receivers
        each orphan's plan (or carry record) names. An orphan whose own plan adopted entries
        of an earlier orphan (a run that died while adopting) holds copies of them: each origin
        is delivered once, from the original when it still exists. The receivers ``carries``
        names for a carry batch are adopted whether or not their entries exist yet: the
        adoption creates them first, from the narrowed batch."""
        carries = carries or {}
        origin_of: dict[tuple[int, int], tuple[int, int]] = {}
        chosen: dict[tuple[int, int], tuple[int, int]] = {}
        for orphan in sorted(orphans):
            plan = self.journal.plans.read(orphan)
            receivers = self.acknowledger.receivers_of(orphan) or (
                self.journal.batches.live_receivers(orphan) or ()
            )
            expected = carries.get(orphan, ())
            for receiver in sorted(set(receivers) | set(expected)):
                if receiver not in expected and not self.journal.entries.has_journaled(
                    orphan, receiver
                ):
                    continue
                here = (orphan, receiver)
                planned = plan.receiver(receiver) if plan is not None else None
                source = planned.adopt_from if planned is not None else None
                origin = origin_of.get(source, source) if source is not None else here
                origin_of[here] = origin
                if origin not in chosen or here == origin:
                    chosen[origin] = here
        return sorted(chosen.values())

    def _copies(
        self, orphans: list[int], narrowed: Mapping[int, Narrowing]
    ) -> dict[tuple[int, int], list[tuple[int, int, Collection[str] | None]]]:
        """Where the orphans' own plans copied each entry they adopted (``(batch, receiver,
        keep)``, oldest first, keyed by the entry they copied and by its origin): when a
        deposed driver finishing its adoption removed the entry this plan chose (_adoptable
        prefers the original), the copy it made first still holds its messages."""
        copies: dict[tuple[int, int], list[tuple[int, int, Collection[str] | None]]] = {}
        origin_of: dict[tuple[int, int], tuple[int, int]] = {}
        for orphan in orphans:
            orphan_plan = self.journal.plans.read(orphan)
            if orphan_plan is None:
                continue
            step = narrowed.get(orphan)
            for receiver in orphan_plan.receivers:
                if receiver.adopt_from is None:
                    continue
                here = (orphan, receiver.receiver)
                source = receiver.adopt_from
                origin = origin_of.get(source, source)
                origin_of[here] = origin
                keep = step.keep.get(receiver.receiver) if step is not None else None
                for key in {source, origin}:
                    copies.setdefault(key, []).append((orphan, receiver.receiver, keep))
        return copies

    def _adopt(self, plan: BatchPlan) -> None:
        """Copy the orphaned entries the plan delivers, then remove the orphans. Idempotent:
        the plan fixes the receiver numbers, copies are create-if-absent, and an orphan is
        removed only once every copy exists, so a crash anywhere is finished by the next call."""
        adopted_from = {r.adopt_from[0] for r in plan.receivers if r.adopt_from is not None}
        # Retired orphans with nothing to adopt are done too: what a task of a dead driver
        # writes into one afterwards is delivered by nobody (its messages come back).
        orphans = sorted(adopted_from | set(plan.retires))
        if not orphans:
            return
        copied = 0
        # An orphan narrowed by poisonMessagePolicy=deadLetter delivers only what its latest
        # step keeps: the rest is in its carry batch (adopted as well) or quarantined.
        narrowed = {o: n for o in orphans if (n := self.journal.poison.latest_narrowing(o))}
        for orphan, narrowing in narrowed.items():
            if self.quarantine is None:
                raise poison.narrowed_without_policy(self.options, orphan)
            self.quarantine.complete(orphan, narrowing)
        copies: dict[tuple[int, int], list[tuple[int, int, Collection[str] | None]]] = {}

        def copies_of(entry: tuple[int, int]) -> list[tuple[int, int, Collection[str] | None]]:
            # Read only for an entry that vanished: the orphans' plans, once.
            if not copies:
                copies.update(self._copies(orphans, narrowed))
            return copies.get(entry, [])

        for receiver in plan.receivers:
            if receiver.adopt_from is not None:
                orphan, source = receiver.adopt_from
                step = narrowed.get(orphan)
                keep = step.keep.get(source) if step is not None else None
                copied += self.journal.entries.adopt(
                    orphan,
                    source,
                    plan.batch,
                    receiver.receiver,
                    keep=keep,
                    copies=lambda entry=(orphan, source): copies_of(entry),
                )
        if self.quarantine is not None:
            # Before the orphans go: a batch adopting carried messages becomes suspect, and
            # the batches they were carried out of record that they were adopted.
            self.quarantine.inherit(plan.batch, orphans)
            for orphan in orphans:
                self.quarantine.adopted(orphan)
        for orphan in orphans:
            self.journal.batches.remove(orphan)
            self.acknowledger.forget(orphan)
        logger.warning(
            "batch %d: delivers %d journal entries (%d copied now) of batches %s, which this "
            "checkpoint never committed",
            plan.batch,
            sum(r.adopt_from is not None for r in plan.receivers),
            copied,
            orphans,
        )

    def acknowledge(self, batch: int) -> None:
        """Spark's ``commit(end)``: called only while the next batch is being constructed,
        whose receivers will acknowledge ``batch``; what earlier receivers acknowledged is
        settled now."""
        with self.lock:
            self._acknowledge(batch, by=By.RECEIVERS)

    def commit(self, end: Mapping[str, Any]) -> None:
        """Spark's ``commit(end)``, with the offset as Spark hands it back: Spark commits only
        batches it planned with this journal (``plan`` checked them)."""
        self.acknowledge(self.guard.resolve(end))

    # -- internals ------------------------------------------------------------------------------

    def _acknowledge(self, batch: int, *, by: By) -> None:
        """Acknowledge what is due up to ``batch`` (rule.py), ``by`` deleting what no
        receivers were assigned yet."""
        # Transient failures are retried inside; what escapes (access denied, queue deleted,
        # journal unreadable) needs a person, and stopping beats redelivering everything.
        self.acknowledger.acknowledge_through(batch, by=by)

    def _on_acked(self, watermark: int, counters: dict[str, Any]) -> None:
        """A batch is acknowledged: its counters are logged and completed with the driver's
        own, then the acknowledged marker is written, holding them (journal/metrics.py reads
        them). A batch below the watermark (its marker is not newer) is only logged."""
        metrics = self.reporter.report(counters)
        self.markers.advance(
            acked=watermark, metrics=metrics if metrics["batch"] == watermark else None
        )

    def start_poison_policy(self) -> None:
        """``poisonMessagePolicy=deadLetter``: resolve each queue's dead-letter queue (an error
        at start when one has none) and narrow replays from now on (driver/poison.py)."""
        if self.options.poison_message_policy != DEAD_LETTER:
            # A batch narrowed under deadLetter holds messages carried out or being quarantined:
            # only that policy finishes them (a replay under `fail` would deliver them twice).
            for batch in self.acknowledger.pending:
                if self.journal.poison.latest_narrowing(batch) is not None:
                    raise poison.narrowed_without_policy(self.options, batch)
            return
        dead_letters = {
            url: poison.resolve_dead_letter_queue(self.client, url, self.options)
            for url in self.queue_urls
        }
        self.quarantine = poison.Quarantine(
            self.journal,
            self.client,
            self.queue_url,
            dead_letters,
            self.options,
            reserve_batch=self.markers.reserve_batch,
            track=self.acknowledger.track,
            confirm=self.lease.confirm if self.lease is not None else lambda: None,
            clock=self._clock,
        )


def _release_on_sigterm(lease: Lease) -> None:
    """``query.stop()`` ends this process with SIGTERM and calls no ``stop()``: release the
    journal's lease first, so that a restart takes it over at once instead of waiting for it to
    lapse. Only possible from the main thread, where Spark's runner calls us."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: FrameType | None) -> None:
        try:
            lease.release()
        except Exception:
            logger.warning("could not release the journal lease", exc_info=True)
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:
        pass


def retired_by(plans: Mapping[int, BatchPlan]) -> set[int]:
    """The batches that the pending batches' plans retired (``Coordinator._find_pending``)."""
    return {orphan for plan in plans.values() for orphan in plan.retires}
