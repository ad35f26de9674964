"""A scheduler that plays Spark around the real protocol code. Runs on: the simulator's process.

One *seed* is one history: a queue (standard or FIFO) gets messages, and a streaming query is
run, crashed, failed, stopped and restarted (with other ``numPartitions``,
``maxMessagesPerTrigger`` and ``deleteAfterJournal``) over the same journal and queue, the way
Spark 4.0/4.1 or 4.2+ would call the source, until a final run drains everything. The driver
object (``spark_sqs.driver.coordinator.Coordinator``), the receivers
(``spark_sqs.executor.receiver.read_partition``), the acknowledger, heartbeat, lease and journal
are the real code; only SQS, the journal store and the clock are simulated (sim/sqs.py,
sim/store.py, sim/clock.py).

What Spark does, as modelled here (PLATFORM.md has the measurements behind it):

- Offset log and commit log (the checkpoint) survive restarts. A batch is constructed by
  ``latestOffset`` (4.0/4.1: no arguments; 4.2+: ``(start, limit)``), then its offsets are
  logged, then ``commit(end of the previous batch)`` is called, then ``partitions(start, end)``,
  then the tasks run, the sink commits, and the batch enters the commit log. The final batch of a
  run is never committed in that run. ``initialOffset`` is asked twice for a new checkpoint (on
  4.0/4.1 after the first ``latestOffset``) and again when batch 0 is replayed.
- A restart whose last logged batch is not in the commit log replays it: ``partitions(start,
  end)`` without ``latestOffset``.
- Tasks: one per partition, retried up to 4 failures; a speculative second attempt may run at
  once (its steps interleave with the first at every SQS and journal call); the attempt that
  finishes first wins, the other is killed or runs on as a straggler, possibly after its batch
  was acknowledged; tasks of a crashed driver may run on as zombies.
- Sinks: ``skip_before`` (file sink, Delta ``txnVersion``: a batch it has is not run at all),
  ``write_then_skip`` (Iceberg, foreachBatch that checks the id after writing: every task runs,
  the commit is skipped), ``not_idempotent`` (every run of a batch is appended).
- Crashes: the driver (with its heartbeat) between any two steps or around any SQS or journal
  call, before or after its effect; a task likewise. A second query on the same journal is
  started now and then and must be refused with ``JournalInUseError``.

The unkind world (``UNKIND``, ``Config.draw_unkind``; off unless a sweep asks for it): per-process
clocks with skew and drift, tasks stalled past the visibility timeout, fewer task slots than
receivers, owners paused past two heartbeats, stores that ignore create-if-absent or whose
listings lag, second queries that take over and run batches, journals deleted, moved or
swapped under a kept checkpoint, and copies of deleted messages handed out at once while their
deleter is slow to go on (docs/simulation.md, "The unkind world"). Two more dimensions are named
on their own, not part of ``all`` (``OPT_IN``): ``lapses`` and ``replans``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pickle
import random
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sim.clock import ActorClock, SimClock
from sim.quarantines import COMMITTED, NARROW_KEY, POISON, Quarantines
from sim.sched import Actor, Crash, Deadlock, HookedSqs, HookedStore, Scheduler, SimLock
from sim.sqs import DATA_OPERATIONS, DEFAULT_INFLIGHT_LIMIT, FaultRates, SimSqs
from sim.store import SimJournalStore, StoreFaultRates
from spark_sqs.driver import offsets
from spark_sqs.driver.coordinator import Coordinator
from spark_sqs.errors import JournalError, JournalInUseError
from spark_sqs.executor import duplicates
from spark_sqs.executor.receiver import read_partition
from spark_sqs.journal import Journal, JournalState, window
from spark_sqs.journal import drops as journal_drops
from spark_sqs.journal import state as journal_state
from spark_sqs.journal.batches import batch_dir
from spark_sqs.journal.lease import RECORDS_KEPT, Lease, lease_key
from spark_sqs.journal.plans import BatchPlan
from spark_sqs.journal.state import ACKED_MARKERS_KEPT, PLANNED_MARKERS_KEPT
from spark_sqs.options import SqsOptions

try:  # Spark 4.2+ read limits
    from spark_sqs.driver.flow_control import default_read_limit
except ImportError:  # pragma: no cover
    default_read_limit = None  # type: ignore[assignment]

JOURNAL = "s3://sim-bucket/journal"
SINKS = ("skip_before", "write_then_skip", "not_idempotent")
MAX_TASK_FAILURES = 4
VISIBILITY = 30
MAX_STEPS = 60_000
MAX_SIM_SECONDS = 50_000.0
# The dimensions of the unkind world (docs/simulation.md, "The unkind world"), each drawn per
# seed from a random stream of its own when a sweep asks for it (Config.draw_unkind).
UNKIND = (
    "clocks",  # per-process wall clocks with skew, and clock rates with drift
    "stalls",  # a task frozen for longer than visibilityTimeout between two of its steps
    "waves",  # fewer task slots than receivers: tasks start as slots free up
    "pauses",  # the owner (driver and heartbeat) frozen for longer than two heartbeat intervals
    "lying",  # a store that ignores create-if-absent (the start-up probe must refuse it)
    "lag",  # a store whose listings lag writes and deletes
    "query2",  # a second query that takes over (when it may) and runs batches
    "diverge",  # the journal deleted, moved or swapped under a kept checkpoint, then restored
    "races",  # a copy of a deleted message ready at once, while its deleter is slow to go on
)
# Dimensions a sweep names on its own (``--unkind all,lapses``): not part of ``all``, so that
# the seeds found there keep their histories.
OPT_IN = (
    # the driver paused right before a delete call of its own for longer than
    # visibilityTimeout, and a standard queue that answers a delete made with a lapsed handle
    # with success and keeps the message (as when another receive took it meanwhile)
    "lapses",
    # a restarted driver replaying a batch paused at its read of the batch's plan, for long
    # enough that a second query started meanwhile takes the journal over and adopts the batch
    # (with ``query2``, one that runs batches), the earlier plan's running attempts frozen too
    "replans",
)
# Second queries that run batches get checkpoints (sink epochs) of their own, numbered apart.
QUERY2_EPOCHS = 1000


@dataclass
class Config:
    """Everything a seed decides up front (printed at the top of a trace)."""

    seed: int
    fifo: bool
    spark: str  # "4.0" (latestOffset without start) or "4.2"
    sink: str
    messages: int
    runs: int
    driver_crash: float  # probability per driver step
    task_crash: float  # probability per task step
    speculation: float  # probability that a task gets a second attempt at once
    sqs_faults: float
    store_faults: float
    second_query: float  # probability per run
    delete_after_journal: bool  # allowed in some runs of this seed
    # Probability per restart that it comes with a new checkpoint on the same journal.
    new_checkpoint: float = 0.0
    # Restarts may turn deleteAfterJournal on and off (else it stays as the seed's first run).
    change_delete_after_journal: bool = True
    # Several queues in one stream (not drawn: seeds keep their meaning). With 2, messages go to
    # either queue and a restart may name one queue only (a queue removed, then added back).
    queues: int = 1
    # poisonMessagePolicy=deadLetter with maxBatchAttempts=2, and one message that makes the
    # sink fail every batch holding it (not drawn either). It must end in the dead-letter queue
    # once, never in the sink, and every other message in the sink exactly once.
    poison: bool = False
    # Config.poison: runs with the seed's faults added after the drawn ones while the poison
    # message is not quarantined, up to this many (Variant.poison_faults), so that narrowing
    # steps and the quarantine meet crashes, kills and store faults; 0: they mostly happen in
    # the final drain, which has none (the drawn runs end, or fail on the poison message,
    # before its batch was narrowed).
    poison_runs: int = 0
    # Standard queues: the chance that a deleted message is handed out once more, within a
    # minute of its delete (sim/sqs.py ``ghost_probability``); duplicateWindow must drop it.
    ghosts: float = 0.0
    # maxInFlightMessages (None: the default, 60,000, which never binds here), the same in every
    # run of the seed; the in-flight bound is checked whenever it is set (_check_in_flight).
    max_in_flight: int | None = None
    # The simulated queues' own in-flight limit (None: SQS's 120,000), and waitTimeSeconds: 0
    # makes every receive a short poll, which the limit fails with OverLimit (a long poll
    # returns nothing instead).
    sqs_inflight_limit: int | None = None
    wait_time: int = 1
    # duplicateWindow (not drawn): 0 turns the window off, and its store requests with it.
    duplicate_window: float = 600.0
    # The unkind world (UNKIND; none unless a sweep asks: Config.draw_unkind). The dimensions
    # asked for, then what each drew.
    unkind: frozenset[str] = frozenset()
    clock_skew: float = 0.0  # each process's wall clock is off by up to this many seconds
    clock_drift: float = 0.0  # and its clocks run up to this fraction fast or slow
    stall: float = 0.0  # probability per task step of a stall longer than visibilityTimeout
    waves: bool = False  # each run has 1-3 task slots (receivers beyond them wait)
    owner_pause: float = 0.0  # probability per step of the owner of a pause > 2 heartbeats
    lying_store: bool = False  # the store ignores create-if-absent until the probe refuses it
    list_lag: float = 0.0  # listings lag writes and deletes by up to this many seconds
    query2_runs: bool = False  # a second query that takes over runs batches of its own
    diverge: float = 0.0  # probability per restart that the journal diverges from the checkpoint
    # Standard queues: the chance per deleted message (not ghosted otherwise) that a copy is
    # ready for the very next receive (sim/sqs.py ``ghost_at_once``), and the deleter is held
    # for a few seconds after that delete returned, so that other receivers go first.
    races: float = 0.0
    # ``lapses`` (OPT_IN): the chance per delete call of the driver that it is paused first for
    # longer than visibilityTimeout; the queue keeps a message deleted with a lapsed handle
    # (sim/sqs.py ``lapsed_delete_keeps``).
    lapses: float = 0.0
    # ``replans`` (OPT_IN): the chance per replay after a restart that the driver is paused at
    # its read of the batch's plan for 6-10 heartbeat intervals, a second query started
    # meanwhile (_replan_pause).
    replans: float = 0.0
    # Byte limits that bind (not drawn either): each run draws maxBytesPerReceiver and
    # maxBytesPerTrigger of a few messages' bytes from a stream of its own, so receivers stop
    # at their byte limit, and replays must keep the limits their plan recorded.
    max_bytes: bool = False
    # False: every batch plans numPartitions receivers, as before batches were planned by their
    # backlog (seeds found then replay as they were).
    receivers_by_backlog: bool = True
    # The planned markers kept (journal/state.py PLANNED_MARKERS_KEPT, patched in this process
    # while the seed runs; None: the library's 16). A seed numbers 3 to 13 batches, so only a
    # smaller band makes markers go and the duplicate window's forwarding find the newest
    # number by key past absent ones (window.py ``_kept_above``, ``_not_numbered_yet``).
    markers_kept: int | None = None

    @classmethod
    def from_seed(cls, seed: int, fifo: bool | None = None) -> Config:
        rng = random.Random(f"config:{seed}")
        # Always drawn, so that --fifo/--standard change nothing else of the seed.
        picked_fifo = rng.random() < 0.4
        # In-flight limits come from a stream of their own: the seeds that draw none keep the
        # histories they had before these were added.
        flight = random.Random(f"inflight:{seed}")
        max_in_flight = flight.choice([4, 8, 15, 30]) if flight.random() < 0.1 else None
        sqs_limit = flight.choice([5, 10, 20]) if flight.random() < 0.05 else None
        wait_time = flight.choice([0, 1]) if sqs_limit is not None else 1
        return cls(
            seed=seed,
            fifo=picked_fifo if fifo is None else fifo,
            spark=rng.choice(["4.0", "4.2"]),
            sink=rng.choice(SINKS),
            messages=rng.randint(15, 60),
            runs=rng.randint(2, 6),
            driver_crash=rng.choice([0.0, 0.01, 0.03, 0.06]),
            task_crash=rng.choice([0.0, 0.01, 0.04]),
            speculation=rng.choice([0.0, 0.3, 0.7]),
            sqs_faults=rng.choice([0.0, 0.0, 0.02, 0.05]),
            store_faults=rng.choice([0.0, 0.0, 0.01, 0.03]),
            second_query=rng.choice([0.0, 0.2]),
            delete_after_journal=rng.random() < 0.4,
            new_checkpoint=rng.choice([0.0, 0.0, 0.3]),
            # Its own stream: the draws above, and so the seeds recorded before it, are unchanged.
            ghosts=random.Random(f"ghosts:{seed}").choice([0.0, 0.0, 0.1, 0.3]),
            max_in_flight=max_in_flight,
            sqs_inflight_limit=sqs_limit,
            wait_time=wait_time,
        )

    def draw_unkind(self, dimensions: frozenset[str] | set[str]) -> None:
        """Draw the unkind world's ``dimensions`` for this seed, each from a random stream of
        its own: adding one dimension does not change what the others draw, and a seed asked
        for none keeps the history it has without them."""
        unknown = set(dimensions) - set(UNKIND) - set(OPT_IN)
        if unknown:
            raise ValueError(
                f"unknown unkind dimensions {sorted(unknown)}; known: {UNKIND + OPT_IN}"
            )
        self.unkind = frozenset(dimensions)

        def stream(name: str) -> random.Random:
            return random.Random(f"unkind-{name}:{self.seed}")

        if "clocks" in dimensions:
            rng = stream("clocks")
            self.clock_skew = rng.choice([2.0, 20.0, 60.0, 180.0])
            self.clock_drift = rng.choice([0.0, 0.01, 0.03, 0.05])
        if "stalls" in dimensions:
            self.stall = stream("stalls").choice([0.01, 0.03, 0.1])
        if "waves" in dimensions:
            self.waves = True
        if "pauses" in dimensions:
            self.owner_pause = stream("pauses").choice([0.005, 0.01, 0.03])
        if "lying" in dimensions:
            self.lying_store = stream("lying").random() < 0.5
        if "lag" in dimensions:
            self.list_lag = stream("lag").choice([1.0, 5.0, 20.0])
        if "query2" in dimensions:
            self.query2_runs = True
            self.second_query = stream("query2").choice([0.3, 0.6])
        if "diverge" in dimensions:
            self.diverge = stream("diverge").choice([0.3, 0.6])
        if "races" in dimensions:
            self.races = stream("races").choice([0.05, 0.2])
        if "lapses" in dimensions:
            self.lapses = stream("lapses").choice([0.3, 0.6])
        if "replans" in dimensions:
            self.replans = stream("replans").choice([0.5, 1.0])


@dataclass
class RunOptions:
    num_partitions: int
    max_messages: int
    delete_after_journal: bool
    batches: int  # new batches before a graceful stop
    # Several queues: the indexes of the queues this run names (None: all).
    queues: tuple[int, ...] | None = None
    # The dead-letter queue of Config.poison (None: the default poisonMessagePolicy=fail).
    dead_letter: str | None = None
    max_in_flight: int | None = None  # Config.max_in_flight
    wait_time: int = 1  # Config.wait_time
    duplicate_window: float = 600.0  # Config.duplicate_window
    # Config.max_bytes: maxBytesPerReceiver and maxBytesPerTrigger (None: the defaults).
    max_bytes_per_receiver: int | None = None
    max_bytes_per_trigger: int | None = None
    # Visible messages per planned receiver (planning.receivers_needed); None: the library's.
    # Lowered in most runs, so that a few simulated messages still make batches of several
    # receivers (acknowledgement spread over them, adoption of several entries).
    messages_per_receiver: int | None = None

    def parse(self, queue_url: str) -> SqsOptions:
        poison = (
            {
                "poisonMessagePolicy": "deadLetter",
                "deadLetterQueueUrl": self.dead_letter,
                # Killed runs count as attempts too: they narrow batches that did not fail.
                "maxBatchAttempts": "2",
            }
            if self.dead_letter
            else {}
        )
        flight = (
            {"maxInFlightMessages": str(self.max_in_flight)}
            if self.max_in_flight is not None
            else {}
        )
        options = SqsOptions.parse(
            {
                "queueUrl": queue_url,
                "journalLocation": JOURNAL,
                "region": "us-east-1",
                "numPartitions": str(self.num_partitions),
                "maxMessagesPerTrigger": str(self.max_messages),
                "deleteAfterJournal": str(self.delete_after_journal).lower(),
                "visibilityTimeout": str(VISIBILITY),
                "waitTimeSeconds": str(self.wait_time),
                "queuePollInterval": "1",
                "duplicateWindow": str(self.duplicate_window),
                # Every crashed run that read a batch counts as an attempt of it: with the
                # default of 3, poisonMessagePolicy=fail would rightly stop the stream.
                "maxBatchAttempts": "1000",
                **poison,
                **flight,
            },
            env={},
        )
        # Byte limits of a few simulated messages, below what the option accepts (1k).
        if self.max_bytes_per_receiver is not None:
            options = dataclasses.replace(
                options, max_bytes_per_receiver=self.max_bytes_per_receiver
            )
        if self.max_bytes_per_trigger is not None:
            options = dataclasses.replace(options, max_bytes_per_trigger=self.max_bytes_per_trigger)
        return options


@dataclass
class Result:
    config: Config
    violations: list[str]
    findings: list[str]
    trace: list[str]
    steps: int = 0
    sim_seconds: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class Checkpoint:
    """Spark's checkpoint of one query: its offset and commit logs, and the epoch that numbers
    its sink's batches (a new checkpoint starts Spark's batch ids, and the sink's, anew)."""

    epoch: int = 0
    offset_log: dict[int, tuple[str, str]] = field(default_factory=dict)
    commit_log: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class Clocks:
    """The ``clock``, ``wall_clock`` and ``sleep`` seams handed to one simulated process."""

    monotonic: Callable[[], float]
    time: Callable[[], float]
    sleep: Callable[[float], None]
    view: ActorClock | None = None  # None: the true clock (a kind world)


