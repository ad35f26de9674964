"""The driver's offsets and planning (``spark_sqs.driver.coordinator.Coordinator`` behind the
reader of ``spark_sqs/source.py``), driven through the call orders Spark uses, without Spark.

``Query`` below plays Spark's micro-batch loop around a real ``SqsStreamReader``: a checkpoint
(offset log and commit log) that outlives restarts, ``initialOffset``, ``latestOffset`` (Spark
4.0/4.1: no arguments; 4.2+: ``(start, limit)`` with ``getDefaultReadLimit()``), the offset log
write, ``commit`` of the previous batch, ``partitions(start, end)``, the tasks (``read`` on
pickled partitions) and the commit log; and, on restart, the replay of a logged but uncommitted
batch with ``partitions`` alone. SQS, the journal store and the clock are the in-memory
simulations of sim/. What ``test_coordinator_replay.py`` beside this file,
``tests/unit/test_attempts.py`` (a replay's stored plan, orphan adoption interrupted by a crash)
and ``tests/unit/acknowledgement/test_assigned.py`` (acknowledgement by the next batch's
receivers) check on ``Coordinator`` alone is not repeated.
"""

from __future__ import annotations

import json
import pickle
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest

from sim import SimClock, SimSqs
from sim.store import SimJournalStore
from spark_sqs.driver.coordinator import Coordinator
from spark_sqs.driver.flow_control import ReadMaxRows
from spark_sqs.driver.planning import MESSAGES_PER_RECEIVER
from spark_sqs.executor.receiver import read_partition
from spark_sqs.journal import Journal
from spark_sqs.journal.plans import plan_key
from spark_sqs.options import SqsOptions
from spark_sqs.source import SqsStreamReader
from tests.fakes import HookedStore

JOURNAL = "s3://bucket/journal"
SPARK_VERSIONS = ("4.0", "4.2")
MAX_TRIGGERS = 20
ACKED_1 = (
    "state/acked-000000000001"  # a bound on every loop of triggers: a source that never idles fails
)


@dataclass
class Checkpoint:
    """What Spark keeps of a query between runs: its offset log and commit log."""

    offsets: dict[int, tuple[str, str]] = field(default_factory=dict)
    commits: set[int] = field(default_factory=set)


class World:
    """One simulated queue and journal store on one simulated clock."""

    def __init__(self) -> None:
        self.clock = SimClock()
        self.sqs = SimSqs(seed=1, clock=self.clock)
        self.store = SimJournalStore(clock=self.clock)
        self.url = self.sqs.create_queue(QueueName="orders")["QueueUrl"]
        self.sent: list[str] = []

    def send(self, count: int) -> list[str]:
        bodies = [f"m{len(self.sent) + i}" for i in range(count)]
        for body in bodies:
            self.sqs.send_message(QueueUrl=self.url, MessageBody=body)
        self.sent += bodies
        return bodies

    def options(self, **extra: Any) -> SqsOptions:
        raw = {"queueUrl": self.url, "journalLocation": JOURNAL}
        raw.update({k: str(v) for k, v in extra.items()})
        return SqsOptions.parse(raw, env={})

    def journal(self, options: SqsOptions) -> Journal:
        return Journal(JOURNAL, options, store=self.store)

    def reader(self, per_receiver: int = 1, **extra: Any) -> SqsStreamReader:
        """The reader Spark creates at query start, its coordinator on the simulated services
        (``Coordinator.start`` would connect to AWS). ``per_receiver``: visible messages per
        planned receiver (``planning.receivers_needed``); these tests use a few messages, and
        1 plans a receiver for each, up to numPartitions."""
        options = self.options(**extra)
        reader = SqsStreamReader(options)
        reader._driver = Coordinator(
            options,
            self.sqs.client(),
            self.url,
            self.journal(options),
            clock=self.clock.monotonic,
            wall_clock=self.clock.time,
            sleep=self.clock.sleep,
            run_heartbeat=False,
            parallelism=1,
            messages_per_receiver=per_receiver,
        )
        return reader

    def live(self) -> int:
        """Messages still in the queue, visible or in flight (not deleted)."""
        return len(self.sqs.live(self.url))


