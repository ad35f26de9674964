"""Executor-side first visibility extension (executor/extension.py): when batches run slow
relative to visibilityTimeout, each receiver extends its own journaled messages and records it
in a marker; the driver's heartbeat then reads no entry, and bounds the marker's reach by its
own clock (the batch's planning time plus the plan's extend_by). Driven
through the real coordinator, receivers and heartbeat on a local journal with counted
requests; the clocks are fake, so nothing waits."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_sqs.driver.coordinator import Coordinator
from spark_sqs.executor.extension import extend_journaled
from spark_sqs.executor.receiver import read_partition
from spark_sqs.journal import BatchPlan, Journal, LocalStore, ReceiverPlan
from spark_sqs.journal.entries import RECEIVED_AT
from spark_sqs.schema import RECEIPT_HANDLE, messages_to_table
from tests.factories import QUEUE_URL, make_options, sqs_message
from tests.fakes import Clock, FakeSqs, HookedStore, client_error

VISIBILITY = 30
# Real time: the deletes of acknowledgement compare handle deadlines with time.time().
NOW = float(int(time.time()))


class QueueSqs(FakeSqs):
    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        return {"Attributes": {name: str(len(self.queue)) for name in AttributeNames}}


class World:
    def __init__(self, tmp_path: Path, **extra: str) -> None:
        location = str(tmp_path / "journal")
        self.options = make_options(
            location,
            numPartitions="3",
            maxMessagesPerTrigger="9",
            waitTimeSeconds="0",
            queuePollInterval="0.01",
            visibilityTimeout=str(VISIBILITY),
            **extra,
        )
        self.mono, self.wall = Clock(1000.0), Clock(NOW)
        self.store = HookedStore(LocalStore(location))
        self.sqs = QueueSqs(available=45)
        self.journal = Journal(location, self.options)
        self.state = Coordinator(
            self.options,
            self.sqs,
            QUEUE_URL,
            Journal(location, self.options, store=self.store),
            clock=self.mono,
            wall_clock=self.wall,
            run_heartbeat=False,
            # Three receivers for these few messages: what one receiver does, the others too.
            messages_per_receiver=1,
        )

    def advance(self, seconds: float) -> None:
        self.mono.now += seconds
        self.wall.now += seconds

    def batch(self, committed: int) -> list[Any]:
        return self.state.plan({"batch": committed}, self.state.latest_offset({"batch": committed}))

    def run(self, parts: list[Any], sqs: Any = None) -> list[str]:
        out: list[str] = []
        for part in parts:
            for rows in read_partition(
                part,
                client_factory=lambda: sqs or self.sqs,
                journal=self.journal,
                wall_clock=self.wall,
                sleep=lambda s: None,
            ):
                out.extend(pa.Table.from_batches([rows]).column("messageId").to_pylist())
        return out

    def extensions(self, since: int = 0) -> list[dict[str, Any]]:
        return [e for a, es in self.sqs.batch_calls[since:] for e in es if a == "visibility"]


def _receivers(journal: Journal, batch: int) -> list[int]:
    plan = journal.plans.read(batch)
    assert plan is not None
    return [r.receiver for r in plan.receivers]


def _markers(journal: Journal, batch: int, receivers: list[int] | None = None) -> dict[int, float]:
    """Receiver -> the deadline its marker's body records (the executor's clock)."""
    out = {}
    for r in receivers if receivers is not None else _receivers(journal, batch):
        data = journal.store.read(f"batches/{batch:012d}/{r:05d}.extended")
        if data is not None:
            out[r] = float(json.loads(data)["until"])
    return out


@pytest.fixture
def world(tmp_path: Path) -> Any:
    w = World(tmp_path)
    yield w
    w.state.close()


def test_a_fast_pipeline_pays_no_extension(world: World) -> None:
    world.run(world.batch(0))
    world.advance(VISIBILITY / 3 - 1)
    world.run(world.batch(1))
    assert world.journal.plans.read(2).extend_by == 0
    assert world.extensions() == []


def test_after_a_slow_batch_receivers_extend_and_the_driver_reads_no_entry(world: World) -> None:
    parts = _slow_plan(world)  # batch 2 took more than a third of the timeout
    plan = world.journal.plans.read(3)
    assert plan is not None and plan.extend_by == world.state.heartbeat.extend_by == 900
    got = world.run(parts)
    assert len(got) == 9
    extended = world.extensions()
    assert len(extended) == 9
    assert {e["VisibilityTimeout"] for e in extended} == {900}
    receivers, markers = _receivers(world.journal, 3), _markers(world.journal, 3)
    assert sorted(markers) == receivers and len(receivers) == 3
    assert set(markers.values()) == {int(NOW + VISIBILITY / 3 + 1) + 900}

    # The heartbeat, once batch 3 could need extending: each receiver's marker read by key,
    # no entry of it read, none of its messages extended (batches 1 and 2, planned before the
    # flag, are the driver's).
    world.store.calls.clear()
    world.advance(VISIBILITY)
    calls = len(world.sqs.batch_calls)
    world.state.heartbeat.tick()
    mine = [(m, k) for m, k in world.store.calls if k.startswith("batches/000000000003")]
    assert sorted(mine) == [("read", f"batches/000000000003/{r:05d}.extended") for r in receivers]
    handles = {e["ReceiptHandle"] for _, es in world.sqs.batch_calls[calls:] for e in es}
    assert not handles & {e["ReceiptHandle"] for e in extended}
    held = world.state.heartbeat.snapshot(3).held_until
    assert sorted(held) == receivers
    # The next batch's receivers know the handles are valid that long: nothing uncertain.
    world.run(world.batch(3))
    plan4 = world.journal.plans.read(4)
    assert plan4 is not None and {a.batch for a in plan4.acks} == {3}
    # held_until is the driver's monotonic clock; the plan shows it as wall time.
    offset = world.wall.now - world.mono.now
    assert min(a.valid_until for a in plan4.acks) == pytest.approx(min(held.values()) + offset)
    world.state.latest_offset({"batch": 4})
    assert world.journal.state.read().acked_batch >= 3
    assert not set(got) & set(
        world.journal.dedupe.read(world.mono.now, world.options.dedupe_window)
    )


def test_a_slow_start_up_batch_costs_the_next_no_extension(world: World) -> None:
    """The run's first batch waits for the query to start (workers, imports, clients): its
    time says nothing of the pipeline's pace, and flagging the next batch slow for it cost that
    batch one ChangeMessageVisibilityBatch per 10 messages."""
    world.run(world.batch(0))
    world.advance(VISIBILITY / 3 + 1)  # batch 1, the run's first, took a third of the timeout
    parts = world.batch(1)
    assert world.journal.plans.read(2).extend_by == 0
    assert len(world.run(parts)) == 9
    assert world.extensions() == []
    assert not [a for a, _ in world.sqs.batch_calls if a == "visibility"]
    assert _markers(world.journal, 2) == {}


def _slow_plan(world: World) -> list[Any]:
    """Batch 3's partitions, planned after batch 2 (the run's second) took more than a third
    of the visibility timeout."""
    world.run(world.batch(0))
    world.run(world.batch(1))
    world.advance(VISIBILITY / 3 + 1)
    return world.batch(2)


class FailingVisibility(QueueSqs):
    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[Any]) -> Any:
        raise client_error("AccessDenied", 403, "ChangeMessageVisibilityBatch")


def test_a_receiver_whose_extension_fails_leaves_its_entry_to_the_driver(world: World) -> None:
    """Crash point: after journaling, before (or instead of) the extension. The rows are
    delivered; no marker; the heartbeat reads the entry and extends it itself."""
    parts = _slow_plan(world)
    failing = FailingVisibility()
    failing.queue = world.sqs.queue
    assert len(world.run(parts, sqs=failing)) == 9
    receivers, markers = _receivers(world.journal, 3), _markers(world.journal, 3)
    assert markers == {} and len(receivers) == 3
    calls = len(world.sqs.batch_calls)
    world.advance(VISIBILITY - 5)  # due for an extension, not expired
    world.state.heartbeat.tick()
    batch3 = {h for r in receivers for h in _handles(world.journal, 3, r)}
    extended = {e["ReceiptHandle"] for e in world.extensions(calls)}
    assert batch3 <= extended, "the driver extended every message"
    assert world.state.heartbeat.snapshot(3).held_until == {}


def test_a_receiver_that_dies_before_its_marker_leaves_its_entry_to_the_driver(
    world: World,
) -> None:
    """Crash point: after the extension, before the marker (its create fails, or the
    process dies there): the extension stands, the driver extends that entry again."""
    parts = _slow_plan(world)
    failed = []

    def before(method: str, key: str) -> None:
        if method == "create" and key.endswith(f"{parts[0].receiver:05d}.extended"):
            failed.append(key)
            raise OSError("store unreachable (injected)")

    world.journal = Journal(
        world.journal.location,
        world.options,
        store=HookedStore(LocalStore(world.journal.location), before=before),
    )
    assert len(world.run(parts)) == 9
    assert failed
    receivers, markers = _receivers(world.journal, 3), _markers(world.journal, 3)
    assert sorted(markers) == receivers[1:]
    calls = len(world.extensions())
    world.advance(VISIBILITY - 5)
    world.state.heartbeat.tick()
    entry = world.journal.entries.read(3, parts[0].receiver)
    assert entry is not None
    mine = set(entry.column(RECEIPT_HANDLE).to_pylist())
    again = [e for e in world.extensions()[calls:] if e["ReceiptHandle"] in mine]
    assert len(again) == 3 and {e["VisibilityTimeout"] for e in again} == {900}
    others = {h for r in receivers[1:] for h in _handles(world.journal, 3, r)}
    assert not others & {e["ReceiptHandle"] for e in world.extensions()[calls:]}


def _handles(journal: Journal, batch: int, receiver: int) -> list[str]:
    entry = journal.entries.read(batch, receiver)
    assert entry is not None
    return entry.column(RECEIPT_HANDLE).to_pylist()


def test_a_replayed_receiver_does_not_extend(world: World) -> None:
    parts = _slow_plan(world)
    world.run(parts)
    calls = len(world.sqs.batch_calls)
    assert len(world.run(parts)) == 9  # a retried task replays from the journal
    assert len(world.sqs.batch_calls) == calls


@pytest.mark.parametrize(
    "extra", [{"deleteOnCommit": "false"}, {"deleteAfterJournal": "true"}], ids=str
)
def test_no_executor_extension_when_messages_must_come_back_or_are_deleted_at_once(
    tmp_path: Path, extra: dict[str, str]
) -> None:
    world = World(tmp_path, **extra)
    try:
        world.run(world.batch(0))
        world.run(world.batch(1))
        world.advance(VISIBILITY)
        world.batch(2)
        assert world.journal.plans.read(3).extend_by == 0
    finally:
        world.state.close()


def test_the_flag_is_part_of_the_stored_plan() -> None:
    plan = BatchPlan(4, (ReceiverPlan(0, 10),), extend_by=900)
    assert BatchPlan.from_json(plan.to_json()) == plan
    # A plan written before the flag existed: no executor extension.
    assert BatchPlan.from_json(BatchPlan(4, (ReceiverPlan(0, 10),)).to_json()).extend_by == 0
    assert b"extendBy" not in BatchPlan(4, (ReceiverPlan(0, 10),)).to_json()


def _entry(received_at: float, count: int = 3) -> pa.Table:
    table = messages_to_table([sqs_message(n) for n in range(count)], QUEUE_URL)
    return table.replace_schema_metadata({RECEIVED_AT: repr(received_at)})


def test_the_extension_stops_short_of_the_twelve_hour_ceiling(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "j"))
    sqs = FakeSqs()
    now = NOW + 43200 - 500
    assert extend_journaled(journal, sqs, QUEUE_URL, 1, 0, _entry(NOW), 900, wall_clock=lambda: now)
    [(_, entries)] = sqs.batch_calls
    assert {e["VisibilityTimeout"] for e in entries} == {500 - 60}
    assert _markers(journal, 1, [0]) == {0: float(int(now) + 440)}
    # Past the ceiling's reserve: nothing to ask for, no marker (the driver marks it lost).
    late = NOW + 43200 - 30
    assert not extend_journaled(
        journal, sqs, QUEUE_URL, 2, 0, _entry(NOW), 900, wall_clock=lambda: late
    )
    assert len(sqs.batch_calls) == 1 and _markers(journal, 2, [0]) == {}


def test_a_partly_failed_extension_writes_no_marker(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "j"))

    class Stale(FakeSqs):
        def _batch(self, action: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
            self.batch_calls.append((action, Entries))
            return {
                "Successful": [{"Id": e["Id"]} for e in Entries[1:]],
                "Failed": [
                    {"Id": Entries[0]["Id"], "Code": "ReceiptHandleIsInvalid", "SenderFault": True}
                ],
            }

    assert not extend_journaled(
        journal, Stale(), QUEUE_URL, 1, 0, _entry(NOW), 900, wall_clock=lambda: NOW
    )
    assert _markers(journal, 1, [0]) == {}


def test_assignments_take_each_entry_s_marker_deadline_before_the_heartbeat_looked(
    world: World,
) -> None:
    """The next plan reads the committed batch's markers by key: an entry whose receiver
    extended it stays valid until the batch's planning plus extend_by (the driver's clock), so
    the deletes of a medium-slow pipeline are not judged uncertain before the heartbeat has
    read the batch."""
    parts = _slow_plan(world)
    world.run(parts)
    markers = _markers(world.journal, 3)
    world.run(world.batch(3))  # no heartbeat tick in between
    plan4 = world.journal.plans.read(4)
    assert plan4 is not None
    valid = {a.receiver: a.valid_until for a in plan4.acks if a.batch == 3}
    assert sorted(valid) == sorted(markers)
    for receiver, until in valid.items():
        assert until == pytest.approx(markers[receiver], abs=1.0)
    assert world.journal.dedupe.read(world.mono.now, world.options.dedupe_window) == {}


def test_a_batch_its_receivers_extended_is_not_dropped_nor_read_when_planning_late(
    world: World,
) -> None:
    """Planning the next batch when the committed one's receive baseline may lapse during the
    next receive: without markers the driver reads every entry into the drop set; with them,
    their markers, read by key, show the handles valid for long enough."""
    world.run(_slow_plan(world))
    batch3 = {
        i for r in _receivers(world.journal, 3) for i in world.journal.entries.receiver_ids(3, r)
    }
    world.advance(VISIBILITY - 3)  # the heartbeat has not ticked
    world.store.calls.clear()
    world.batch(3)
    plan4 = world.journal.plans.read(4)
    assert plan4 is not None
    # (Batch 2, settled only now, long after batch 3's receivers deleted it, and never
    # extended, has its deletes judged uncertain: its ids may be dropped, batch 3's not.)
    assert not batch3 & world.journal.drops.read(plan4.drops)
    reads = [k for m, k in world.store.calls if m == "read" and k.endswith(".arrow")]
    assert not [k for k in reads if k.startswith("batches/000000000003/")]


def test_an_entry_the_heartbeat_has_not_read_is_bounded_by_its_own_receive(world: World) -> None:
    """Acknowledgement assignments and drop sets bound each entry by what is known of it: an
    entry journaled after the heartbeat's last read (no marker: the batch was not flagged
    slow) keeps its receive baseline, however far the heartbeat extended the other entries;
    and an entry the heartbeat extended is not held back by another entry near expiry."""
    parts = world.batch(0)  # batch 1, planned at NOW, no executor extension
    assert world.journal.plans.read(1).extend_by == 0
    first, late = parts[:2], parts[2:]
    world.run(first)
    world.advance(20)  # past the heartbeat's discovery delay, within two ticks of expiry
    world.state.heartbeat.tick()
    extended = {e["ReceiptHandle"] for e in world.extensions()}
    early = {h for p in first for h in _handles(world.journal, 1, p.receiver)}
    assert early and early <= extended
    world.run(late)  # journaled after the tick: unknown to the heartbeat, no marker
    world.advance(5)  # its receive baseline may now lapse while batch 2 receives
    world.batch(1)  # commits batch 1, plans batch 2 (its receivers delete batch 1)
    plan2 = world.journal.plans.read(2)
    assert plan2 is not None
    valid = {a.receiver: a.valid_until for a in plan2.acks if a.batch == 1}
    assert valid[late[0].receiver] == pytest.approx(NOW + VISIBILITY)
    for p in first:
        assert valid[p.receiver] == pytest.approx(NOW + 20 + 900)
    assert not plan2.acks[0].lost
    # The late entry's handles may lapse while batch 2 receives: its ids are dropped.
    entry = world.journal.entries.read(1, late[0].receiver)
    assert entry is not None
    drops = world.journal.drops.read(plan2.drops)
    assert set(entry.column("messageId").to_pylist()) <= drops