class _TaskSet:
    """The attempts of one batch's tasks, as Spark's TaskSetManager keeps them."""

    def __init__(self, batch_id: int, partitions: list[Any]) -> None:
        self.batch_id = batch_id
        self.partitions = partitions
        self.attempts: dict[int, list[Actor]] = {i: [] for i in range(len(partitions))}
        self.results: dict[int, list[tuple[str, str]]] = {}
        self.failures: dict[int, int] = dict.fromkeys(range(len(partitions)), 0)
        self.winners: dict[int, Actor] = {}
        self.seen: set[int] = set()

    def news(self) -> bool:
        return any(a.done and id(a) not in self.seen for ats in self.attempts.values() for a in ats)


class SparkSim:
    """One seed: the world (queue, store, clock), the Spark checkpoint, the sink, the runs."""

    def __init__(self, config: Config, *, trace: bool = False, verbose_trace: bool = False) -> None:
        self.config = config
        self.rng = random.Random(f"spark:{config.seed}")
        self.clock = SimClock()
        self.lines: list[str] = []
        self._trace_on = trace
        c = config
        # Each seed's executors start fresh: no window read from another seed's journal.
        duplicates.forget_all()
        self.sqs = SimSqs(
            c.seed,
            clock=self.clock,
            ghost_probability=c.ghosts,
            ghost_at_once=c.races,
            lapsed_delete_keeps=bool(c.lapses),
            inflight_limit=c.sqs_inflight_limit or DEFAULT_INFLIGHT_LIMIT,
            fault_rates=FaultRates(
                throttle=c.sqs_faults / 2,
                server_error=c.sqs_faults / 4,
                lost_response=c.sqs_faults / 4,
                operations=DATA_OPERATIONS - {"SendMessage", "SendMessageBatch"},
            ),
        )
        self.store = SimJournalStore(
            c.seed,
            clock=self.clock,
            fault_rates=StoreFaultRates(before=c.store_faults / 2, after=c.store_faults / 2),
            honest_create=not c.lying_store,
            list_lag=c.list_lag,
        )
        if c.lying_store:
            # The probe's refusal must not be a transient fault's (sim/store.py).
            self.store.fault_free_prefixes = ("_probe/",)
        # Every store a run was pointed at (the journal, and where a diverged run went).
        self.stores: list[SimJournalStore] = [self.store]
        unkind = bool(c.stall or c.owner_pause or c.lapses or c.replans)
        self.sched = Scheduler(
            c.seed,
            self.clock,
            trace=self.log,
            decide=self._decide,
            stall=self._stall if unkind else None,
        )
        # The unkind world's draws during the history, each from a stream of its own.
        self._clock_rng = random.Random(f"unkind-actor-clocks:{c.seed}")
        self._stall_rng = random.Random(f"unkind-stall-draws:{c.seed}")
        # Long stalls (_long_stall) draw from a stream of their own: seeds where none happens
        # keep their histories.
        self._long_stall_rng = random.Random(f"unkind-long-stall-draws:{c.seed}")
        self._long_stalled: set[Actor] = set()
        self._long_stall_until = 0.0  # when the last long stall ends (the drain waits for it)
        self._stragglers: set[Actor] = set()
        self._waves_rng = random.Random(f"unkind-slots:{c.seed}")
        self._query2_rng = random.Random(f"unkind-query2-runs:{c.seed}")
        # Its own stream: the other draws of a seed stay what they were.
        self._receivers_rng = random.Random(f"receivers-per-message:{c.seed}")
        self._diverge_rng = random.Random(f"unkind-diverge-draws:{c.seed}")
        self._race_rng = random.Random(f"unkind-race-holds:{c.seed}")
        self._lapse_rng = random.Random(f"unkind-lapse-pauses:{c.seed}")
        # Drivers whose pending delete call had its lapse drawn (one draw per call).
        self._lapse_drawn: set[Actor] = set()
        self._replan_rng = random.Random(f"unkind-replan-pauses:{c.seed}")
        # Runs replaying a batch whose replan pause is not drawn yet (``replans`` only).
        self._replaying: set[str] = set()
        self._ghosts_at_once_seen = 0
        name = "orders.fifo" if c.fifo else "orders"
        attrs = {"FifoQueue": "true", "ContentBasedDeduplication": "true"} if c.fifo else {}
        self.url = self.sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]
        self.urls = [self.url]
        for i in range(1, c.queues):
            extra = f"orders{i}.fifo" if c.fifo else f"orders{i}"
            self.urls.append(self.sqs.create_queue(QueueName=extra, Attributes=attrs)["QueueUrl"])
        self._queue_rng = random.Random(f"queues:{c.seed}")
        self._bytes_rng = random.Random(f"bytes:{c.seed}")
        self.dead_letter: str | None = None
        self.poison_id: str | None = None
        self._poison_n = -1
        if c.poison:
            dlq = "orders-dlq.fifo" if c.fifo else "orders-dlq"
            self.dead_letter = self.sqs.create_queue(QueueName=dlq, Attributes=attrs)["QueueUrl"]
            self._poison_n = random.Random(f"poison:{c.seed}").randrange(c.messages)
        # botocore's retries of throttling and 5xx, with backoff on the simulated clock.
        self.client = HookedSqs(
            self.sqs.client(total_max_attempts=3, sleep=self.clock.sleep),
            self.sched,
            self._after_sqs,
        )
        self.hstore = self._hooked(self.store)
        # The store each run (and its tasks) was pointed at: the journal, or elsewhere.
        self.run_stores: dict[str, HookedStore] = {}
        # Spark's checkpoint (a second query that runs batches has one of its own).
        self.ckpt = Checkpoint()
        self._epochs = 0  # new checkpoints of the main query (second queries: QUERY2_EPOCHS + n)
        # The sink.
        self.sink_committed: dict[int, list[tuple[str, str]]] = {}
        self.sink_appended: list[tuple[int, list[tuple[str, str]]]] = []
        self.executions: dict[int, list[tuple[str, ...]]] = {}
        self.committed_ids: set[str] = set()
        self.sent: list[str] = []
        self.violations: list[str] = []
        self.findings: list[str] = []
        self.crashes = {"driver": 0, "task": 0}
        self.run_no = 0
        self.draining = False
        self.current_run: str | None = None
        self.last_failure: str | None = None
        self._poison_run = False  # a run added by Config.poison_runs
        # Config.poison: narrowing steps, the runs that read them and how each ended, and the
        # quarantine decisions; the judge of a message other than the poison one in the
        # dead-letter queue (sim/quarantines.py).
        self.quarantines = Quarantines()
        self._journal_ids: dict[tuple[int, str, int], frozenset[str]] = {}
        # Ids ever journaled in a carry batch (``_carried_ids``).
        self._carried_seen: set[str] = set()
        self._deletions_seen: dict[str, int] = {}
        self.lease_written: dict[str, float] = {}
        self.lease_released: set[str] = set()  # owners whose released record took effect
        self.lease_previous: dict[str, str | None] = {}  # owner -> whose record it followed
        # Entries and attempt records a task created in a batch that was no longer live
        # (acknowledged and removed), by (store, key): the attempt must remove its own (the
        # straggler check) unless it was killed first or a store fault hid the batch's state.
        # The driver removes a batch by key and sweeps leftovers later, so a leftover at the
        # end no longer shows a missing check: this does.
        self._straggler_entries: dict[tuple[int, str], Actor] = {}
        # When (scheduler step) each journal batch was first retired (its ``_retired.json``
        # created) or removed (its plan deleted), and by which query's process, by (store,
        # batch): a replay's receiver whose attempt ended after another query took its batch
        # may deliver nothing (_taken_meanwhile).
        self._batch_gone: dict[tuple[int, int], tuple[int, int]] = {}
        self._group_epoch: dict[str, int] = {}  # the checkpoint (epoch) each run's group runs
        # What each receiver of each sink batch's first run yielded, by (journal batch,
        # receiver); and the scheduler step at which each task attempt returned.
        self._first_by_receiver: dict[int, dict[tuple[int, int], tuple[str, ...]]] = {}
        self._task_ended: dict[Actor, int] = {}
        # The worker windows (executor/duplicates.py) of task attempts with a clock of their
        # own (``clocks``): a Python worker runs on one host, so the tasks that share its
        # window share its clock; an attempt with a clock of its own is a worker of its own.
        self._own_windows: dict[Actor, dict[tuple[str, float], duplicates.DuplicateWindow]] = {}
        # The unkind world: the run whose journal diverged from its checkpoint (and how), the
        # second queries that run batches, and how many of each were made.
        self.diverged: dict[str, str] = {}
        # While a deleted journal is gone (``_diverged_run``): the keys tasks of earlier runs
        # created in its location meanwhile, which its restoration leaves in place, and what
        # it held, which the restoration puts back (journaled all the same).
        self._created_while_deleted: set[str] | None = None
        self._deleted_journal: dict[str, bytes] = {}
        self._query2_epochs = 0
        self._query2_active: set[str] = set()
        self._query2_took_over: Checkpoint | None = None
        self._in_flight_off = False
        self._slots: dict[str, int] = {}  # task slots per run (Config.waves)
        # The in-flight bound (_check_in_flight): which task attempt's receive handed out each
        # message's current receipt, and each attempt's receiver: (journal batch, receiver,
        # plan limit, run).
        self._holder: dict[tuple[str, str], Actor | None] = {}
        self._slot: dict[Actor, tuple[int, int, int, str]] = {}
        self._deliveries_seen: dict[str, int] = {}
        self._drivers: dict[str, Coordinator] = {}
        self._in_flight_broken = False
        self.stats: dict[str, int] = {
            "batches": 0, "replays": 0, "restarts": 0, "stragglers": 0, "speculative": 0,
            "second_queries": 0, "driver_crashes": 0, "task_crashes": 0, "query_failures": 0,
            "lease_lapsed": 0,
        }  # fmt: skip
        self._verbose_trace = verbose_trace

    @property
    def offset_log(self) -> dict[int, tuple[str, str]]:
        return self.ckpt.offset_log

    @property
    def commit_log(self) -> set[int]:
        return self.ckpt.commit_log

    @property
    def epoch(self) -> int:
        return self.ckpt.epoch

    def _hooked(self, store: SimJournalStore) -> HookedStore:
        return HookedStore(
            store, self.sched, lambda method, key: self._after_store(store, method, key)
        )

    def _clocks(self, who: str) -> Clocks:
        """The clocks of a new process (a driver run, a task attempt, a second query): the
        true clock in a kind world; with ``clock_skew``/``clock_drift`` a view of its own, its
        wall clock off by up to the skew and its rate off by up to the drift (sim/clock.py)."""
        c = self.config
        if not (c.clock_skew or c.clock_drift):
            return Clocks(self.clock.monotonic, self.clock.time, self.sched.sleep)
        rng = self._clock_rng
        view = ActorClock(
            self.clock,
            skew=rng.uniform(-c.clock_skew, c.clock_skew),
            rate=1.0 + rng.uniform(-c.clock_drift, c.clock_drift),
            monotonic_origin=rng.uniform(1_000.0, 1_000_000.0),
            true_sleep=self.sched.sleep,
        )
        self.stats["skewed_clocks"] = self.stats.get("skewed_clocks", 0) + 1
        self.log(f"{who:<22} == clock {view.offset():+.1f}s, rate {view.rate:.3f}")
        return Clocks(view.monotonic, view.time, view.sleep, view)

    # -- trace ---------------------------------------------------------------------------------

    def log(self, text: str) -> None:
        if self._trace_on:
            # Probe keys carry a random uuid (also in error messages): not part of a history.
            text = _PROBE_KEY.sub("_probe/*", text)
            self.lines.append(f"t={self.clock.elapsed:9.3f} {text}")

    def event(self, text: str) -> None:
        actor = self.sched.current()
        who = actor.name if actor else "spark"
        self.log(f"{who:<22} == {text}")

    def violation(self, text: str) -> None:
        self.violations.append(text)
        self.event(f"VIOLATION: {text}")

    # -- crash decisions -----------------------------------------------------------------------

    def _decide(self, actor: Actor) -> str | None:
        if self.draining or actor.status != "paused":
            return None
        c = self.config
        if actor.kind in ("driver", "heartbeat") and actor.group == self.current_run:
            # The added poison runs (Config.poison_runs) crash less: at the drawn rate per step,
            # most would die before replaying the poison batch, let alone narrowing it.
            rate = c.driver_crash / 4 if self._poison_run else c.driver_crash
            if self.rng.random() < rate:
                self.stats["driver_crashes"] += 1
                self._kill_run(actor.group, except_actor=actor)
                return self.rng.choice(["before", "after"])
        elif actor.kind == "task" and self.rng.random() < c.task_crash:
            self.stats["task_crashes"] += 1
            return self.rng.choice(["before", "after"])
        return None

    def _stall(self, actor: Actor) -> bool:
        """The unkind world's freezes, drawn for the actor chosen to run (sim/sched.py
        ``stall``): a task stalled for longer than visibilityTimeout (a GC pause, a payload
        fetch or an S3 PUT retried for minutes, a lost network), or the owner's whole driver
        process (the micro-batch loop and the heartbeat) paused for longer than two heartbeat
        intervals (a GC pause, a frozen VM). True if it was held instead of run."""
        if self.draining:
            return False
        c = self.config
        rng = self._stall_rng
        now = self.clock.elapsed
        if actor.kind == "task" and c.stall and self._long_stall(actor):
            return True
        if (
            actor.kind == "task"
            and c.stall
            and not _RESIDUAL_WRITE.match(actor.label)
            and rng.random() < c.stall
        ):
            seconds = VISIBILITY * rng.uniform(1.1, 2.5)
            self.stats["stalls"] = self.stats.get("stalls", 0) + 1
            self.sched.hold(actor, now + seconds)
            return True
        if (
            actor.kind in ("driver", "heartbeat")
            and actor.group == self.current_run
            and c.owner_pause
            and rng.random() < c.owner_pause
        ):
            driver = self._drivers.get(actor.group)
            interval = driver.options.heartbeat_interval if driver is not None else VISIBILITY / 5
            seconds = interval * rng.choice([2.5, 4.0, 8.0])
            self.stats["owner_pauses"] = self.stats.get("owner_pauses", 0) + 1
            self.log(f"{'spark':<22} == PAUSE of the driver of {actor.group} for {seconds:.1f}s")
            for a in self.sched.actors:
                if a.group == actor.group:
                    self.sched.hold(a, now + seconds)
            if (
                c.query2_runs
                and driver is not None
                and not self._query2_active
                # A diverged run's journal is put back after it: a second query there would
                # leave its checkpoint on a journal that is about to vanish (not modelled).
                and actor.group not in self.diverged
                and rng.random() < 0.5
            ):
                # The newcomer that a pause lets in: started while the owner is frozen.
                self._second_query(actor.group, driver.options)
            return True
        if c.lapses and self._lapse(actor):
            return True
        if c.replans and self._replan_pause(actor):
            return True
        return False

    def _replan_pause(self, actor: Actor) -> bool:
        """``replans``: the owner's driver replaying a batch after a restart, about to read the
        batch's plan, is paused there with its heartbeat for 6-10 heartbeat intervals (longer
        than a newcomer watches the lease), and a second query is started meanwhile: it may
        take the journal over, adopt the batch and remove it, and the driver, waking up, find
        the plan gone and plan the batch again. Attempts of the batch's earlier plan still
        running (tasks of the dead run) freeze as long, and a few seconds more: they journal
        after the new plan exists. Drawn once per replay, from a stream of its own."""
        if (
            actor.kind != "driver"
            or actor.group not in self._replaying
            or actor.group != self.current_run
            or not _PLAN_READ.match(actor.label)
        ):
            return False
        self._replaying.discard(actor.group)
        rng = self._replan_rng
        if rng.random() >= self.config.replans:
            return False
        driver = self._drivers.get(actor.group)
        interval = driver.options.heartbeat_interval if driver is not None else VISIBILITY / 5
        seconds = interval * rng.uniform(6.0, 10.0)
        now = self.clock.elapsed
        self.stats["replan_pauses"] = self.stats.get("replan_pauses", 0) + 1
        self.log(f"{'spark':<22} == REPLAN PAUSE of the driver of {actor.group} for {seconds:.1f}s")
        for a in self.sched.actors:
            if a.group == actor.group:
                self.sched.hold(a, now + seconds)
        batch = int(_PLAN_READ.match(actor.label).group(1))  # type: ignore[union-attr]
        for a in self.sched.actors:
            slot = self._slot.get(a)
            if a.kind == "task" and not a.done and slot is not None and slot[0] == batch:
                if slot[3] != actor.group:
                    self.sched.hold(a, now + seconds + rng.uniform(1.0, 10.0))
        if driver is not None and not self._query2_active and actor.group not in self.diverged:
            self._second_query(actor.group, driver.options)
        return True

    def _lapse(self, actor: Actor) -> bool:
        """``lapses``: the owner's driver about to make a delete call of its own (the batches
        it deletes itself, no next batch's receivers doing it) is paused first, with its
        heartbeat, for longer than visibilityTimeout (a GC pause, a frozen VM, a delete phase
        slowed by its window segment, its seal and retried calls): the handles it deletes with
        lapse on the way, and the queue keeps what it deletes with them (sim/sqs.py
        ``lapsed_delete_keeps``). Drawn once per call, from a stream of its own."""
        if (
            actor.kind != "driver"
            or actor.group != self.current_run
            or not actor.label.startswith("sqs.delete_message")
            or actor in self._lapse_drawn
        ):
            return False
        self._lapse_drawn.add(actor)
        rng = self._lapse_rng
        if rng.random() >= self.config.lapses:
            return False
        seconds = VISIBILITY * rng.uniform(1.1, 2.0)
        self.stats["lapse_pauses"] = self.stats.get("lapse_pauses", 0) + 1
        self.log(f"{'spark':<22} == LAPSE: the driver of {actor.group} paused {seconds:.1f}s")
        for a in self.sched.actors:
            if a.group == actor.group:
                self.sched.hold(a, self.clock.elapsed + seconds)
        return True

    def _long_stall(self, actor: Actor) -> bool:
        """``stalls``: an attempt that outlived its batch (a straggler, or a task of a dead
        run) about to create a window segment, after it checked its batch was live, freezes
        for longer than duplicateWindow and its margin (docs/design.md, the crash table: a
        writer stalled past the window). Meanwhile its batch may be sealed, removed and swept,
        and later batches numbered: the segment must still reach a batch readers read (found
        by key, whatever a lagging listing shows). Once per attempt, half of the times."""
        if actor in self._long_stalled or not _WINDOW_SEGMENT.match(actor.label):
            return False
        slot = self._slot.get(actor)
        if actor not in self._stragglers and (slot is None or slot[3] == self.current_run):
            return False
        self._long_stalled.add(actor)
        rng = self._long_stall_rng
        if rng.random() >= 0.5:
            return False
        seconds = self.config.duplicate_window + window.EXPIRY_MARGIN + rng.uniform(30.0, 600.0)
        self.stats["long_stalls"] = self.stats.get("long_stalls", 0) + 1
        self.log(f"{actor.name:<22} == LONG STALL before its window segment: {seconds:.0f}s")
        until = self.clock.elapsed + seconds
        self._long_stall_until = max(self._long_stall_until, until)
        self.sched.hold(actor, until)
        return True

    def _race(self) -> None:
        """``races``: the delete that just returned left a copy ready for the next receive;
        its caller is slow to take its next step (a thread descheduled, a slow network), so
        that receivers beside it receive and look the copy up first. Held for less than a
        visibility timeout: a slow step, not a stall."""
        if self.draining:
            return
        actor = self.sched.current() or next(
            (a for a in self.sched.actors if a.status == "running"), None
        )
        if actor is None:
            return
        seconds = self._race_rng.uniform(0.5, 5.0)
        self.stats["race_holds"] = self.stats.get("race_holds", 0) + 1
        self.log(f"{actor.name:<22} == RACE: a copy is out; held for {seconds:.1f}s")
        self.sched.hold(actor, self.clock.elapsed + seconds)

    def _kill_run(self, group: str, except_actor: Actor | None = None) -> None:
        """The driver process dies: its heartbeat with it; its running tasks die or go on."""
        self.log(f"{'spark':<22} == CRASH of the driver of {group}")
        for actor in list(self.sched.actors):
            if actor is except_actor or actor.done:
                continue
            if actor.group == group:
                self.sched.kill(actor)
            elif actor.kind == "task" and actor.group == f"{group}/exec":
                if self.rng.random() < 0.5:
                    self.sched.kill(actor)

    # -- invariant hooks (run right after each call, before anything else can run) -------------

    def _after_sqs(self, name: str, kwargs: dict[str, Any], answer: Any) -> None:
        if self.diverged and name in _MESSAGE_CALLS:
            self._check_diverged_untouched(name)
        if len(self.urls) > 1 and name.endswith("_batch") and "Entries" in kwargs:
            self._check_handles_go_home(name, kwargs)
        if name == "receive_message":
            self._after_receive(kwargs["QueueUrl"], answer)
            return
        if name == "send_message" and answer is not None and kwargs["QueueUrl"] == self.dead_letter:
            actor = self.sched.current()
            run = actor.group.split("/")[0] if actor is not None else ""
            self.quarantines.sent(self._source_id(kwargs["MessageBody"]), run)
            return
        if name not in ("delete_message_batch", "delete_message"):
            return
        if self._lapse_drawn:
            self._lapse_drawn.discard(self.sched.current())  # type: ignore[arg-type]
        if self.sqs.ghosts_at_once > self._ghosts_at_once_seen:
            self._ghosts_at_once_seen = self.sqs.ghosts_at_once
            self._race()
        new = []
        for url in self.urls:
            deletions = self.sqs.deletions(url)
            new += deletions[self._deletions_seen.get(url, 0) :]
            self._deletions_seen[url] = len(deletions)
        actor = self.sched.current()
        for d in new:
            if d.message_id in self.committed_ids:
                continue
            if self.dead_letter is not None and d.message_id in self._dead_letter_ids():
                # Deleted after its copy reached the dead-letter queue: the end check judges
                # the copy (_check_quarantined).
                continue
            if actor is not None and actor.kind in ("driver", "heartbeat", "query2"):
                if self.poison_id is not None and d.message_id in self._carried_ids():
                    # Carried out of a narrowed batch: the carry batch's journal holds it, and
                    # the narrowed batch's acknowledgement may delete it (journal/poison.py).
                    # The driver acknowledges itself when committed batches fill
                    # maxInFlightMessages.
                    continue
                self.violation(
                    f"the driver deleted {d.message_id} from SQS before a committed batch held it"
                )
            elif d.message_id not in self._journaled_ids():
                self.violation(
                    f"{actor.name if actor else '?'} deleted {d.message_id} from SQS, neither "
                    "committed nor journaled"
                )

    def _check_diverged_untouched(self, name: str) -> None:
        """A run whose journal diverged from its checkpoint must be refused before it receives,
        acknowledges or deletes anything: no message call by its driver, heartbeat or tasks."""
        actor = self.sched.current()
        if actor is None:
            return
        group = actor.group.removesuffix("/exec")
        kind = self.diverged.get(group)
        if kind is None or self.stats.get(f"{group}_touched"):
            return
        self.stats[f"{group}_touched"] = 1
        self.violation(
            f"{actor.name} called {name} on a journal {kind} under a kept checkpoint (the run "
            "must be refused before it receives, acknowledges or deletes anything)"
        )

    def _check_handles_go_home(self, name: str, kwargs: dict[str, Any]) -> None:
        """Several queues: a receipt handle must be sent back to the queue that issued it."""
        target = kwargs.get("QueueUrl")
        for entry in kwargs["Entries"]:
            handle = entry.get("ReceiptHandle")
            if handle is None:
                continue
            home = [u for u in self.urls if handle in self.sqs._lookup(u).handles]
            if home and target not in home:
                self.violation(f"{name}: a receipt handle of {home[0]} was sent to {target}")
                return

    def _after_receive(self, url: str, answer: Any) -> None:
        queue = self.sqs._lookup(url)
        deliveries = queue.deliveries
        actor = self.sched.current()
        # Only the receipts the caller got: a response lost after the effect (and retried by
        # the client) hid messages whose handles no one holds, until the visibility timeout.
        got = {
            (m["MessageId"], queue.handles[m["ReceiptHandle"]].number)
            for m in (answer or {}).get("Messages", [])
        }
        for d in deliveries[self._deliveries_seen.get(url, 0) :]:
            self._holder[(url, d.message_id)] = actor if (d.message_id, d.receipt) in got else None
        self._deliveries_seen[url] = len(deliveries)
        if self.config.max_in_flight is not None and not self._in_flight_off:
            self._check_in_flight()

    def _check_in_flight(self) -> None:
        """maxInFlightMessages, as the source promises it (docs/simulation.md, "The in-flight
        bound"): the messages in flight for batches not yet acknowledged, counting one attempt
        per receiver (the one holding most) and, of attempts started by earlier runs, only what
        they journaled, never exceed the option; no attempt holds more than its receiver's
        limit. Run after every receive and every journal entry written: nothing else adds to
        the count."""
        driver = self._drivers.get(self.current_run or "")
        if driver is None:
            return  # between runs: no driver to hold to its option
        bound = self.config.max_in_flight
        assert bound is not None
        acked = driver.acknowledger.acked_batch
        now = self.clock.elapsed
        journaled: set[str] | None = None
        per_attempt: dict[Actor, int] = {}
        held: dict[tuple[int, int], int] = {}  # (batch, receiver) -> messages it holds
        raw = 0
        for url in self.urls:
            for m in self.sqs._lookup(url).live.values():
                if m.state(now) != "in_flight":
                    continue
                raw += 1
                actor = self._holder.get((url, m.message_id))
                slot = self._slot.get(actor) if actor is not None else None
                if actor is None or slot is None:
                    continue
                per_attempt[actor] = per_attempt.get(actor, 0) + 1
                if slot[0] <= acked or slot[3] == self.current_run:
                    continue
                # An attempt of a dead run: what it journaled is the source's to count (an
                # inherited batch); what it did not is lost to the source until it times out.
                if journaled is None:
                    journaled = self._journaled_ids()
                if m.message_id in journaled:
                    held[slot[:2]] = held.get(slot[:2], 0) + 1
        for actor, n in per_attempt.items():
            batch, receiver, limit, run = self._slot[actor]
            if n > limit and not self._in_flight_broken:
                self._in_flight_broken = True
                self.violation(
                    f"in-flight bound: {actor.name} holds {n} messages in flight, more than "
                    f"its receiver's limit {limit}"
                )
            if batch > acked and run == self.current_run:
                held[(batch, receiver)] = max(held.get((batch, receiver), 0), n)
        if held:
            # A committed deleteAfterJournal batch is not counted: the attempt of each receiver
            # that ended deleted what it journaled. What it holds is an extra attempt's (killed
            # before its part existed) or a failed delete's, outside the promise.
            for batch in self._committed_deleting():
                for key in [k for k in held if k[0] == batch]:
                    del held[key]
        total = sum(held.values())
        stats = self.stats
        stats["inflight_peak"] = max(stats.get("inflight_peak", 0), raw)
        stats["inflight_held_peak"] = max(stats.get("inflight_held_peak", 0), total)
        if raw > bound:
            # Extra attempts (losers, killed attempts, stragglers, tasks of a dead driver) hold
            # their receipts until they release them or the visibility timeout: allowed.
            stats["inflight_over_option"] = stats.get("inflight_over_option", 0) + 1
            if self._trace_on:
                holders = ", ".join(
                    f"{a.name}{'' if self._slot[a][3] == self.current_run else ' (dead run)'}"
                    f"{' (done)' if a.done else ''}: {n}"
                    for a, n in per_attempt.items()
                )
                self.event(f"{raw} in flight > maxInFlightMessages={bound}: {holders}")
        if total > bound and not self._in_flight_broken:
            self._in_flight_broken = True
            shown = ", ".join(f"b{b}.r{r}:{n}" for (b, r), n in sorted(held.items()) if n)
            self.violation(
                f"in-flight bound: {total} messages in flight for unacknowledged batches, "
                f"maxInFlightMessages={bound} (acknowledged through {acked}; {shown})"
            )

    def _committed_deleting(self) -> set[int]:
        """Journal batches in Spark's commit log whose plan deletes on journal
        (deleteAfterJournal): ``Acknowledger.pending_messages`` no longer counts them."""
        out: set[int] = set()
        for spark_batch in self.commit_log:
            logged = self.offset_log.get(spark_batch)
            if logged is None:
                continue
            batch = offsets.batch_of(json.loads(logged[1]))
            data = self.store.peek(f"{batch_dir(batch)}/_plan.json")
            if data is not None and BatchPlan.from_json(data).delete_after_journal:
                out.add(batch)
        return out

    def _after_store(self, store: SimJournalStore, method: str, key: str) -> None:
        if (
            method == "create"
            and key.startswith("batches/")
            and self.config.max_in_flight is not None
            and not self._in_flight_off
        ):
            self._check_in_flight()
        if method == "create" and key.startswith("lease/"):
            self._lease_written(store, key)
        if _ENTRY_FILE.match(key):
            self._straggler_entry(store, method, key)
        if self.config.poison and store is self.store:
            self._poison_record(store, method, key)
        if _GONE_KEY.match(key):
            self._batch_went(store, method, key)
        if self._created_while_deleted is not None and store is self.store:
            self._created_meanwhile(store, method, key)

    def _poison_record(self, store: SimJournalStore, method: str, key: str) -> None:
        """Config.poison: note a task's read or write of an entry (its run attempted the
        batch) and every narrowing record created (a quarantine decision), for the judge of
        the dead-letter queue (sim/quarantines.py)."""
        actor = self.sched.current()
        run = actor.group.split("/")[0] if actor is not None else ""
        if method == "create" and NARROW_KEY.match(key):
            self.quarantines.narrowed(key, store.peek, self._group_epoch.get(run, -1))
            return
        carry = _ENTRY_ONLY.match(key)
        if method == "create" and carry is not None:
            batch = f"batches/{carry.group(1)}/"
            data = store.peek(key)
            if data is not None and store.peek(f"{batch}_carry.json") is not None:
                table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
                self._carried_seen.update(table.column("messageId").to_pylist())
        sent = _SENT_MARKER.match(key)
        if method == "create" and sent is not None and store.peek(key) is not None:
            self.quarantines.marked(sent.group(1), run)
            return
        match = _ENTRY_ONLY.match(key)
        if match is None or actor is None or actor.kind != "task" or method not in _TOUCH:
            return
        slot = self._slot.get(actor)
        if slot is not None and store.peek(key) is not None:
            self.quarantines.touched(slot[3], int(match.group(1)))

    def _created_meanwhile(self, store: SimJournalStore, method: str, key: str) -> None:
        """Note a key a task (of an earlier run: the diverged run is refused before any task
        runs) created, or removed again, in a deleted journal's location."""
        actor = self.sched.current()
        if actor is None or actor.kind != "task":
            return
        if method == "create" and store.writes and store.writes[-1][1:] == ("create", key):
            self._created_while_deleted.add(key)  # type: ignore[union-attr]
        elif method == "delete" and store.peek(key) is None:
            self._created_while_deleted.discard(key)  # type: ignore[union-attr]

    def _batch_went(self, store: SimJournalStore, method: str, key: str) -> None:
        """Note when a journal batch stopped being live (retired: its marker created; removed:
        its plan deleted), and which query's process did it."""
        match = _GONE_KEY.match(key)
        actor = self.sched.current()
        if match is None or actor is None:
            return
        retired = (
            method == "create" and key.endswith("/_retired.json") and store.peek(key) is not None
        )
        removed = method == "delete" and key.endswith("/_plan.json") and store.peek(key) is None
        if not (retired or removed):
            return
        epoch = self._group_epoch.get(actor.group.split("/")[0])
        if epoch is not None:
            self._batch_gone.setdefault((id(store), int(match.group(1))), (self.sched.steps, epoch))

    def _straggler_entry(self, store: SimJournalStore, method: str, key: str) -> None:
        """Note an entry a task created in a batch that is not live (no plan, carry, release or
        retirement record): its attempt must remove it itself; forget it once that attempt
        does."""
        actor = self.sched.current()
        if actor is None or actor.kind != "task":
            return
        if method == "delete":
            if self._straggler_entries.get((id(store), key)) is actor:
                del self._straggler_entries[(id(store), key)]
            return
        created = bool(store.writes) and store.writes[-1][1:] == ("create", key)
        directory = "/".join(key.split("/", 2)[:2])  # batches/<N>
        live = ("_plan.json", "_carry.json", "_released.json", "_retired.json")
        if created and all(store.peek(f"{directory}/{name}") is None for name in live):
            self._straggler_entries[(id(store), key)] = actor

    def _lease_written(self, store: SimJournalStore, key: str) -> None:
        """When each owner last renewed (a lease record of its that took effect, answer lost
        or not, while no newer record existed: a create that fills a hole is no renewal), and
        whose record each owner's first one followed (the run it took the journal from)."""
        match = _LEASE_KEY.match(key)
        data = store.peek(key)
        if match is None or data is None:
            return
        seq = int(match.group(1))
        seqs = [int(m.group(1)) for k in store.keys() if (m := _LEASE_KEY.match(k))]
        if any(other > seq for other in seqs):
            return
        doc = json.loads(data)
        owner = doc["owner"]
        if owner not in self.lease_previous:
            below = [other for other in seqs if other < seq]
            previous = store.peek(lease_key(max(below))) if below else None
            self.lease_previous[owner] = json.loads(previous)["owner"] if previous else None
        at = float(doc["writtenAt"])
        if self.config.clock_skew or self.config.clock_drift:
            # The writer's wall clock is its own: judge on the true one, at the effect. A create
            # that found the record there (its owner's other thread wrote it earlier) renews
            # nothing: the record's true time is its own create's.
            created = [t for t, method, k in store.writes if k == key and method == "create"]
            at = self.clock.time() - (store.clock.elapsed - created[-1]) if created else at
        if at > self.lease_written.get(owner, -1.0):
            self.lease_written[owner] = at
        if doc.get("released"):
            self.lease_released.add(owner)

    def _narrowed_out_after_commit(self, message_id: str) -> bool:
        """True if the sink took ``message_id`` with a batch (committed, or appended by a sink
        that is not idempotent) and a later, narrowed, replay of the same batch left it out, or
        a later narrowing step of its journal batch carried it out (a sink that skips a batch
        it has never runs that replay)."""
        if self.poison_id is None:
            return False
        taken = [key for key, rows in self.sink_committed.items() if _holds(rows, message_id)]
        taken += [key for key, rows in self.sink_appended if _holds(rows, message_id)]
        if any(message_id not in self.executions.get(key, [()])[-1] for key in taken):
            return True
        # A sink that skips a batch it has never runs the narrowed replay: the record shows a
        # step that carried the message out after the sink took the batch (sim/quarantines.py).
        return any(key in taken for key in self.quarantines.carried_after_sink(message_id))

    def _carried_ids(self) -> set[str]:
        """Ids journaled by carry batches (``batches/<X>/_carry.json``, Config.poison), now or
        before: a carry batch that another query adopted (and removed) has its messages in
        the adopting batch's entries, and the narrowed batch's acknowledgement, which a
        deposed driver may still make, deletes them all the same. Whether each reaches a sink
        is judged at the end (LOST)."""
        keys = self.store.keys()
        carries = tuple(k[: -len("_carry.json")] for k in keys if k.endswith("/_carry.json"))
        return (self._journaled_ids(carries) if carries else set()) | self._carried_seen

    def _journaled_ids(self, under: tuple[str, ...] = ("batches/",)) -> set[str]:
        """Ids in journal entries and parts, in every store a run was pointed at."""
        out: set[str] = set()
        held = [(id(store), store.snapshot()) for store in self.stores]
        for where, objects in [*held, (0, self._deleted_journal)]:
            for key, data in objects.items():
                if not key.startswith(under) or not key.endswith(".arrow"):
                    continue
                # Keyed by content too: a store that ignores create-if-absent overwrites entries.
                cache_key = (where, key, hash(data))
                ids = self._journal_ids.get(cache_key)
                if ids is None:
                    try:
                        table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
                        ids = frozenset(table.column("messageId").to_pylist())
                    except Exception:  # noqa: BLE001
                        ids = frozenset()
                    self._journal_ids[cache_key] = ids
                out |= ids
        return out

    # -- Spark ---------------------------------------------------------------------------------

    def run(self) -> Result:
        # uuid4 draws from the seed while it runs (probe keys, journal identities): a seed
        # replays exactly, in another process too.
        ids = random.Random(f"uuid:{self.config.seed}")
        original = uuid.uuid4
        uuid.uuid4 = lambda: uuid.UUID(int=ids.getrandbits(128), version=4)
        shared_window = duplicates.worker_window

        def worker_window(location: str, window_seconds: float) -> duplicates.DuplicateWindow:
            own = self._own_windows.get(self.sched.current())  # type: ignore[arg-type]
            if own is None:
                return shared_window(location, window_seconds)
            key = (location, window_seconds)
            return own.setdefault(key, duplicates.DuplicateWindow(window_seconds))

        duplicates.worker_window = worker_window
        kept = self.config.markers_kept or PLANNED_MARKERS_KEPT
        journal_state.PLANNED_MARKERS_KEPT = window.PLANNED_MARKERS_KEPT = kept
        # The library's logs are silenced for speed while the seed runs, and given back after
        # (a test that runs a seed in its process must not silence the tests after it).
        library = logging.getLogger("spark_sqs")
        level = library.level
        if not self._verbose_trace:
            library.setLevel(logging.CRITICAL)
        try:
            return self._run()
        finally:
            uuid.uuid4 = original
            duplicates.worker_window = shared_window
            journal_state.PLANNED_MARKERS_KEPT = window.PLANNED_MARKERS_KEPT = PLANNED_MARKERS_KEPT
            library.setLevel(level)

    def _run(self) -> Result:
        c = self.config
        random.seed(f"global:{c.seed}")  # BatchCaller's backoff jitter
        journal_drops._DROPS_CACHE.clear()
        self.log(f"{'spark':<22} == {c}")
        self._produce(c.messages // 2)
        self.sched.spawn("producer", "producer", "producer", self._producer)
        try:
            i, runs = 0, c.runs
            while i < runs:
                if i and self.rng.random() < c.new_checkpoint:
                    # The user starts over with a new checkpoint (and a sink of its own) on the
                    # same journal: its unacknowledged batches are orphans to adopt.
                    self._epochs += 1
                    self.ckpt = Checkpoint(epoch=self._epochs)
                    self.stats["new_checkpoints"] = self.stats.get("new_checkpoints", 0) + 1
                    self.log(f"{'spark':<22} == NEW CHECKPOINT (epoch {self.epoch})")
                elif i and c.diverge and self.offset_log and self._diverge_rng.random() < c.diverge:
                    self._diverged_run(self._run_options())
                self._one_run(self._run_options())
                self._wait_for_second_queries()
                i += 1
                if i == runs and runs < c.runs + c.poison_runs and not self._poison_quarantined():
                    runs += 1  # the poison message is not quarantined yet: one more with faults
                    self._poison_run = True
            self._wait_for_second_queries()
            self._drain()
        except Deadlock as exc:
            self.violation(f"deadlock: {exc}")
        finally:
            self.sched.shutdown()
        self._check_end()
        if self.store.lagged_listings:
            self.stats["lagged_listings"] = self.store.lagged_listings
        for kind, count in self.sqs.over_limit.items():
            if count:
                # Receives at the simulated queue's own in-flight limit (Config.sqs_inflight_limit).
                self.stats[f"over_limit_{kind}"] = count
        return Result(
            c,
            self.violations,
            self.findings,
            self.lines,
            self.sched.steps,
            self.clock.elapsed,
            self.stats,
        )

    def _run_options(self) -> RunOptions:
        daj = self.config.delete_after_journal and self.rng.random() < 0.6
        if not self.config.change_delete_after_journal:
            daj = self.config.delete_after_journal
        return RunOptions(
            num_partitions=self.rng.randint(1, 4),
            max_messages=self.rng.choice([3, 7, 10, 25, 100]),
            delete_after_journal=daj,
            batches=self.rng.randint(1, 5),
            queues=self._run_queues(),
            dead_letter=self.dead_letter,
            max_in_flight=self.config.max_in_flight,
            wait_time=self.config.wait_time,
            duplicate_window=self.config.duplicate_window,
            messages_per_receiver=self._receivers_rng.choice([1, 1, 10, None]),
            **self._byte_limits(),
        )

    def _byte_limits(self) -> dict[str, int | None]:
        """Config.max_bytes: a run's byte limits, of a few simulated messages (about 250
        bytes each with their handle and attributes), or the defaults."""
        if not self.config.max_bytes:
            return {}
        rng = self._bytes_rng
        return {
            "max_bytes_per_receiver": rng.choice([1, 300, 700, None]),
            "max_bytes_per_trigger": rng.choice([None, None, 600, 2000]),
        }

    def _run_queues(self) -> tuple[int, ...] | None:
        """Several queues: a run names all of them, or (a queue removed) just one."""
        if len(self.urls) == 1 or self._queue_rng.random() < 0.5:
            return None
        return (self._queue_rng.randrange(len(self.urls)),)

    def _produce(self, count: int) -> None:
        for _ in range(count):
            n = len(self.sent)
            body = f"m{n:04d}"
            url = self._queue_rng.choice(self.urls) if len(self.urls) > 1 else self.url
            kwargs: dict[str, Any] = {"QueueUrl": url, "MessageBody": body}
            if self.config.fifo:
                kwargs["MessageGroupId"] = f"g{n % 4}"
            # Sent straight to the service: the producer is not under test.
            mid = self.sqs.send_message(**kwargs)["MessageId"]
            self.sent.append(mid)
            if n == self._poison_n:
                self.poison_id = mid

    def _producer(self) -> None:
        rest = self.config.messages - len(self.sent)
        while rest > 0:
            self.sched.sleep(self.rng.choice([1.0, 5.0, 20.0]))
            n = min(rest, self.rng.randint(1, 10))
            self._produce(n)
            rest -= n

    def _one_run(
        self,
        opts: RunOptions,
        drain: bool = False,
        *,
        store: SimJournalStore | None = None,
        diverged: str | None = None,
    ) -> None:
        self.run_no += 1
        group = f"run{self.run_no}"
        self.current_run = group
        self.stats["restarts"] += 1
        self.run_stores[group] = self.hstore if store is None else self._hooked(store)
        if diverged is not None:
            self.diverged[group] = diverged
        self.log(f"{'spark':<22} == START {group}: {opts}")
        if self.config.waves:
            self._slots[group] = self._waves_rng.choice([1, 2, 3])
            self.log(f"{'spark':<22} == {group} has {self._slots[group]} task slots")
        driver = self.sched.spawn(
            f"{group}/driver", group, "driver", lambda: self._driver_loop(group, opts, drain)
        )

        if not driver.done:
            self.sched.run_until(lambda: driver.done or self._bounded())
            self._check_bounds()
        if driver.error is not None:
            err = driver.error
            self.stats["query_failures"] += 1
            self.log(f"{'spark':<22} == {group} FAILED: {type(err).__name__}: {err}")
            if isinstance(err, AssertionError | Deadlock):
                self.violation(f"{group}: {type(err).__name__}: {err}")
            self.last_failure = f"{type(err).__name__}: {err}"
        if diverged is not None:
            self._judge_diverged(group, diverged, driver)
        # The driver process is gone, whatever ended it: its heartbeat with it.
        for actor in list(self.sched.actors):
            if actor.group == group:
                self.sched.kill(actor)
        self.current_run = None

    def _bounded(self) -> bool:
        return self.sched.steps > MAX_STEPS or self.clock.elapsed > MAX_SIM_SECONDS

    def _check_bounds(self) -> None:
        if self._bounded():
            raise Deadlock(
                f"no end after {self.sched.steps} steps and {self.clock.elapsed:.0f} "
                "simulated seconds (livelock)"
            )

    def _start_driver(self, group: str, opts: RunOptions) -> Coordinator:
        urls = self.urls if opts.queues is None else [self.urls[i] for i in opts.queues]
        if len(urls) < len(self.urls):
            self.stats["runs_without_a_queue"] = self.stats.get("runs_without_a_queue", 0) + 1
        options = opts.parse(",".join(urls))
        hstore = self.run_stores[group]
        clocks = self._clocks(f"{group}/driver")
        journal = Journal(JOURNAL, options, store=hstore)
        self._probe(group, journal, hstore.inner)
        default_queue = journal.meta.check_owner(*urls)
        lease = Lease(
            hstore,
            JOURNAL,
            owner=group,
            interval=options.heartbeat_interval,
            wall_clock=clocks.time,
            clock=clocks.monotonic,
            sleep=clocks.sleep,
        )
        lease.acquire()
        per_receiver = (
            {"messages_per_receiver": opts.messages_per_receiver}
            if opts.messages_per_receiver is not None
            else {}
        )
        if not self.config.receivers_by_backlog:
            per_receiver = {"messages_per_receiver": 0}
        driver = Coordinator(
            options,
            self.client,
            urls[0],
            journal,
            lease,
            queue_urls=urls,
            default_queue=default_queue,
            clock=clocks.monotonic,
            wall_clock=clocks.time,
            sleep=clocks.sleep,
            run_heartbeat=False,
            parallelism=1,
            **per_receiver,
        )
        driver.start_poison_policy()
        self._drivers[group] = driver
        # The heartbeat thread, on the simulated clock; its lock must be the scheduler's.
        driver.heartbeat.lock = SimLock(self.sched, f"{group} heartbeat")  # type: ignore[assignment]

        def beat() -> None:
            while True:
                clocks.sleep(options.heartbeat_interval)
                driver.heartbeat.tick_safely()

        self.sched.spawn(f"{group}/heartbeat", group, "heartbeat", beat)
        return driver

    def _probe(self, group: str, journal: Journal, store: SimJournalStore) -> None:
        """``Meta.probe_writable`` at start, as ``Coordinator.start`` calls it. On a store
        that ignores create-if-absent (``lying_store``) it must refuse: the seed then goes on
        with an honest store (the user moved to one); if it does not, the run goes on, on the
        lying store, and the seed shows what that costs."""
        lying = not store.honest_create
        try:
            journal.meta.probe_writable()
        except JournalError as exc:
            if lying:
                self.stats["lying_store_refused"] = self.stats.get("lying_store_refused", 0) + 1
                self.event(f"probe refused the store that ignores create-if-absent: {exc}")
                store.honest_create = True
                store.fault_free_prefixes = ()
            raise
        if lying and not self.stats.get("lying_store_accepted"):
            self.stats["lying_store_accepted"] = 1
            self.violation(
                f"{group}: probe_writable accepted a journal store that ignores "
                "create-if-absent (a second create of one key answered True)"
            )

    def _driver_loop(
        self,
        group: str,
        opts: RunOptions,
        drain: bool,
        ckpt: Checkpoint | None = None,
        owner: str | None = None,
    ) -> None:
        """Spark's micro-batch loop of one run: the main query's (``ckpt`` None), or a second
        query's that took the journal over from run ``owner`` (its own checkpoint)."""
        sched = self.sched
        ckpt = self.ckpt if ckpt is None else ckpt
        self._group_epoch[group] = ckpt.epoch
        rng = self.rng if owner is None else self._query2_rng
        driver = self._start_driver(group, opts)
        options = driver.options
        self.event(f"driver started (journal planned={driver.markers.planned})")
        if owner is not None:
            self._query2_took_over = ckpt
            self._judge_takeover(group, options)
        elif (
            self.config.second_query
            and self.rng.random() < self.config.second_query
            and not drain
            and group not in self.diverged
        ):
            self._second_query(group, options)
        limit = default_read_limit(options) if default_read_limit else None
        last = max(ckpt.offset_log) if ckpt.offset_log else None
        if last is not None and last not in ckpt.commit_log:
            start = self._start_of(driver, last, ckpt)
            self.stats["replays"] += 1
            if self.config.replans:
                self._replaying.add(group)
            try:
                self._run_batch(driver, group, last, start, ckpt.offset_log[last][1], ckpt, rng)
            finally:
                self._replaying.discard(group)
        batch_id = 0 if last is None else last + 1
        new_batches = 0
        idle = 0
        while True:
            sched.point("spark: trigger")
            if drain and idle >= 3 and self._drained():
                self.event("drained: stopping the query")
                break
            # The user stops the query after its batches, or once it has idled a while.
            if not drain and (new_batches >= opts.batches or idle >= 2 + opts.batches):
                break
            if self.config.spark == "4.0":
                latest = driver.latest_offset(None)
                self.event(f"latestOffset() -> {latest}")
                start = self._start_of(driver, batch_id, ckpt)
            else:
                start = self._start_of(driver, batch_id, ckpt)
                self._handed(group)
                latest = driver.latest_offset(json.loads(start), limit)
                self.event(f"latestOffset({start}) -> {latest}")
                if batch_id and json.dumps(latest) != start:
                    self._accepted(group, f"latestOffset({start}) answered a new batch")
            end = json.dumps(latest)
            if end == start:
                idle += 1
                sched.sleep(rng.choice([0.5, 1.0, 5.0]) if not drain else 2.0)
                continue
            idle = 0
            sched.point("spark: write offset log")
            ckpt.offset_log[batch_id] = (start, end)
            self.event(f"offset log {batch_id}: {start} -> {end}")
            if batch_id - 1 in ckpt.offset_log:
                previous = json.loads(ckpt.offset_log[batch_id - 1][1])
                self._handed(group)
                driver.commit(previous)
                self.event(f"commit({previous})")
            self._run_batch(driver, group, batch_id, start, end, ckpt, rng)
            batch_id += 1
            new_batches += 1
        # query.stop(): SIGTERM releases the lease; stop() is not called.
        sched.point("spark: query.stop()")
        if driver.lease is not None:
            driver.lease.release()
        self.event("stopped")

    def _start_of(self, driver: Coordinator, batch_id: int, ckpt: Checkpoint) -> str:
        if batch_id == 0:
            first = json.dumps(driver.initial_offset())
            again = json.dumps(driver.initial_offset())
            if first != again:
                self.violation(f"initialOffset answered {first} then {again}")
            self.event(f"initialOffset() -> {first}")
            return first
        return ckpt.offset_log[batch_id - 1][1]

    def _run_batch(
        self,
        driver: Coordinator,
        group: str,
        batch_id: int,
        start: str,
        end: str,
        ckpt: Checkpoint,
        rng: random.Random,
    ) -> None:
        sched = self.sched
        self.stats["batches"] += 1
        key = ckpt.epoch * 100_000 + batch_id  # the sink's batch id, per checkpoint
        skip = self.config.sink == "skip_before" and key in self.sink_committed
        journal_batches: set[int] = set()
        if skip and rng.random() < 0.5:
            self.event(f"batch {batch_id}: sink has it; not planned, not run")
        else:
            self._handed(group)
            partitions = driver.plan(json.loads(start), json.loads(end))
            if partitions:
                self._accepted(group, f"partitions({start}, {end}) planned receivers")
            shipped = [pickle.dumps(p) for p in partitions]
            journal_batches = {p.batch for p in partitions}
            if self.config.poison and self.run_stores[group].inner is self.store:
                keys = self.store.keys()
                for journal_batch in sorted(journal_batches):
                    self.quarantines.planned(group, journal_batch, keys)
            self.event(
                f"partitions({start}, {end}) -> "
                + ", ".join(f"r{p.receiver}:{p.max_messages}" for p in partitions)
            )
            if skip:
                self.event(f"batch {batch_id}: sink has it; tasks not run")
            else:
                rows, by_receiver = self._run_tasks(group, batch_id, shipped, rng)
                ids = tuple(sorted(m for m, _ in rows))
                runs = self.executions.setdefault(key, [])
                if not runs:
                    self._first_by_receiver[key] = {k: v[0] for k, v in by_receiver.items()}
                # poisonMessagePolicy=deadLetter narrows a batch that keeps failing: its replay
                # holds fewer of its messages (the documented exception), never others.
                narrowed = self.config.poison and bool(runs) and set(ids) < set(runs[0])
                if (
                    runs
                    and runs[0] != ids
                    and not narrowed
                    and not self._taken_meanwhile(key, group, ckpt, by_receiver)
                ):
                    self.violation(
                        f"batch {batch_id} ran again with other rows: first {len(runs[0])} "
                        f"ids, now {len(ids)} (missing {sorted(set(runs[0]) - set(ids))[:5]}, "
                        f"new {sorted(set(ids) - set(runs[0]))[:5]})"
                    )
                runs.append(ids)
                if self.poison_id is not None and self.poison_id in ids:
                    self.stats["poison_failures"] = self.stats.get("poison_failures", 0) + 1
                    self.quarantines.ended(group, journal_batches, POISON)
                    raise SinkFailed(f"the sink cannot store message {self.poison_id}")
                sched.point("spark: sink commit")
                self._sink_commit(key, rows)
                if journal_batches:
                    self.quarantines.sank(group, journal_batches, key)
        sched.point("spark: write commit log")
        ckpt.commit_log.add(batch_id)
        self.event(f"commit log {batch_id}")
        if journal_batches:
            self.quarantines.ended(group, journal_batches, COMMITTED)

    def _taken_meanwhile(
        self,
        key: int,
        group: str,
        ckpt: Checkpoint,
        by_receiver: dict[tuple[int, int], tuple[tuple[str, ...], int]],
    ) -> bool:
        """The other documented exception to "a replay holds exactly what the first attempt
        planned" (docs/design.md, step 3 of the protocol, and Limits): a receiver whose batch
        another query adopted (retired) or removed meanwhile delivers nothing, as every read of
        a batch that is no longer live does. Receivers are tasks of their own: those that read
        before the takeover replay their entries, those that read after it deliver nothing. So
        a replay may differ only in receivers that yielded nothing now, each of whose winning
        attempt ended after a process of another checkpoint took its journal batch; every other
        receiver yields exactly what it yielded first."""
        first = self._first_by_receiver.get(key)
        if first is None or set(first) != set(by_receiver):
            return False
        store = id(self.run_stores[group].inner)
        excused = []
        for slot, (ids, ended) in sorted(by_receiver.items()):
            if ids == first[slot]:
                continue
            gone = self._batch_gone.get((store, slot[0]))
            if ids or gone is None or gone[1] == ckpt.epoch or gone[0] > ended:
                return False
            excused.append(slot)
        for journal_batch, receiver in excused:
            self.event(
                f"receiver {receiver} of journal batch {journal_batch} delivered nothing in "
                "this replay: another query took the batch before its attempt ended"
            )
        if excused:
            self.stats["replays_taken_meanwhile"] = self.stats.get("replays_taken_meanwhile", 0) + 1
        return bool(excused)

    def _sink_commit(self, batch_id: int, rows: list[tuple[str, str]]) -> None:
        kind = self.config.sink
        if kind == "not_idempotent":
            self.sink_appended.append((batch_id, rows))
        elif batch_id in self.sink_committed:
            self.event(f"sink: batch {batch_id} already committed, skipped")
            return
        else:
            self.sink_committed[batch_id] = rows
        self.committed_ids.update(m for m, _ in rows)
        if batch_id // 100_000 >= QUERY2_EPOCHS:
            self.stats["query2_batches"] = self.stats.get("query2_batches", 0) + 1
        self.event(f"sink committed batch {batch_id}: {len(rows)} rows")

    def _run_tasks(
        self, group: str, batch_id: int, shipped: list[bytes], rng: random.Random
    ) -> tuple[list[tuple[str, str]], dict[tuple[int, int], tuple[tuple[str, ...], int]]]:
        """Run the batch's tasks as Spark does; the winners' rows, and by (journal batch,
        receiver) the ids each winner yielded and the scheduler step at which it ended."""
        ts = _TaskSet(batch_id, shipped)
        # Task waves (Config.waves): attempts beyond the run's slots wait for one to free, in
        # launch order, as Spark's scheduler holds tasks back without a free executor core.
        slots = self._slots.get(group)
        queued: list[tuple[int, float]] = []
        executors = f"{group}/exec"

        def running() -> int:
            # Every attempt of this run holds a slot until it ends: stragglers of earlier
            # batches too.
            return sum(1 for a in self.sched.actors if a.group == executors and not a.done)

        def launch(index: int, delay: float = 0.0) -> None:
            if slots is not None and (queued or running() >= slots):
                queued.append((index, delay))
                self.stats["tasks_waited"] = self.stats.get("tasks_waited", 0) + 1
                return
            self._launch(ts, group, index, delay)

        def fill() -> None:
            while queued and slots is not None and running() < slots:
                index, delay = queued.pop(0)
                if index in ts.results and not delay:
                    continue  # a retry no longer needed
                self._launch(ts, group, index, delay)

        for i in range(len(shipped)):
            launch(i)
            if rng.random() < self.config.speculation:
                self.stats["speculative"] += 1
                launch(i, delay=rng.choice([0.0, 0.0, 1.0, 10.0, 40.0]))

        def news() -> bool:
            return ts.news() or (bool(queued) and slots is not None and running() < slots)

        while len(ts.results) < len(shipped):
            self.sched.wait(f"spark: tasks of batch {batch_id}", news if slots else ts.news)
            for i, attempts in ts.attempts.items():
                for a in attempts:
                    if not a.done or id(a) in ts.seen:
                        continue
                    ts.seen.add(id(a))
                    if i in ts.results:
                        continue  # a loser or straggler: its output is discarded
                    if a.error is None and not a.killed:
                        ts.results[i] = a.result
                        ts.winners[i] = a
                        for other in attempts:
                            if other is not a and not other.done:
                                if rng.random() < 0.5:
                                    self.sched.kill(other)
                                else:
                                    self.stats["stragglers"] += 1
                                    self._stragglers.add(other)
                                    self.event(f"{other.name} left running (straggler)")
                        continue
                    ts.failures[i] += 1
                    why = "killed" if a.killed else f"{type(a.error).__name__}: {a.error}"
                    self.event(f"{a.name} failed ({why})")
                    if ts.failures[i] >= MAX_TASK_FAILURES:
                        raise TaskSetFailed(f"batch {batch_id} task {i} failed 4 times: {why}")
                    if not any(not o.done for o in attempts) and not any(q == i for q, _ in queued):
                        launch(i)
            fill()
            if slots is not None:
                self.stats["waves_peak"] = max(self.stats.get("waves_peak", 0), running())
        rows: list[tuple[str, str]] = []
        by_receiver: dict[tuple[int, int], tuple[tuple[str, ...], int]] = {}
        for i in sorted(ts.results):
            rows.extend(ts.results[i])
            winner = ts.winners[i]
            journal_batch, receiver = self._slot[winner][:2]
            ids = tuple(sorted(m for m, _ in ts.results[i]))
            by_receiver[(journal_batch, receiver)] = (ids, self._task_ended.get(winner, 0))
        return rows, by_receiver

    def _launch(self, ts: _TaskSet, group: str, index: int, delay: float = 0.0) -> None:
        attempt = len(ts.attempts[index])
        blob = ts.partitions[index]
        partition = pickle.loads(blob)
        name = f"{group} b{ts.batch_id}.r{partition.receiver}.a{attempt}"
        hstore = self.run_stores[group]
        clocks = self._clocks(name)

        def task() -> list[tuple[str, str]]:
            if delay:
                self.sched.sleep(delay)
            part = pickle.loads(blob)
            journal = Journal(JOURNAL, part.options, store=hstore)
            rows: list[tuple[str, str]] = []
            for rb in read_partition(
                part,
                client_factory=lambda: self.client,
                journal=journal,
                clock=clocks.monotonic,
                wall_clock=clocks.time,
                sleep=clocks.sleep,
            ):
                rows.extend(
                    zip(
                        rb.column("messageId").to_pylist(),
                        rb.column("body").to_pylist(),
                        strict=True,
                    )
                )
                self.sched.point("task: yielded rows")
            me = self.sched.current()
            if me is not None:
                self._task_ended[me] = self.sched.steps
            return rows

        actor = self.sched.spawn(name, f"{group}/exec", "task", task)
        if clocks.view is not None:
            self._own_windows[actor] = {}
        self._slot[actor] = (partition.batch, partition.receiver, partition.max_messages, group)
        ts.attempts[index].append(actor)

    def _second_query(self, group: str, options: SqsOptions) -> None:
        """Another query (another checkpoint) started on this journal while this one runs."""
        self.stats["second_queries"] += 1
        if self.config.query2_runs:
            self._second_query_runs(group)
            return
        hstore = self.run_stores.get(group, self.hstore)

        def other() -> str:
            self.sched.sleep(self.rng.choice([0.5, 3.0, 8.0]))
            clocks = self._clocks(f"{group}/query2")
            journal = Journal(JOURNAL, options, store=hstore)
            journal.meta.check_owner(*self.urls)
            lease = Lease(
                hstore, JOURNAL, owner=f"{group}-other", interval=options.heartbeat_interval,
                wall_clock=clocks.time, clock=clocks.monotonic, sleep=clocks.sleep,
            )  # fmt: skip
            try:
                lease.acquire()
            except JournalInUseError:
                self.event("second query refused: JournalInUseError")
                return "refused"
            self._judge_takeover(lease.owner, options)
            lease.release()
            return "took over"

        self.sched.spawn(f"{group}/query2", f"{group}-q2", "query2", other)

    def _second_query_runs(self, owner: str) -> None:
        """A second query (its own checkpoint and sink) on the journal of run ``owner``: refused
        while the owner renews its lease; once it may take over (the owner paused, or a clock
        that makes it look silent), it runs 1-3 batches and stops, while the owner may wake up
        and go on. Its sink's batches count as another checkpoint's (_check_end)."""
        self._query2_epochs += 1
        number = self._query2_epochs
        group = f"{owner}-q{number + 1}"
        rng = self._query2_rng
        c = self.config
        opts = RunOptions(
            num_partitions=rng.randint(1, 4),
            max_messages=rng.choice([3, 7, 10, 25, 100]),
            delete_after_journal=c.delete_after_journal and rng.random() < 0.5,
            batches=rng.randint(1, 3),
            dead_letter=self.dead_letter,
            max_in_flight=c.max_in_flight,
            wait_time=c.wait_time,
            duplicate_window=c.duplicate_window,
        )
        delay = rng.choice([0.5, 3.0, 8.0])
        ckpt = Checkpoint(epoch=QUERY2_EPOCHS + number)
        self.run_stores[group] = self.run_stores.get(owner, self.hstore)
        if c.waves:
            self._slots[group] = self._waves_rng.choice([1, 2, 3])
        self._query2_active.add(group)

        def body() -> None:
            self.sched.sleep(delay)
            self.log(f"{group + '/driver':<22} == START second query {group}: {opts}")
            try:
                self._driver_loop(group, opts, drain=False, ckpt=ckpt, owner=owner)
            except JournalInUseError as exc:
                self.event(f"second query stopped: JournalInUseError: {exc}")
            except Exception as exc:  # noqa: BLE001 - a query failure, judged like the owner's
                self.event(f"second query FAILED: {type(exc).__name__}: {exc}")
                if isinstance(exc, AssertionError):
                    self.violation(f"{group}: {type(exc).__name__}: {exc}")
            finally:
                self._query2_active.discard(group)
                me = self.sched.current()
                for actor in list(self.sched.actors):
                    if actor.group == group and actor is not me:
                        self.sched.kill(actor)

        self.sched.spawn(f"{group}/driver", group, "query2", body)

    def _judge_takeover(self, new_owner: str, options: SqsOptions) -> None:
        """A second query just took the journal: from the owner of the record its own record
        followed. The rule: only after that owner released it or stopped renewing for two of
        its intervals. A stall of the owner (slow steps, failed renewals, a pause) may make
        that happen while its heartbeat runs; the owner then must stop before it deletes
        anything. Judged on the true clock, at each record's effect (with drift, two
        intervals of the newcomer's clock are a little less of true time)."""
        owner = self.lease_previous.get(new_owner)
        if owner is None or not any(
            a.group == owner and a.kind == "heartbeat" and not a.done for a in self.sched.actors
        ):
            return
        if self.config.query2_runs:
            # Two owners that both plan: the first one's in-flight count no longer holds.
            self._in_flight_off = True
        if owner in self.lease_released:
            self.event(f"{owner} had released the journal (query.stop()); taken over")
            return
        silent = self.lease_written.get(new_owner, 0.0) - self.lease_written.get(owner, 0.0)
        allowed = 2 * options.heartbeat_interval * (1 - self.config.clock_drift)
        if silent < allowed:
            self.violation(
                f"a second query took the journal over from {owner}, whose heartbeat "
                f"runs, {silent:.3f}s after its last renewal"
            )
        else:
            self.stats["lease_lapsed"] += 1
            self.event(f"lease lapsed: {owner} silent for {silent:.1f}s; taken over")

    def _wait_for_second_queries(self) -> None:
        """Second queries that run batches stop by themselves: the next run starts after them.
        One that took the journal over replaced the query: the runs after it are its restarts
        (its checkpoint), as a user who moved to the new query would run them. The old
        checkpoint is not run on this journal again (one journal per query, docs/design.md
        Limits): only its paused or dying driver may still act, which is what is judged."""
        if self._query2_active:
            self.sched.run_until(lambda: not self._query2_active or self._bounded())
            self._check_bounds()
        if self._query2_took_over is not None:
            self.ckpt, self._query2_took_over = self._query2_took_over, None
            self.log(f"{'spark':<22} == the second query goes on (epoch {self.epoch})")

    # -- the journal and the checkpoint diverge ---------------------------------------------------

    def _diverged_run(self, opts: RunOptions) -> None:
        """Between runs the journal is deleted, moved (the run is pointed at an empty
        location) or swapped (another journal of the same queue is there), while Spark's
        offset and commit logs are kept. That run must be refused at start, before it
        receives, acknowledges or deletes anything, with a JournalError naming
        journalLocation; then the journal is restored (put back, or pointed back at) and the
        next run goes on with nothing lost or duplicated."""
        kind = self._diverge_rng.choice(["deleted", "moved", "swapped"])
        self.stats[f"diverged_{kind}"] = self.stats.get(f"diverged_{kind}", 0) + 1
        last = max(self.offset_log)
        self.log(
            f"{'spark':<22} == JOURNAL {kind.upper()} under the kept checkpoint (offset log "
            f"through {last}: {self.offset_log[last][1]})"
        )
        saved: dict[str, bytes] | None = None
        if kind == "deleted":
            saved = self.store.clear()
            self._created_while_deleted = set()
            self._deleted_journal = saved
            target = self.store
        elif kind == "moved":
            target = SimJournalStore(
                f"{self.config.seed}-moved", clock=self.clock, list_lag=self.config.list_lag
            )
        else:
            target = self._foreign_journal(offsets.batch_of(json.loads(self.offset_log[last][1])))
        if target is not self.store:
            self.stores.append(target)
        self._one_run(opts, store=target, diverged=kind)
        if saved is not None:
            # Put back as an undelete or a copy back over the location would: what was deleted
            # comes back, and what tasks of earlier runs still running wrote there meanwhile
            # stays (a write that succeeded is read: docs/design.md's assumptions). What the
            # diverged run wrote goes: the journal put back replaces it.
            self.store.restore(saved, keep=self._created_while_deleted or ())
            self._created_while_deleted = None
            self._deleted_journal = {}
        self.log(f"{'spark':<22} == JOURNAL RESTORED")

    def _foreign_journal(self, checkpoint_batch: int) -> SimJournalStore:
        """Another query's journal of the same queue, idle, its batch numbers a little behind
        or ahead of the checkpoint's (ahead, offsets without the journal's identity cannot tell
        it from the right one)."""
        store = SimJournalStore(
            f"{self.config.seed}-foreign", clock=self.clock, list_lag=self.config.list_lag
        )
        journal = Journal(JOURNAL, RunOptions(1, 10, False, 0).parse(self.url), store=store)
        journal.meta.check_owner(*self.urls)
        at = max(1, checkpoint_batch + self._diverge_rng.randint(-2, 4))
        journal.state.write(JournalState(planned_batch=at, acked_batch=at, initial_batch=0))
        self.log(f"{'spark':<22} == the other journal has planned and acknowledged batch {at}")
        return store

    def _handed(self, group: str) -> None:
        """Spark is about to hand the driver of ``group`` an offset of its checkpoint."""
        if group in self.diverged:
            self.stats[f"{group}_handed"] = 1

    def _accepted(self, group: str, call: str) -> None:
        """The driver of a diverged run answered a call that handed it the checkpoint's
        offsets with something Spark acts on: a new batch for the offset log (whose end would
        name the other journal), or receivers to run. It must have refused instead. (A
        ``commit`` that returns is judged by what it does: no SQS call may follow.)"""
        kind = self.diverged.get(group)
        if kind is None or self.stats.get(f"{group}_accepted"):
            return
        self.stats[f"{group}_accepted"] = 1
        self.violation(
            f"{group} ran on a journal {kind} under a kept checkpoint and {call} (it must "
            "refuse with a JournalError naming journalLocation)"
        )

    def _judge_diverged(self, group: str, kind: str, driver: Actor) -> None:
        """A diverged run handed the checkpoint's offsets ends refused (a JournalError naming
        journalLocation) or killed; one that Spark never handed them (Spark 4.0/4.1, an idle
        queue: only latestOffset() without a start) may stop."""
        err = driver.error
        if isinstance(err, JournalError) and not isinstance(err, JournalInUseError):
            if "journalLocation" in str(err):
                self.stats["diverged_refused"] = self.stats.get("diverged_refused", 0) + 1
                return
            if not err.retriable:
                self.violation(f"{group} refused with an error that does not name journalLocation")
                return
        if self.stats.get(f"{group}_accepted") or self.stats.get(f"{group}_touched"):
            return  # already a violation
        if driver.killed or err is not None or not self.stats.get(f"{group}_handed"):
            self.event(f"{group} (journal {kind}) ended before a refusal was due")
            return
        self.violation(
            f"{group} ran on a journal {kind} under a kept checkpoint, was handed its offsets "
            "and stopped without refusing (it must refuse with a JournalError naming "
            "journalLocation)"
        )

    # -- the end -------------------------------------------------------------------------------

    def _bodies(self, ids: list[str]) -> str:
        bodies = sorted(self.sqs.message(self._queue_of(m), m).body for m in ids)
        return ", ".join(bodies[:12]) + (" ..." if len(bodies) > 12 else "")

    def story(self, message_id: str) -> str:
        """What happened to one message: receives, deletes, the sink's batches that have it."""
        url = self._queue_of(message_id)
        m = self.sqs.message(url, message_id)
        events = [
            (d.at, f"received (receipt {d.receipt}, {d.kind})")
            for d in self.sqs.deliveries(url)
            if d.message_id == message_id
        ]
        events += [
            (d.at, f"deleted by {d.by}")
            for d in self.sqs.deletions(url)
            if d.message_id == message_id
        ]
        sink = [
            f"spark batch {k} x{sum(1 for x, _ in rows if x == message_id)}"
            for k, rows in [*self.sink_committed.items(), *self.sink_appended]
            if any(x == message_id for x, _ in rows)
        ]
        told = "; ".join(f"t={t:.3f} {what}" for t, what in sorted(events))
        return f"{m.body} ({message_id[:8]}): {told}; in the sink: {sink or 'nowhere'}"

    def _ghost_outside_the_window(self, message_id: str) -> bool:
        """True if a copy of ``message_id`` was a ghost (handed out after a delete) received
        more than duplicateWindow after that delete, on the true clock: no clock error is
        allowed (readers keep a batch's ids by the driver's range, never by a wall clock).
        Not while listings lag: the window is read by key."""
        url = self._queue_of(message_id)
        deletes = [d.at for d in self.sqs.deletions(url) if d.message_id == message_id]
        for d in self.sqs.deliveries(url):
            if d.message_id != message_id or d.kind != "ghost":
                continue
            before = [t for t in deletes if t <= d.at]
            if before and d.at - max(before) > self.config.duplicate_window:
                return True
        return False

    def _queue_of(self, message_id: str) -> str:
        for url in self.urls:
            try:
                self.sqs.message(url, message_id)
                return url
            except KeyError:
                continue
        return self.url

    def _live(self) -> list[Any]:
        return [m for url in self.urls for m in self.sqs.live(url)]

    def _drained(self) -> bool:
        live = self._live()
        batches = self._batch_files(leftovers=False)
        stragglers = [a for a in self.sched.actors if a.kind == "task" and not a.done]
        return not live and not batches and not stragglers and self._all_sent()

    def _leftovers(self) -> list[str]:
        """Keys a journal must not keep (_check_end): acknowledgement reports, drop sets and
        probes that a later acknowledgement or start collects."""
        return [k for k in self.store.keys() if not k.startswith(_KEPT)]

    def _batch_files(self, *, leftovers: bool) -> list[str]:
        """Files under ``batches/``: of batches not yet acknowledged, or (``leftovers``) of
        acknowledged ones, which attempts that outlived their batch wrote after its removal (a
        stalled straggler's part): the next start removes those (Coordinator), not a run."""
        keys = self.store.keys()
        acked = max((int(m.group(1)) for k in keys if (m := _ACKED_MARKER.match(k))), default=0)
        return [
            k
            for k in keys
            if (m := _BATCH_FILE.match(k)) and (int(m.group(1)) <= acked) == leftovers
        ]

    def _all_sent(self) -> bool:
        return len(self.sent) >= self.config.messages

    def _drain(self) -> None:
        """A last run with no faults or crashes, until the queue and the journal are empty."""
        self.draining = True
        if self.config.poison and self._poison_quarantined():
            self.stats["quarantined_before_drain"] = 1  # narrowed and quarantined under faults
        self.sqs.fault_rates = FaultRates()
        self.store.fault_rates = StoreFaultRates()
        # The unkind store ends with the faults (a lying one, if never refused, too).
        self.store.list_lag = 0.0
        self.store.honest_create = True
        self.sqs.scripted.clear()
        self.store.scripted.clear()
        self.log(f"{'spark':<22} == FINAL DRAIN")
        # A poison message fails one run per narrowing step: maxBatchAttempts (2), then at most
        # two per halving of a batch of up to 100 (the narrowed replay, and the suspect batch
        # that delivers the carried half), as docs/operations.md states.
        tries = 5 + (2 + 2 * 7 if self.config.poison else 0)
        # A straggler in a long stall (_long_stall) holds the drain until it goes on.
        start = max(self.clock.elapsed, self._long_stall_until)
        deadline = start + (20 * VISIBILITY + 600) * (tries // 5)
        daj = self.config.delete_after_journal and not self.config.change_delete_after_journal
        opts = RunOptions(
            4,
            100,
            daj,
            0,
            dead_letter=self.dead_letter,
            max_in_flight=self.config.max_in_flight,
            wait_time=self.config.wait_time,
            duplicate_window=self.config.duplicate_window,
        )
        for _ in range(tries):
            self.last_failure = None
            self._one_run(opts, drain=True)
            if self.last_failure is None:
                break
        else:
            self.violation(f"the final drain failed {tries} times, last: {self.last_failure}")
        if (
            self.config.unkind
            and (self._batch_files(leftovers=True) or self._leftovers())
            and self.last_failure is None
        ):
            # Attempts that outlived their batch (a stalled straggler) wrote files after it
            # was acknowledged and collected: one more start removes them (Coordinator, the
            # acknowledger's collection); what it leaves is judged (_check_end).
            self.log(f"{'spark':<22} == a restart collects what stragglers left behind")
            self._one_run(opts, drain=True)
        if self.clock.elapsed > deadline:
            self.violation("the final drain took longer than expected")

    def _dead_letter_ids(self) -> dict[str, int]:
        """The messages in the dead-letter queue, by source message id (a copy keeps its
        body, ``m<n>``: the n-th sent), with their copies; a body of no sent message is kept
        as it is (the end check reports it)."""
        if self.dead_letter is None:
            return {}
        out: dict[str, int] = {}
        for m in self.sqs.live(self.dead_letter):
            mid = self._source_id(m.body)
            out[mid] = out.get(mid, 0) + 1
        return out

    def _source_id(self, body: str) -> str:
        """The id of the sent message whose body is ``body`` (``m<n>``: the n-th sent)."""
        n = int(body[1:]) if re.fullmatch(r"m\d{4}", body) else -1
        return self.sent[n] if 0 <= n < len(self.sent) else body

    def _poison_quarantined(self) -> bool:
        return self._dead_letter_ids().get(self.poison_id or "", 0) > 0

    def _check_poison(self, counts: dict[str, int]) -> set[str]:
        """The poison message: never committed by the sink, in the dead-letter queue once.
        Any other message there is judged by ``_check_quarantined``; returns those excused."""
        assert self.dead_letter is not None
        if counts.get(self.poison_id or ""):
            self.violation(f"the poison message {self.poison_id} reached the sink")
        copies = self._dead_letter_ids().get(self.poison_id or "", 0)
        extra = self._extra_copies(self.poison_id or "", copies)
        if copies != 1 and extra is None:
            self.violation(
                f"the poison message {self.poison_id} is in the dead-letter queue {copies} times"
            )
        self.stats["quarantined"] = copies
        return self._check_quarantined(counts)

    def _check_quarantined(self, counts: dict[str, int]) -> set[str]:
        """Messages other than the poison one in the dead-letter queue. Each is a violation
        unless the simulation's record shows the policy's documented limit (sim/quarantines.py
        ``Quarantines.excuse``: docs/design.md, Limits, runs killed at a narrowing step
        quarantine the one message it narrowed to); an excused one must still be accounted for
        exactly once: in the dead-letter queue once, never in the sink. Returns the excused
        ids: the dead-letter queue holds them, so they are not lost."""
        excused: set[str] = set()
        for mid, copies in sorted(self._dead_letter_ids().items()):
            if mid == self.poison_id:
                continue
            if mid not in self.sent:
                self.violation(f"a message never sent in the dead-letter queue: {mid[:40]}")
                continue
            name = self._bodies([mid])
            why = self.quarantines.excuse(mid)
            if why is None:
                self.violation(
                    f"an innocent message {name} ({mid[:8]}) in the dead-letter queue: "
                    + self.quarantines.why_not(mid)
                )
                continue
            if copies != 1 and self._extra_copies(mid, copies) is None:
                self.violation(
                    f"the innocent message {name} is in the dead-letter queue {copies} times"
                )
            decided = self.quarantines.decisions[mid].epoch
            sunk = self.quarantines.sunk_at_the_step(mid)
            if (
                decided in self._sink_epochs(mid)
                and not self._narrowed_out_after_commit(mid)
                and not any(self._sink_holds(key, mid) for key in sunk)
            ):
                self.violation(
                    f"the quarantined innocent message {name} also reached the sink of the "
                    f"checkpoint that quarantined it (epoch {decided})"
                )
                self.violations.append(self.story(mid))
            elif counts.get(mid):
                # In the sink of another checkpoint (each checkpoint delivers once: a new one
                # delivers again what the old one's sink committed unacknowledged), or taken
                # by the sink with a batch whose later narrowed replay left it out (the
                # narrowing's own limit): the dead-letter queue holds this checkpoint's copy.
                self.stats["innocent_quarantined_after_sink"] = (
                    self.stats.get("innocent_quarantined_after_sink", 0) + 1
                )
            self.event(f"{name} in the dead-letter queue, excused: {why}")
            excused.add(mid)
        if excused:
            self.stats["innocent_quarantined"] = len(excused)
        return excused

    def _extra_copies(self, message_id: str, copies: int) -> str | None:
        """Why more than one copy of ``message_id`` may be in the dead-letter queue: only a
        standard one, after a run died between the send and its marker (sim/quarantines.py
        ``Quarantines.copies``); a FIFO one deduplicates the resend."""
        if copies <= 1 or self.config.fifo:
            return None
        why = self.quarantines.copies(message_id, copies)
        if why is not None:
            self.stats["dead_letter_copies_after_crash"] = (
                self.stats.get("dead_letter_copies_after_crash", 0) + copies - 1
            )
            self.event(f"{self._bodies([message_id])} in the dead-letter queue: {why}")
        return why

    def _sink_holds(self, key: int, message_id: str) -> bool:
        """The sink's batch ``key`` holds ``message_id`` (its first append, if not idempotent)."""
        if self.config.sink == "not_idempotent":
            rows = next((rows for k, rows in self.sink_appended if k == key), [])
        else:
            rows = self.sink_committed.get(key, [])
        return _holds(rows, message_id)

    def _sink_epochs(self, message_id: str) -> set[int]:
        """The checkpoints (epochs) whose sink holds ``message_id``."""
        if self.config.sink == "not_idempotent":
            first: dict[int, list[tuple[str, str]]] = {}
            for batch_id, rows in self.sink_appended:
                first.setdefault(batch_id, rows)
            held = first.items()
        else:
            held = self.sink_committed.items()
        return {key // 100_000 for key, rows in held if _holds(rows, message_id)}

    def _check_end(self) -> None:
        sent = set(self.sent)
        counts: dict[str, int] = {}
        first: dict[int, list[tuple[str, str]]] = {}
        if self.config.sink == "not_idempotent":
            for batch_id, rows in self.sink_appended:
                first.setdefault(batch_id, rows)
            delivered = [m for rows in first.values() for m, _ in rows]
        else:
            delivered = [m for rows in self.sink_committed.values() for m, _ in rows]
        for m in delivered:
            counts[m] = counts.get(m, 0) + 1
        if self.poison_id is not None:
            # Messages the dead-letter queue accounts for: the poison one, and innocent ones
            # the documented limit excuses (each judged there, and never in the sink).
            sent -= self._check_poison(counts)
            sent.discard(self.poison_id)
            counts.pop(self.poison_id, None)
        lost = sorted(sent - set(counts))
        # A new checkpoint on a used journal delivers again what the old checkpoint's sink
        # committed but the source had not acknowledged yet (docs/design.md, Limits): a copy
        # per checkpoint is the documented behaviour, two within one checkpoint are not.
        epochs: dict[str, list[int]] = {}
        for key, rows in (
            first.items() if self.config.sink == "not_idempotent" else self.sink_committed.items()
        ):
            for m, _ in rows:
                epochs.setdefault(m, []).append(key // 100_000)
        doubled = sorted(m for m, e in epochs.items() if len(e) > len(set(e)))
        # The duplicate window's documented limit (docs/design.md): a copy SQS hands out after
        # duplicateWindow from the delete (stalls make a seed's world slow enough). Counted, not
        # failed.
        excused = [m for m in doubled if self._ghost_outside_the_window(m)]
        if excused:
            self.stats["ghosts_outside_the_window"] = len(excused)
            doubled = [m for m in doubled if m not in excused]
        # poisonMessagePolicy=deadLetter's documented limit (docs/design.md, Limits): a run that
        # died after the sink committed a narrowed replay, before Spark's commit log, counts as
        # a failed attempt; the next replay narrows again and carries out messages the sink
        # already has. Counted, not failed: only messages a later replay of the same batch left
        # out after the sink committed them.
        renarrowed = [m for m in doubled if self._narrowed_out_after_commit(m)]
        if renarrowed:
            self.stats["poison_renarrowed_after_commit"] = len(renarrowed)
            doubled = [m for m in doubled if m not in renarrowed]
        across = [m for m, e in epochs.items() if len(set(e)) > 1 and m not in doubled]
        if across:
            self.stats["redelivered_to_new_checkpoint"] = len(across)
        unknown = sorted(set(counts) - set(self.sent))
        if lost:
            self.violations.append(f"LOST {len(lost)} messages: {self._bodies(lost)}")
            self.violations.extend(self.story(m) for m in lost[:2])
        if doubled:
            # Two copies in one batch's rows (two receivers journaled one message) is a
            # different fault from a message delivered by two batches: tell them apart.
            per_batch: dict[str, set[int]] = {}
            for batch_id, rows in (
                first.items()
                if self.config.sink == "not_idempotent"
                else self.sink_committed.items()
            ):
                for m, _ in rows:
                    per_batch.setdefault(m, set()).add(batch_id)
            within = all(len(per_batch.get(m, ())) == 1 for m in doubled)
            where = "within one batch" if within else "across batches"
            self.violations.append(
                f"DUPLICATED {where}: {len(doubled)} messages: {self._bodies(doubled)}"
            )
            self.violations.extend(self.story(m) for m in doubled[:2])
        if unknown:
            self.violations.append(f"delivered {len(unknown)} ids never sent: {unknown[:8]}")
        live = self._live()
        if live:
            self.violations.append(f"the queue ends with {len(live)} messages")
        keys = self.store.keys()
        left = [k for k in keys if k.startswith("batches/")]
        if left:
            self.violations.append(f"the journal ends with batch files: {left[:6]}")
        kept = sorted(
            key
            for (_, key), actor in self._straggler_entries.items()
            if actor.done and not actor.killed and actor.error is None
        )
        if self.config.store_faults or self.config.unkind:
            kept = []  # a failed read of the batch's state leaves them, by design
        if kept:
            self.violations.append(
                f"attempts that wrote into an acknowledged batch kept their files: {kept[:6]}"
            )
        # Bounded size: the journal ends empty but for what a journal always holds (its queue,
        # its state markers, the lease, the last metrics, dedupe records within their window).
        # Drop sets, acknowledgement reports and probes of dead drivers must have gone.
        # quarantine/: the record of each message sent to the dead-letter queue (spark-sqs
        # inspect lists them), one pair per poison message; queues/: every queue the journal
        # was used with (several queues in one stream), like _meta.json; window/: the duplicate
        # window's segments, until the acknowledgement after their expiry collects them.
        extra = self._leftovers()
        if extra:
            self.violations.append(f"the journal ends with {len(extra)} leftovers: {extra[:6]}")
        leases = [k for k in keys if k.startswith("lease/")]
        # Fences (journal/lease.py): one per takeover from an owner that had not released, kept
        # for good, each named in the records of every later owner.
        named = {
            lease_key(int(seq))
            for k in leases
            for seq in json.loads(self.store.peek(k) or b"{}").get("fences", ())
        }
        fences = [k for k in leases if k in named]
        takeovers = sum(
            1
            for owner, previous in self.lease_previous.items()
            if previous is not None and previous != owner
        )
        if len(fences) > takeovers:
            self.violations.append(
                f"the journal ends with {len(fences)} lease fences for {takeovers} takeovers"
            )
        # RECORDS_KEPT below the newest, the newest, a released record after it, the fences.
        bound = RECORDS_KEPT + 1 + len(fences)
        if len(leases) > bound:
            self.violations.append(
                f"the journal ends with {len(leases)} lease records (bound {bound})"
            )
        # Reported as a finding (storage, not correctness): markers a crash left behind.
        markers = [k for k in keys if k.startswith("state/")]
        # The newest planned markers (PLANNED_MARKERS_KEPT), the newest acked ones
        # (ACKED_MARKERS_KEPT: they hold the counters), the initial one.
        bound = (self.config.markers_kept or PLANNED_MARKERS_KEPT) + ACKED_MARKERS_KEPT + 1
        if len(markers) > bound:
            self.findings.append(f"state markers: {len(markers)} kept (bound {bound})")
        self.stats["sent"] = len(sent)
        if self.sqs.lapsed_kept:
            self.stats["lapsed_deletes_kept"] = self.sqs.lapsed_kept


_PROBE_KEY = re.compile(r"_probe/[0-9a-f]{32}")
# A stall of a receiver between its last handle check and the landing of its entry or part
# write is the protocol's documented residual window (docs/design.md, "Stalls"): a journal
# write that outlasts half of visibilityTimeout. The unkind world stalls tasks anywhere else.
_RESIDUAL_WRITE = re.compile(r"^store\.create batches/\d+/\d+\.(?:part-\d+\.)?arrow")
# A receiver's window segment, created after its check that its batch is live (_long_stall).
_WINDOW_SEGMENT = re.compile(r"^store\.create window/\d+/r\d+-\d+\.arrow")
# A read of a batch's plan (_replan_pause).
_PLAN_READ = re.compile(r"^store\.read batches/(\d+)/_plan\.json")
# What a journal keeps for good: _meta.json, its state markers, the lease, the last metrics,
# dedupe records within their window (and, by design, quarantine/, one record per message sent
# to the dead-letter queue, queues/, every queue the journal was used with, window/, until the
# acknowledgement after their expiry collects them); batches/ is judged apart.
_KEPT = (
    *("_meta.json", "state/", "lease/", "metrics/", "dedupe/", "batches/"),
    # aliases/: one per Spark 4.0/4.1 run refused on a diverged journal, collected at a start
    # once the batch after the one it stands for is acknowledged.
    *("quarantine/", "queues/", "window/", "aliases/"),
)
_ACKED_MARKER = re.compile(r"^state/acked-(\d+)$")
_BATCH_FILE = re.compile(r"^batches/(\d+)/")
# What an attempt writes into its batch and must remove itself if the batch was finished by
# then: its entry, its poison attempt record.
_ENTRY_FILE = re.compile(r"^batches/\d+/(\d{5,}\.arrow|attempts/[^/]+\.json)$")
# An entry (not a part): what a receiver reads on a replay and writes when it journals.
_ENTRY_ONLY = re.compile(r"^batches/(\d+)/\d{5,}\.arrow$")
_TOUCH = frozenset({"read", "create"})
_SENT_MARKER = re.compile(r"^quarantine/\d+-(.+)\.sent$")
_GONE_KEY = re.compile(r"^batches/(\d+)/(_retired|_plan)\.json$")
_LEASE_KEY = re.compile(r"^lease/(\d{12})\.json$")
# SQS calls that receive, acknowledge, delete or release messages.
_MESSAGE_CALLS = frozenset(
    {
        "receive_message",
        "delete_message",
        "delete_message_batch",
        "change_message_visibility",
        "change_message_visibility_batch",
    }
)


class SinkFailed(Exception):
    """The user's sink raised on a batch (Config.poison): the query fails, nothing commits."""


class TaskSetFailed(Exception):
    """A task failed ``MAX_TASK_FAILURES`` times: Spark fails the job, and the query."""


def run_seed(
    seed: int,
    *,
    fifo: bool | None = None,
    trace: bool = False,
    configure: Callable[[Config], None] | None = None,
) -> Result:
    config = Config.from_seed(seed, fifo=fifo)
    if configure is not None:
        configure(config)
    # The simulation silences the library's logs for speed; whoever runs it gets them back.
    library = logging.getLogger("spark_sqs")
    level = library.level
    try:
        return SparkSim(config, trace=trace).run()
    finally:
        library.setLevel(level)


def _holds(rows: list[tuple[str, str]], message_id: str) -> bool:
    return any(m == message_id for m, _ in rows)


__all__ = ["Config", "Crash", "Result", "SparkSim", "run_seed"]