class Query:
    """One run of a streaming query: Spark's driver loop around one reader."""

    def __init__(
        self, world: World, spark: str, checkpoint: Checkpoint | None = None, **options: Any
    ) -> None:
        self.world = world
        self.spark = spark
        self.checkpoint = checkpoint or Checkpoint()
        self.reader = world.reader(**options)
        self.delivered: list[str] = []  # bodies, every attempt of every batch, in order
        self.rows: dict[int, list[str]] = {}  # bodies by batch id, last attempt

    def start(self) -> list[str]:
        """Query start: a logged batch missing from the commit log is replayed first, with
        ``partitions`` alone (no ``latestOffset``). Returns its rows (empty if none)."""
        logged = self.checkpoint.offsets
        last = max(logged, default=None)
        if last is None or last in self.checkpoint.commits:
            return []
        start, end = logged[last]
        return self._run_batch(last, start, end)

    def start_offset(self, batch_id: int) -> str:
        if batch_id == 0:
            return json.dumps(self.reader.initialOffset())
        return self.checkpoint.offsets[batch_id - 1][1]

    def latest(self, start: str) -> str:
        if self.spark == "4.0":
            return json.dumps(self.reader.latestOffset())
        limit = self.reader.getDefaultReadLimit()
        return json.dumps(self.reader.latestOffset(json.loads(start), limit))

    def trigger(self, run_tasks: bool = True) -> list[str] | None:
        """One trigger: None when ``latestOffset`` answered ``start`` (no batch), else the rows
        of the new batch. ``run_tasks=False``: the driver dies after ``partitions``."""
        batch_id = max(self.checkpoint.offsets, default=-1) + 1
        start = self.start_offset(batch_id)
        end = self.latest(start)
        if end == start:
            # Idle: the next trigger comes after a while, when the queue is polled again.
            self.world.clock.advance(self.reader.options.queue_poll_interval)
            return None
        self.checkpoint.offsets[batch_id] = (start, end)
        if batch_id - 1 in self.checkpoint.offsets:
            self.reader.commit(json.loads(self.checkpoint.offsets[batch_id - 1][1]))
        return self._run_batch(batch_id, start, end, run_tasks)

    def _run_batch(self, batch_id: int, start: str, end: str, run_tasks: bool = True) -> list[str]:
        partitions = self.reader.partitions(json.loads(start), json.loads(end))
        self.planned = [(p.receiver, p.max_messages) for p in partitions]
        if not run_tasks:
            return []
        rows = [body for p in partitions for body in self.world_read(p)]
        self.rows[batch_id] = rows
        self.delivered += rows
        self.checkpoint.commits.add(batch_id)
        return rows

    def world_read(self, partition: Any) -> list[str]:
        """One task: ``read`` on a pickled copy of the partition and of another reader, as
        on an executor (the receiver code on the simulated services)."""
        shipped = pickle.loads(pickle.dumps(partition))
        pickle.loads(pickle.dumps(self.reader))  # the executor's copy must pickle
        world = self.world
        batches = read_partition(
            shipped,
            client_factory=world.sqs.client,
            journal=world.journal(shipped.options),
            clock=world.clock.monotonic,
            wall_clock=world.clock.time,
            sleep=world.clock.sleep,
        )
        return [b for batch in batches for b in pa.Table.from_batches([batch])["body"].to_pylist()]

    def run_until_idle(self, idle: int = 2) -> list[str]:
        """Triggers until ``idle`` in a row start no batch; the rows they delivered."""
        rows: list[str] = []
        quiet = 0
        for _ in range(MAX_TRIGGERS):
            if quiet == idle:
                return rows
            got = self.trigger()
            quiet = quiet + 1 if got is None else 0
            rows += got or []
        raise AssertionError(f"the query never idled in {MAX_TRIGGERS} triggers")

    def stop(self) -> None:
        """``query.stop()``: SIGTERM; Spark calls no ``stop()``, the reader is just gone."""
        assert self.reader._driver is not None
        self.reader._driver.heartbeat.stop()


@pytest.fixture
def world() -> World:
    return World()


def assert_each_once(delivered: list[str], sent: list[str]) -> None:
    doubled = sorted(b for b, n in Counter(delivered).items() if n > 1)
    assert doubled == [], "delivered twice"
    assert sorted(delivered) == sorted(sent), "lost or unknown"


# -- latestOffset ------------------------------------------------------------------------------


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_latest_offset_on_an_empty_queue_starts_no_batch(world: World, spark: str) -> None:
    query = Query(world, spark)
    for _ in range(3):
        assert query.trigger() is None
    assert query.checkpoint.offsets == {}
    # Nothing was received, and no batch number was used up.
    assert world.sqs.calls.get("ReceiveMessage", 0) == 0
    assert query.reader._driver is not None
    assert query.reader._driver.markers.planned == 0


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_latest_offset_with_messages_starts_a_batch_that_delivers_each_once(
    world: World, spark: str
) -> None:
    world.send(25)
    query = Query(world, spark, numPartitions=2)
    first = query.trigger()
    assert first is not None and len(first) == 25
    assert query.checkpoint.offsets[0] == ('{"batch": 0}', '{"batch": 1}')
    # The next trigger finds the queue empty: no batch, and the batch Spark has committed is
    # deleted from the queue by the driver itself (no next batch's receivers will).
    assert query.trigger() is None
    assert world.live() == 0
    assert_each_once(query.delivered, world.sent)


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_a_limit_caps_every_batch_and_the_rest_follows_in_later_batches(
    world: World, spark: str
) -> None:
    """maxMessagesPerTrigger: Spark 4.2+ hands it back as ``ReadMaxRows`` from
    ``getDefaultReadLimit``, Spark 4.0/4.1 hand no limit and the option applies."""
    world.send(25)
    query = Query(world, spark, numPartitions=3, maxMessagesPerTrigger=10)
    sizes = []
    while (rows := query.trigger()) is not None:
        assert len(sizes) < MAX_TRIGGERS, "never idled"
        sizes.append(len(rows))
        # The receivers share the limit: their sum is it, never more.
        assert sum(limit for _, limit in query.planned) == 10
        assert [r for r, _ in query.planned] == [0, 1, 2]
    assert sizes == [10, 10, 5]
    assert_each_once(query.delivered, world.sent)
    assert world.live() == 0


@pytest.mark.skipif(ReadMaxRows is None, reason="read limits exist from Spark 4.2")
def test_a_smaller_read_limit_from_spark_4_2_wins_over_the_option(world: World) -> None:
    world.send(20)
    reader = world.reader(numPartitions=2, maxMessagesPerTrigger=100)
    end = reader.latestOffset(reader.initialOffset(), ReadMaxRows(4))
    parts = reader.partitions(reader.initialOffset(), end)
    assert [(p.receiver, p.max_messages) for p in parts] == [(0, 2), (1, 2)]


# -- partitions: replays ----------------------------------------------------------------------


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_a_replay_after_a_restart_returns_the_first_attempt_s_receivers_limits_and_rows(
    world: World, spark: str
) -> None:
    """Batch 1 ran (its rows are journaled) but the driver died before Spark's commit log
    had it. The restart has other numPartitions and limits, and more messages are waiting:
    the replay plans and delivers exactly what the first attempt did (a write-then-skip sink
    keeps either attempt's rows), and the new options apply from the next batch."""
    world.send(12)
    first = Query(world, spark, numPartitions=2, maxMessagesPerTrigger=8)
    rows = first.trigger()
    assert rows is not None and len(rows) == 8
    planned = first.planned
    first.checkpoint.commits.discard(0)  # the sink never committed: the batch is replayed
    first.stop()
    world.send(10)

    again = Query(world, spark, first.checkpoint, numPartitions=4, maxMessagesPerTrigger=100)
    replayed = again.start()
    assert again.planned == planned == [(0, 4), (1, 4)]
    assert replayed == rows
    following = again.run_until_idle()
    assert sum(limit for _, limit in again.planned) == 100 and len(again.planned) == 4
    assert_each_once(rows + following, world.sent)
    assert world.live() == 0


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_a_replay_of_a_batch_whose_tasks_never_ran_receives_under_its_stored_plan(
    world: World, spark: str
) -> None:
    """The driver died after ``partitions`` but before any task journaled: the replay keeps
    the stored plan (receivers and limits) although the options changed, and its receivers
    receive then."""
    world.send(9)
    first = Query(world, spark, numPartitions=3, maxMessagesPerTrigger=6)
    first.trigger(run_tasks=False)
    planned = first.planned
    first.stop()

    again = Query(world, spark, first.checkpoint, numPartitions=1, maxMessagesPerTrigger=50)
    replayed = again.start()
    assert again.planned == planned == [(0, 2), (1, 2), (2, 2)]
    assert len(replayed) == 6
    assert_each_once(replayed + again.run_until_idle(), world.sent)
    assert world.live() == 0


# -- partitions: orphaned batches -------------------------------------------------------------


def orphan_of_a_dead_run(world: World, spark: str) -> tuple[Checkpoint, list[str], list[str]]:
    """A run whose batch 0 Spark committed, and whose batch 1 was planned and received (its
    rows journaled) but never reached the offset log: the driver died between
    ``latestOffset`` and the offset log write. Returns the checkpoint, batch 0's rows and the
    orphan's."""
    world.send(10)
    dead = Query(world, spark, numPartitions=2, maxMessagesPerTrigger=4)
    committed = dead.trigger()
    assert committed is not None and len(committed) == 4
    batch_id = 1
    start = dead.start_offset(batch_id)
    end = dead.latest(start)
    assert end != start
    # Spark never logged [start, end]: these partitions and their tasks belong to nobody.
    parts = dead.reader.partitions(json.loads(start), json.loads(end))
    orphan = [body for p in parts for body in dead.world_read(p)]
    assert len(orphan) == 4
    dead.stop()
    return dead.checkpoint, committed, orphan


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_an_orphaned_batch_s_journaled_rows_are_delivered_by_the_next_batch(
    world: World, spark: str
) -> None:
    checkpoint, committed, orphan = orphan_of_a_dead_run(world, spark)
    assert 1 not in checkpoint.offsets

    again = Query(world, spark, checkpoint, numPartitions=2, maxMessagesPerTrigger=4)
    assert again.start() == [], "nothing to replay: Spark's last batch is committed"
    delivered = again.run_until_idle()
    # The orphan's 4 messages reach the sink once, with batch 1 of this checkpoint (which
    # adopts them as well as receiving), and no message is lost or doubled.
    assert set(orphan) <= set(delivered)
    assert_each_once(committed + delivered, world.sent)
    assert world.live() == 0
    assert world.journal(again.reader.options).batches.list() == []


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_an_orphan_on_an_empty_queue_still_gets_a_batch(world: World, spark: str) -> None:
    """Spark 4.2+ passes ``start``, so the orphan is known in ``latestOffset``; Spark 4.0/4.1
    pass nothing, and every journaled batch counts as unsettled until ``partitions(start, end)``
    tells which Spark committed. Either way a batch starts with nothing visible in SQS."""
    checkpoint, committed, orphan = orphan_of_a_dead_run(world, spark)
    # Another consumer takes the two messages left: nothing is visible in SQS any more.
    taken = world.sqs.receive_message(QueueUrl=world.url, MaxNumberOfMessages=10)["Messages"]
    for m in taken:
        world.sqs.delete_message(QueueUrl=world.url, ReceiptHandle=m["ReceiptHandle"])
    assert len(taken) == 2 and world.sqs.visible(world.url) == []

    again = Query(world, spark, checkpoint, numPartitions=2)
    rows = again.trigger()
    assert rows is not None and sorted(rows) == sorted(orphan)
    assert again.trigger() is None
    assert world.live() == 0
    assert_each_once(committed + rows + [m["Body"] for m in taken], world.sent)


# -- commit, then the next latestOffset -------------------------------------------------------


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_commit_then_the_next_latest_offset_acknowledges_the_committed_batch(
    world: World, spark: str
) -> None:
    world.send(12)
    query = Query(world, spark, numPartitions=2, maxMessagesPerTrigger=6)
    query.trigger()
    assert world.live() == 12  # batch 0 is not committed yet: nothing is deleted
    query.trigger()  # latestOffset, offset log, commit(batch 0), partitions, tasks
    assert world.live() == 6, "batch 0's messages are gone once batch 1 ran"
    assert query.trigger() is None  # latestOffset with batch 1 committed, queue empty
    assert world.live() == 0
    state = world.journal(query.reader.options).state.read()
    assert state.acked_batch == state.planned_batch == 2
    query.stop()

    # A restart delivers nothing again.
    again = Query(world, spark, query.checkpoint)
    assert again.start() == []
    assert again.run_until_idle() == []
    assert_each_once(query.delivered, world.sent)


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_a_committed_batch_whose_acknowledgement_died_with_its_driver_is_not_redelivered(
    world: World, spark: str
) -> None:
    """Spark committed the last batch; the driver died before any later ``latestOffset``.
    4.2+ knows from ``start`` that it is committed and deletes it at once; 4.0/4.1 learn it
    only in ``partitions`` of a next batch, which then delivers none of it."""
    world.send(5)
    first = Query(world, spark, numPartitions=2)
    rows = first.trigger()
    assert rows is not None and len(rows) == 5
    first.stop()
    assert world.live() == 5

    again = Query(world, spark, first.checkpoint, numPartitions=2)
    assert again.start() == []
    assert again.run_until_idle() == []
    assert world.live() == 0
    assert_each_once(first.delivered, world.sent)


class DriverKilled(BaseException):
    """The driver process dies here (nothing of it runs on)."""


def test_a_batch_acknowledged_just_before_its_driver_died_is_not_adopted_by_a_new_checkpoint(
    world: World,
) -> None:
    """The driver deletes batch 1 itself (idle queue), creates ``state/acked-1`` and dies before
    it removes the batch's plan; the store's listings lag (the simulation's lagging store), so
    the next start's LIST of ``state/`` misses that marker. A query with a new checkpoint on
    the journal must not take batch 1 for pending: it would adopt it as an orphan and deliver
    its messages a second time. (Spark 4.2+: its idle ``latestOffset`` knows the batch is
    committed and deletes it at once.)"""
    sim_store = world.store
    plan = plan_key(1)

    def die_before_the_plan_s_removal(method: str, key: str) -> None:
        if method == "delete" and key == plan and sim_store.read(ACKED_1) is not None:
            raise DriverKilled

    dying = HookedStore(sim_store, before=die_before_the_plan_s_removal)
    world.store = dying  # type: ignore[assignment]
    world.send(5)
    first = Query(world, "4.2", numPartitions=2)
    rows = first.trigger()
    assert rows is not None and len(rows) == 5
    sim_store.list_lag = 10_000_000.0  # keys created from here on stay out of listings
    with pytest.raises(DriverKilled):
        first.trigger()
    assert world.live() == 0, "batch 1 was deleted"
    assert sim_store.read(plan) is not None
    assert ACKED_1 not in sim_store.list("state")

    world.store = sim_store
    again = Query(world, "4.2", Checkpoint(), numPartitions=2)
    assert again.start() == []
    delivered = again.run_until_idle()

    assert_each_once(first.delivered + delivered, world.sent)
    assert world.live() == 0


# -- the visible count: a batch holds what was there when it was planned ----------------------


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_a_batch_takes_what_was_visible_when_planned_not_what_arrives_after(
    world: World, spark: str
) -> None:
    world.send(25)
    query = Query(world, spark, numPartitions=3)
    batch_id = 0
    start = query.start_offset(batch_id)
    end = query.latest(start)
    query.checkpoint.offsets[batch_id] = (start, end)
    partitions = query.reader.partitions(json.loads(start), json.loads(end))
    plan = world.journal(query.reader.options).plans.read(json.loads(end)["batch"])
    assert plan is not None
    assert [(r.receiver, r.visible) for r in plan.receivers] == [(0, 10), (1, 10), (2, 5)]
    # A producer goes on sending after the driver counted: the receivers stop at their parts
    # and one call's worth each (asked for without waiting), not at the 10000 they may take.
    world.send(200)
    rows = [body for p in partitions for body in query.world_read(p)]
    assert 25 <= len(rows) <= 25 + 3 * 10
    query.checkpoint.commits.add(batch_id)
    query.delivered += rows
    # The next batch's count includes the rest; idle, every message was delivered once.
    query.run_until_idle()
    assert_each_once(query.delivered, world.sent)
    # Why each receiver stopped is in the counters of its batch.
    metrics = {m["batch"]: m for m in world.journal(query.reader.options).metrics.read()}
    first = metrics[json.loads(end)["batch"]]["receiveStops"]
    assert sum(first.values()) == 3
    assert set(first) <= {"visible when planned", "caught up", "empty receive"}


# -- a long run ----------------------------------------------------------------------------------


def driver_state(driver: Coordinator) -> dict[str, int]:
    """The sizes of everything the driver keeps per batch or per message."""
    from spark_sqs.journal import drops

    ack, hb, guard = driver.acknowledger, driver.heartbeat, driver.guard
    return {
        "guard.handed_out": len(guard.handed_out),
        "guard.planned": len(guard.planned),
        "guard.idle": len(guard.idle),
        "coordinator._planned_at": len(driver._planned_at),
        "coordinator._limits": len(driver._limits),
        "reporter.replayed": len(driver.reporter.replayed),
        **{
            f"acknowledger.{name}": len(getattr(ack, name))
            for name in (
                "_pending", "_receivers", "_extend_by", "_limits", "_deleting", "_inherited",
                "_inherited_ids", "_assigned", "_reporters", "_report_writers", "_valid_until",
                "dedupe",
            )
        },
        **{
            f"heartbeat.{name}": len(getattr(hb, name))
            for name in (
                "_tracked", "_seen_receivers", "_receivers", "_self_extended", "_planned_at",
                "_discover_after", "_lost", "_held", "_warned",
            )
        },
        "drop sets cached": len(drops._DROPS_CACHE),
    }  # fmt: skip


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_a_long_run_keeps_no_state_that_grows_with_the_batches(world: World, spark: str) -> None:
    query = Query(world, spark, numPartitions=2, maxMessagesPerTrigger=2)
    seen = {}
    for batch in range(60):
        world.send(2)
        assert query.trigger() is not None
        if batch in (19, 59):
            assert query.reader._driver is not None
            seen[batch] = driver_state(query.reader._driver)
    query.run_until_idle()

    assert seen[59] == seen[19]
    assert max(seen[59].values()) <= 8, seen[59]
    assert_each_once(query.delivered, world.sent)


# -- how many receivers a new batch plans -------------------------------------------------------


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_a_trickle_plans_one_receiver_which_deletes_every_entry_of_a_backlog_batch(
    world: World, spark: str
) -> None:
    """A backlog is planned over numPartitions receivers; the trickle after it over one, which
    is still given every entry of the committed backlog batch to delete."""
    world.send(3 * MESSAGES_PER_RECEIVER)
    query = Query(world, spark, per_receiver=MESSAGES_PER_RECEIVER, numPartitions=3)
    backlog = query.trigger()
    assert backlog is not None and len(backlog) == 3 * MESSAGES_PER_RECEIVER
    assert [r for r, _ in query.planned] == [0, 1, 2]
    world.send(5)
    trickle = query.trigger()
    assert trickle is not None and len(trickle) == 5
    assert [r for r, _ in query.planned] == [0]
    # Journal batches count from 1: the trickle's plan is batch 2's.
    plan = world.journal(query.reader.options).plans.read(2)
    assert plan is not None
    assert sorted((a.batch, a.receiver, a.by) for a in plan.acks) == [
        (1, 0, 0),
        (1, 1, 0),
        (1, 2, 0),
    ]
    query.run_until_idle()
    assert_each_once(query.delivered, world.sent)
    assert world.live() == 0
