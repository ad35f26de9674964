"""Visibility heartbeat: schedule, batching, clocks, the 12-hour ceiling, failures, locking.

Every test drives ``Heartbeat.tick()`` by hand with a fake monotonic clock (the driver's: the
only clock the heartbeat reads), an in-memory journal and a fake SQS client behind a real
``BatchCaller``. The fake client models SQS's visibility rules for the messages a test
"receives": it knows when each message becomes visible again, refuses to extend a message that
is no longer in flight and refuses to reach past 12 hours from the receive, as SQS does. The
entries' receive times are another clock (the executors'), which the heartbeat must not use.
Only the thread tests start the thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from spark_sqs.driver.heartbeat import Heartbeat
from spark_sqs.errors import SqsAccessError
from spark_sqs.journal import EntryReceipts, Journal, LocalStore
from spark_sqs.schema import messages_to_table
from spark_sqs.sqs.batching import BatchCaller
from tests.factories import QUEUE_URL, make_options, sqs_message
from tests.fakes import (
    NOW,
    TWELVE_HOURS,
    Clock,
    Failure,
    FakeJournal,
    FlakyJournal,
    ListHidingStore,
    VisibilitySqs,
    client_error,
)

VISIBILITY = 120
INTERVAL = 24.0  # visibilityTimeout / 5, the default
MONO = 5_000.0  # monotonic clock at the start of every test
WAIT = 5.0  # bound on every wait for another thread; never reached when the code is right
# A batch planned now is first read this long after its planning (visibility - 2 ticks - 1 s
# - the margin of max(2 s, 5 % of visibility)), and extended once planning + visibility comes
# within two ticks and a second: 71 s after the planning.
DISCOVER_AFTER = VISIBILITY - 2 * INTERVAL - 1.0 - 6.0
DUE_AFTER = VISIBILITY - 2 * INTERVAL - 1.0

INTERNAL_ERROR: Failure = ("InternalError", False)
CHANGE_VISIBILITY = "ChangeMessageVisibilityBatch"


def mid(batch: int, receiver: int, n: int) -> str:
    return f"b{batch}-r{receiver}-m{n}"


def handle_of(message_id: str) -> str:
    return f"AQEB-{message_id}"


class World:
    """A heartbeat wired to a fake monotonic clock, a fake journal and a fake SQS behind a
    BatchCaller. ``wall`` is the executors' clock: it only stamps the entries' receive time."""

    def __init__(
        self,
        *,
        visibility: int = VISIBILITY,
        interval: float = INTERVAL,
        attempts: int = 5,
        extend_by: int | None = None,
    ) -> None:
        self.visibility = visibility
        self.interval = interval
        self.mono = Clock(MONO)
        self.wall = Clock(NOW)
        self.sqs = VisibilitySqs(self.mono)
        self.journal = FakeJournal()
        self.sleeps: list[float] = []
        self.caller = BatchCaller(
            self.sqs, QUEUE_URL, sleep=self.sleeps.append, parallelism=1, attempts=attempts
        )
        self.heartbeat = Heartbeat(
            self.journal,
            self.caller,
            visibility_timeout=visibility,
            interval=interval,
            clock=self.mono,
            extend_by=extend_by,
        )

    def watch(
        self,
        batch: int,
        receivers: Iterable[int] = (0,),
        *,
        planned: bool = False,
        extend_by: int = 0,
    ) -> None:
        """Watch ``batch``, whose plan names ``receivers``: ``planned`` now, in this run, or
        (by default) inherited from an earlier run, as the acknowledger does."""
        self.heartbeat.watch(
            batch, planned=planned, receivers=tuple(receivers), extend_by=extend_by
        )

    def receive(
        self,
        batch: int,
        count: int,
        *,
        receiver: int = 0,
        ago: float = 0.0,
        received_at: float | None = None,
    ) -> list[str]:
        """A receiver of ``batch`` got ``count`` messages ``ago`` seconds ago and journaled them;
        its entry says it received them at ``received_at`` on its executor's clock."""
        ids = [mid(batch, receiver, n) for n in range(count)]
        self.journal.add(
            EntryReceipts(
                batch=batch,
                receiver=receiver,
                received_at=self.wall.now - ago if received_at is None else received_at,
                message_ids=tuple(ids),
                receipt_handles=tuple(handle_of(i) for i in ids),
            )
        )
        for i in ids:
            self.sqs.receive(handle_of(i), self.mono.now - ago, self.visibility)
        return ids

    def advance(self, seconds: float) -> None:
        self.mono.now += seconds
        self.wall.now += seconds

    def step(self) -> None:
        """One heartbeat period passes, then the heartbeat ticks."""
        self.advance(self.interval)
        self.heartbeat.tick()

    def assert_all_invisible(self, handles: list[str]) -> None:
        expired = [h for h in handles if self.sqs.visible_at[h] <= self.mono.now]
        assert expired == [], f"visible again at {self.mono.now}"

    def first_extension(self, message_id: str) -> float:
        return min(c.at for c in self.sqs.calls if handle_of(message_id) in c.handles)


def lock_is_free(lock: Any) -> bool:
    """Whether another thread could take ``lock`` right now."""
    answer: list[bool] = []

    def probe() -> None:
        got = lock.acquire(blocking=False)
        if got:
            lock.release()
        answer.append(got)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(WAIT)
    assert answer, "probe thread did not finish"
    return answer[0]


# -- schedule ----------------------------------------------------------------------------------


def test_a_message_is_extended_only_once_its_remaining_visibility_is_within_two_ticks() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1, planned=True)
    [message] = world.receive(1, 1)

    hb.tick()
    assert world.sqs.calls == [], "a fresh message has 120 s left: nothing to do"

    # Due when remaining <= 2 * interval + 1 = 49 s, i.e. at 71 s after the planning.
    world.advance(70.5)
    hb.tick()
    assert world.sqs.calls == []

    world.advance(0.5)
    hb.tick()
    [call] = world.sqs.calls
    assert call.entries == [
        {"Id": "0", "ReceiptHandle": handle_of(message), "VisibilityTimeout": VISIBILITY}
    ]
    assert call.at == MONO + DUE_AFTER
    assert hb.stats.extended == 1
    assert hb.snapshot(1).expires_at[message] == pytest.approx(world.mono.now + VISIBILITY)


def test_after_an_extension_the_next_one_waits_until_it_is_due_again() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1)
    [message] = world.receive(1, 1, ago=VISIBILITY - 2 * INTERVAL)
    hb.tick()  # inherited: extended at once
    assert len(world.sqs.calls) == 1
    extended_at = world.mono.now

    world.step()  # 96 s left
    world.step()  # 72 s left
    assert len(world.sqs.calls) == 1
    world.step()  # 48 s left: due
    assert [c.at - extended_at for c in world.sqs.calls[1:]] == [3 * INTERVAL]
    assert world.sqs.calls[1].handles == [handle_of(message)]
    assert hb.stats.extended == 2


@pytest.mark.parametrize(
    ("visibility", "interval"), [(120, 24.0), (30, 6.0), (30, 7.5), (900, 60.0), (7, 1.75)]
)
def test_over_ten_visibility_timeouts_nothing_expires_and_calls_are_bounded(
    visibility: int, interval: float
) -> None:
    world = World(visibility=visibility, interval=interval)
    hb = world.heartbeat
    # Batches 1 to 3 were found pending at start (inherited); batch 4 is planned now.
    world.watch(1, (0, 1))
    world.watch(2)
    world.watch(3)
    world.watch(4, (0, 1), planned=True)
    handles: list[str] = []
    # Messages at different ages, in two inherited batches and two receivers.
    for batch, receiver, ago in [(1, 0, 0.0), (1, 1, visibility * 0.3), (2, 0, visibility * 0.7)]:
        handles += [handle_of(m) for m in world.receive(batch, 4, receiver=receiver, ago=ago)]
    handles += [handle_of(m) for m in world.receive(4, 4)]
    hb.tick()

    span = 10 * visibility
    for _ in range(int(span / interval)):
        world.advance(interval)
        world.assert_all_invisible(handles)
        hb.tick()
        # Receivers that show up mid-way are covered from then on: one of an inherited batch,
        # and one of the planned batch that received long after its planning.
        if 3 not in world.journal.stored and world.mono.now >= MONO + span / 2:
            handles += [handle_of(m) for m in world.receive(3, 4, ago=interval / 2)]
        if 1 not in world.journal.stored[4] and world.mono.now >= MONO + span / 3:
            handles += [handle_of(m) for m in world.receive(4, 4, receiver=1)]
    world.assert_all_invisible(handles)

    assert world.sqs.rejected == []
    assert all(c.timeouts == {visibility} for c in world.sqs.calls)
    min_gap = visibility - 2 * interval - 1
    for handle in handles:
        times = [c.at for c in world.sqs.calls if handle in c.handles]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert all(gap >= min_gap for gap in gaps), (handle, gaps)
        assert len(times) <= span / min_gap + 1
    assert hb.stats.extended == len(world.sqs.handles_sent())
    assert hb.stats.lost == 0
    assert all(hb.snapshot(b).lost == frozenset() for b in (1, 2, 3, 4))


def test_due_messages_go_out_at_most_ten_per_call() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1)
    ids = world.receive(1, 25, ago=100.0)

    hb.tick()

    assert [len(c.entries) for c in world.sqs.calls] == [10, 10, 5]
    assert world.sqs.handles_sent() == [handle_of(i) for i in ids]
    assert all(c.timeouts == {VISIBILITY} for c in world.sqs.calls)
    # Ids restart at 0 in every call: SQS requires them unique within one request only.
    assert [e["Id"] for e in world.sqs.calls[2].entries] == ["0", "1", "2", "3", "4"]
    assert hb.stats.extended == 25


def test_due_messages_of_several_batches_share_calls() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1)
    world.watch(2)
    world.receive(1, 7, ago=100.0)
    world.receive(2, 8, ago=100.0)

    hb.tick()

    assert [len(c.entries) for c in world.sqs.calls] == [10, 5]
    assert hb.stats.extended == 15


# -- discovery and clocks ----------------------------------------------------------------------


def test_expiry_estimates_come_from_the_planning_time_never_from_the_entry_receive_time() -> None:
    """An entry's receivedAt is its executor's wall clock, another host's: one that runs a day
    ahead would make the message look fresh for a day, one a day behind would make it look
    long lost. The heartbeat bounds the receive by the batch's planning time on its own
    monotonic clock instead, and extends both before planning time + visibilityTimeout."""
    world = World()
    hb = world.heartbeat
    world.watch(1, (0, 1), planned=True)
    world.advance(5.0)
    [ahead] = world.receive(1, 1, receiver=0, received_at=NOW + 86_400.0)
    [behind] = world.receive(1, 1, receiver=1, received_at=NOW - 86_400.0)
    handles = [handle_of(ahead), handle_of(behind)]

    while world.mono.now < MONO + 10 * VISIBILITY:
        world.step()
        world.assert_all_invisible(handles)

    first = {m: world.first_extension(m) for m in (ahead, behind)}
    assert first[ahead] == first[behind], "the same bound for both: the planning time's"
    assert MONO + DUE_AFTER <= first[ahead] < MONO + VISIBILITY
    assert world.sqs.rejected == [] and hb.stats.lost == 0
    assert hb.snapshot(1).lost == frozenset()
    assert hb.snapshot(1).planned_at == MONO


def test_an_inherited_batch_is_extended_at_the_first_tick() -> None:
    """A batch found pending at start was received before this driver's clock knew anything of
    it: its messages may expire any moment, so the first tick extends them all."""
    world = World(extend_by=900)
    hb = world.heartbeat
    world.watch(1)  # inherited
    world.watch(2, planned=True)
    [inherited] = world.receive(1, 1, ago=1.0)  # fresh, in fact: no clock of this driver says so
    [planned] = world.receive(2, 1)

    hb.tick()

    [call] = world.sqs.calls
    assert call.at == MONO and call.handles == [handle_of(inherited)]
    assert call.timeouts == {900}
    snap = hb.snapshot(1)
    assert snap.planned_at is None
    assert snap.expires_at == {inherited: pytest.approx(MONO + 900)}
    assert snap.entry_expires == {0: pytest.approx(MONO + 900)}
    # The batch planned now waits until its estimate nears.
    assert hb.snapshot(2).expires_at == {} and (2, 0) not in world.journal.read
    assert planned not in world.sqs.handles_sent()
    # An inherited batch's planning time is unknown: no marker bounds anything.
    assert world.journal.marker_reads == []


def test_an_estimated_expiry_that_passed_is_tried_and_only_a_refusal_loses_the_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The driver was paused past planning + visibilityTimeout before its heartbeat read the
    batch. The estimate is a lower bound: receiver 0 received a minute after the planning and
    its messages are still in flight; receiver 1 received at once and its are visible again.
    Both are tried; only SQS's refusal marks a message lost."""
    world = World()
    hb = world.heartbeat
    world.watch(1, (0, 1), planned=True)
    world.advance(1.0)
    [early] = world.receive(1, 1, receiver=1)
    world.advance(59.0)
    [late] = world.receive(1, 1, receiver=0)

    world.advance(90.0)  # MONO + 150: both estimates (MONO + 120) passed, unconfirmed
    with caplog.at_level(logging.WARNING, logger="spark_sqs.driver.heartbeat"):
        hb.tick()

    assert sorted(world.sqs.handles_sent()) == sorted([handle_of(late), handle_of(early)])
    snap = hb.snapshot(1)
    assert snap.lost == {early}
    assert snap.expires_at == {late: pytest.approx(world.mono.now + VISIBILITY)}
    assert hb.stats.failed_permanent == 1 and hb.stats.lost == 1
    assert any("lost track of 1 messages" in r.getMessage() for r in caplog.records)
    for _ in range(10):
        world.step()
        world.assert_all_invisible([handle_of(late)])
    assert world.sqs.handles_sent().count(handle_of(early)) == 1, "never tried again"


@pytest.mark.parametrize("ago", [VISIBILITY, VISIBILITY + 0.5, 3600.0, NOW])
def test_an_inherited_message_whose_visibility_already_passed_is_tried_once_then_lost(
    ago: float, caplog: pytest.LogCaptureFixture
) -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1, (0, 1))
    [gone] = world.receive(1, 1, receiver=0, ago=ago)
    [kept] = world.receive(1, 1, receiver=1, ago=100.0)

    with caplog.at_level(logging.WARNING, logger="spark_sqs.driver.heartbeat"):
        hb.tick()

    # Nothing on this driver's clock says when they were received: both are tried.
    assert sorted(world.sqs.handles_sent()) == sorted([handle_of(gone), handle_of(kept)])
    snap = hb.snapshot(1)
    assert snap.lost == {gone}
    assert gone not in snap.expires_at
    assert hb.stats.lost == 1
    assert hb.stats.failed_permanent == 1
    assert any("lost track of 1 messages" in r.getMessage() for r in caplog.records)

    for _ in range(10):
        world.step()
    assert world.sqs.handles_sent().count(handle_of(gone)) == 1
    assert hb.snapshot(1).lost == {gone}
    world.assert_all_invisible([handle_of(kept)])


def test_receivers_that_appear_later_are_discovered_on_the_next_tick() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(2, (0, 4))
    hb.tick()
    assert hb.snapshot(2).expires_at == {}

    first = world.receive(2, 2, receiver=0)
    world.step()
    assert set(hb.snapshot(2).expires_at) == set(first)

    later = world.receive(2, 3, receiver=4)
    world.step()
    assert set(hb.snapshot(2).expires_at) == set(first) | set(later)

    for _ in range(10):
        world.step()
    world.assert_all_invisible([handle_of(m) for m in first + later])
    # Each entry is read by key until it is found, then never again.
    assert world.journal.read == [(2, 0), (2, 4), (2, 0), (2, 4), (2, 4)]


def test_only_the_receivers_the_plan_names_are_read() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1, (0, 2))
    named = world.receive(1, 2, receiver=0, ago=100.0)
    world.receive(1, 2, receiver=1, ago=100.0)  # a file of no receiver of the plan

    hb.tick()

    assert sorted(world.journal.read) == [(1, 0), (1, 2)]
    assert world.sqs.handles_sent() == [handle_of(m) for m in named]


def test_receivers_are_read_by_key_although_the_list_hides_their_entries(
    tmp_path: Path,
) -> None:
    """A LIST may lag a write (S3-compatible stores, NFS across hosts): the heartbeat reads
    the entries of the receivers the plan names by key, on a real journal whose LIST shows
    none of them."""
    location = str(tmp_path / "journal")
    store = ListHidingStore(LocalStore(location), lambda key: key.startswith("batches/"))
    journal = Journal(location, make_options(location), store=store)
    mono = Clock(MONO)
    sqs = VisibilitySqs(mono)
    caller = BatchCaller(sqs, QUEUE_URL, sleep=lambda s: None, parallelism=1)
    hb = Heartbeat(journal, caller, visibility_timeout=VISIBILITY, interval=INTERVAL, clock=mono)
    by_receiver = {0: [0, 1], 2: [2], 5: [3]}  # receiver 5: a file no plan names
    for receiver, numbers in by_receiver.items():
        messages = [sqs_message(n) for n in numbers]
        journal.entries.write(1, receiver, messages_to_table(messages, QUEUE_URL))
        for m in messages:
            sqs.receive(m["ReceiptHandle"], MONO - 10.0, VISIBILITY)
    assert journal.batches.list() == []
    store.calls.clear()

    hb.watch(1, receivers=(0, 1, 2))
    hb.tick()

    assert sorted(sqs.handles_sent()) == [f"AQEB-receipt-{n}-1" for n in (0, 1, 2)]
    assert not [c for c in store.calls if c[0] == "list"]
    assert hb.snapshot(1).lost == frozenset()


def test_an_entry_that_cannot_be_read_yet_is_read_again_on_the_next_tick() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1)
    ids = world.receive(1, 2)
    world.journal.unreadable.add((1, 0))

    hb.tick()
    assert hb.snapshot(1).expires_at == {}

    world.step()
    assert set(hb.snapshot(1).expires_at) == set(ids)
    assert world.journal.read == [(1, 0), (1, 0)]


def test_batches_that_are_not_watched_are_neither_read_nor_extended() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1)
    world.receive(1, 1, ago=100.0)
    world.receive(9, 3, ago=100.0)

    hb.tick()

    assert [b for b, _ in world.journal.read] == [1]
    assert world.sqs.handles_sent() == [handle_of(mid(1, 0, 0))]
    assert hb.watched() == [1]
    assert hb.snapshot(9).expires_at == {}


# -- the 12-hour ceiling -----------------------------------------------------------------------


def test_extensions_stop_at_twelve_hours_from_the_planning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The receive came after the planning: 12 hours from the planning, on this driver's clock,
    # is never later than SQS's ceiling.
    world = World(visibility=600, interval=60.0)
    hb = world.heartbeat
    world.watch(5, planned=True)
    world.advance(0.25)
    [message] = world.receive(5, 1)
    handle = handle_of(message)
    ceiling = MONO + TWELVE_HOURS

    warned_at: list[float] = []
    with caplog.at_level(logging.WARNING, logger="spark_sqs.driver.heartbeat"):
        hb.tick()
        while world.mono.now < ceiling + 600:
            world.advance(60.0)
            if world.mono.now < ceiling:
                world.assert_all_invisible([handle])
            before = len(caplog.records)
            hb.tick()
            if any("ceiling" in r.getMessage() for r in caplog.records[before:]):
                warned_at.append(world.mono.now)
            if message in hb.snapshot(5).expires_at:
                assert hb.snapshot(5).expires_at[message] <= ceiling + 1e-3

    # SQS never had to reject a request reaching past 12 hours.
    assert world.sqs.rejected == []
    assert hb.stats.failed_permanent == 0
    for call in world.sqs.calls:
        [timeout] = call.timeouts
        assert call.at + timeout <= ceiling
    timeouts = [t for c in world.sqs.calls for t in c.timeouts]
    capped = [t for t in timeouts if t < 600]
    assert capped, "the last extension must be capped at the time left"
    first_capped = next(c for c in world.sqs.calls if c.timeouts != {600})
    assert first_capped.timeouts == {int(ceiling - first_capped.at)}
    # The message was kept invisible until the ceiling, then given up.
    assert world.sqs.visible_at[handle] == pytest.approx(ceiling, abs=1.0)
    assert hb.snapshot(5).lost == {message}
    assert hb.stats.lost == 1
    assert all(c.at < ceiling for c in world.sqs.calls)
    # One warning, naming the batch, once within an hour of the ceiling.
    assert len(warned_at) == 1
    assert ceiling - 3600 <= warned_at[0] < ceiling - 3600 + 60
    [warning] = [r for r in caplog.records if "ceiling" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert "batch 5:" in warning.getMessage()


@pytest.mark.parametrize(
    ("left", "timeout"),
    [(100.5, 100), (100.0, 100), (1.75, 1)],
)
def test_the_requested_timeout_is_capped_at_the_seconds_left_before_the_ceiling(
    left: float, timeout: int
) -> None:
    # With a 12-hour visibility timeout the first visibility ends at the ceiling already.
    world = World(visibility=43200, interval=60.0)
    hb = world.heartbeat
    world.watch(1, planned=True)
    [message] = world.receive(1, 1)
    world.advance(TWELVE_HOURS - left)

    hb.tick()

    [call] = world.sqs.calls
    assert call.timeouts == {timeout}
    assert world.sqs.rejected == []
    assert hb.snapshot(1).lost == frozenset()
    assert hb.snapshot(1).expires_at[message] <= MONO + TWELVE_HOURS


@pytest.mark.parametrize("left", [0.5, 0.0, -30.0])
def test_a_message_at_or_past_the_ceiling_is_lost(left: float) -> None:
    world = World(visibility=43200, interval=60.0)
    hb = world.heartbeat
    world.watch(1, planned=True)
    [message] = world.receive(1, 1)
    world.advance(TWELVE_HOURS - left)

    hb.tick()

    assert world.sqs.calls == []
    assert hb.snapshot(1).lost == {message}
    assert hb.stats.lost == 1


def test_the_ceiling_warning_is_logged_once_per_batch(caplog: pytest.LogCaptureFixture) -> None:
    world = World(visibility=600, interval=60.0)
    planned_at: dict[int, float] = {}

    def plan(batch: int) -> None:
        planned_at[batch] = world.mono.now
        world.watch(batch, planned=True)
        world.receive(batch, 3)

    warned: list[tuple[str, float]] = []
    with caplog.at_level(logging.WARNING, logger="spark_sqs.driver.heartbeat"):
        plan(7)
        for _ in range(12):
            world.step()
        plan(8)  # 12 minutes later
        for _ in range(50):
            world.step()
        plan(9)  # 50 minutes after that: within the loop below, it never nears its ceiling
        while world.mono.now < MONO + TWELVE_HOURS:
            before = len(caplog.records)
            world.step()
            warned += [
                (r.getMessage(), world.mono.now)
                for r in caplog.records[before:]
                if "ceiling" in r.getMessage()
            ]

    assert [w.split(":")[0] for w, _ in warned] == ["batch 7", "batch 8"]
    for (message, at), batch in zip(warned, (7, 8), strict=True):
        # At the first tick within an hour of 12 hours after the planning.
        ceiling = planned_at[batch] + TWELVE_HOURS
        assert ceiling - 3600 <= at < ceiling - 3600 + 60
        assert "60 minutes from SQS's 12-hour visibility ceiling" in message
    ceiling_records = [r for r in caplog.records if "ceiling" in r.getMessage()]
    assert all(r.levelno == logging.WARNING for r in ceiling_records)
    assert world.sqs.rejected == []


# -- failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "failure",
    [
        ("ReceiptHandleIsInvalid", True),
        ("MessageNotInflight", False),
        ("AWS.SimpleQueueService.MessageNotInflight", True),
        ("InvalidParameterValue", True),
    ],
)
def test_a_permanent_entry_failure_marks_the_message_lost_and_is_never_retried(
    failure: Failure,
) -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1)
    ids = world.receive(1, 3, ago=100.0)
    world.sqs.failures[handle_of(ids[1])].append(failure)

    hb.tick()

    assert len(world.sqs.calls) == 1, "a permanent failure is not retried within the tick"
    assert world.sleeps == []
    snap = hb.snapshot(1)
    assert snap.lost == {ids[1]}
    assert set(snap.expires_at) == {ids[0], ids[2]}
    assert hb.stats.failed_permanent == 1
    assert hb.stats.lost == 1
    assert hb.stats.extended == 2
    assert hb.stats.failed_transient == 0

    for _ in range(5 * VISIBILITY // int(INTERVAL)):
        world.step()
    sent = world.sqs.handles_sent()
    assert sent.count(handle_of(ids[1])) == 1, "never sent again"
    assert sent.count(handle_of(ids[0])) > 1
    assert hb.snapshot(1).lost == {ids[1]}
    assert hb.stats.failed_permanent == 1


def test_transient_entry_failures_are_retried_with_backoff_within_the_tick() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1)
    ids = world.receive(1, 3, ago=100.0)
    world.sqs.failures[handle_of(ids[1])] += [INTERNAL_ERROR, INTERNAL_ERROR]

    hb.tick()

    assert [c.handles for c in world.sqs.calls] == [
        [handle_of(i) for i in ids],
        [handle_of(ids[1])],
        [handle_of(ids[1])],
    ]
    assert len(world.sleeps) == 2
    assert hb.stats.extended == 3
    assert hb.stats.failed_transient == 0
    assert hb.snapshot(1).lost == frozenset()
    expected = {i: world.mono.now + VISIBILITY for i in ids}
    assert hb.snapshot(1).expires_at == pytest.approx(expected)


def test_transient_failures_that_outlast_the_retries_are_counted_and_retried_next_tick() -> None:
    world = World(attempts=3)
    hb = world.heartbeat
    world.watch(1)
    ids = world.receive(1, 2, ago=100.0)
    world.sqs.failures[handle_of(ids[1])] += [INTERNAL_ERROR] * 3

    hb.tick()

    assert len(world.sqs.calls) == 3
    assert hb.stats.failed_transient == 1
    assert hb.stats.failed_permanent == 0
    snap = hb.snapshot(1)
    assert snap.lost == frozenset()
    # The failed one keeps its estimate (an inherited batch: the first tick); the other was
    # extended.
    assert snap.expires_at[ids[1]] == pytest.approx(MONO)
    assert snap.expires_at[ids[0]] == pytest.approx(MONO + VISIBILITY)

    world.advance(10.0)
    hb.tick()

    assert world.sqs.calls[-1].handles == [handle_of(ids[1])]
    assert world.sqs.calls[-1].timeouts == {VISIBILITY}
    assert hb.snapshot(1).expires_at[ids[1]] == pytest.approx(world.mono.now + VISIBILITY)
    assert hb.stats.failed_transient == 1
    world.assert_all_invisible([handle_of(i) for i in ids])


def test_a_message_whose_extension_keeps_failing_is_lost_once_its_confirmed_visibility_passes() -> (
    None
):
    world = World(attempts=2)
    hb = world.heartbeat
    world.watch(1)
    [message] = world.receive(1, 1, ago=100.0)
    hb.tick()  # inherited: extended at once, until MONO + 120 (confirmed by SQS)
    assert world.sqs.visible_at[handle_of(message)] == MONO + VISIBILITY
    world.sqs.failures[handle_of(message)] += [INTERNAL_ERROR] * 100

    world.advance(72.0)  # due: both attempts fail
    hb.tick()
    world.advance(24.0)
    hb.tick()
    assert hb.snapshot(1).lost == frozenset()
    world.advance(24.0)  # MONO + 120: the confirmed visibility ended
    hb.tick()

    assert hb.snapshot(1).lost == {message}
    assert hb.stats.failed_transient == 2
    assert len(world.sqs.calls) == 5, "not tried once it is known to be visible again"


def test_an_estimate_whose_extension_keeps_failing_is_tried_at_every_tick_not_lost() -> None:
    """Only an extension confirms an expiry: until one succeeds, the heartbeat keeps trying a
    message past its estimate (SQS would refuse it if it had expired), and the estimate it
    reports makes the acknowledger count the message uncertain meanwhile."""
    world = World(attempts=2)
    hb = world.heartbeat
    world.watch(1, planned=True)
    world.advance(60.0)
    [message] = world.receive(1, 1)  # in flight until MONO + 180
    world.sqs.failures[handle_of(message)] += [INTERNAL_ERROR] * 8

    world.advance(DUE_AFTER - 60.0)
    hb.tick()
    for _ in range(3):
        world.step()
    assert world.mono.now > MONO + VISIBILITY, "the estimate passed"
    assert hb.snapshot(1).lost == frozenset()
    assert hb.snapshot(1).expires_at == {message: MONO + VISIBILITY}
    assert len(world.sqs.calls) == 8, "tried at every tick, two attempts each"

    world.step()  # SQS answers again
    assert hb.snapshot(1).lost == frozenset()
    assert hb.snapshot(1).expires_at == {message: pytest.approx(world.mono.now + VISIBILITY)}
    world.assert_all_invisible([handle_of(message)])


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ThrottlingException", 400),
        ("RequestThrottled", 400),
        ("AWS.SimpleQueueService.RequestThrottled", 400),
        ("ServiceUnavailable", 503),
    ],
)
def test_a_throttled_call_is_retried(code: str, status: int) -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1)
    ids = world.receive(1, 3, ago=100.0)
    world.sqs.errors.append(client_error(code, status, CHANGE_VISIBILITY))

    hb.tick()

    assert [c.handles for c in world.sqs.calls] == [[handle_of(i) for i in ids]] * 2
    assert len(world.sleeps) == 1
    assert hb.stats.extended == 3
    assert hb.stats.failed_transient == 0
    assert hb.stats.lost == 0


def test_throttling_that_outlasts_the_retries_leaves_the_messages_for_the_next_tick() -> None:
    world = World(attempts=2)
    hb = world.heartbeat
    world.watch(1)
    ids = world.receive(1, 3, ago=100.0)
    world.sqs.errors += [client_error("ThrottlingException", 400, CHANGE_VISIBILITY)] * 2

    hb.tick()

    assert len(world.sqs.calls) == 2
    assert hb.stats.failed_transient == 3
    assert hb.stats.extended == 0
    assert hb.snapshot(1).lost == frozenset()

    world.advance(10.0)
    hb.tick()
    assert hb.stats.extended == 3
    world.assert_all_invisible([handle_of(i) for i in ids])


def test_access_denied_escapes_tick_and_keeps_the_messages_tracked() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1)
    ids = world.receive(1, 2, ago=100.0)
    world.sqs.errors.append(client_error("AccessDenied", 403, CHANGE_VISIBILITY))

    with pytest.raises(SqsAccessError, match="sqs:ChangeMessageVisibility"):
        hb.tick()

    assert len(world.sqs.calls) == 1, "not retried"
    assert world.sleeps == []
    assert lock_is_free(hb.lock), "tick left the lock held"
    assert hb.snapshot(1).lost == frozenset()
    assert set(hb.snapshot(1).expires_at) == set(ids)

    # Permissions fixed: the next tick extends them.
    world.advance(10.0)
    hb.tick()
    assert hb.stats.extended == 2
    assert hb.stats.ticks == 2
    world.assert_all_invisible([handle_of(i) for i in ids])


# -- forget, watch, snapshot -------------------------------------------------------------------


def test_forget_stops_all_extension_of_the_batch() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1, (0, 1, 2))
    world.watch(2)
    acked = world.receive(1, 3, ago=60.0)
    kept = world.receive(2, 3, ago=60.0)
    world.receive(1, 2, receiver=1, ago=60.0)
    world.sqs.failures[handle_of(acked[0])].append(("ReceiptHandleIsInvalid", True))
    hb.tick()
    assert hb.snapshot(1).lost == {acked[0]}
    sent_before = len(world.sqs.handles_sent())

    hb.forget(1)
    read_before = len(world.journal.read)
    # A receiver of the acknowledged batch that shows up late is not picked up either.
    world.receive(1, 2, receiver=2)
    for _ in range(10 * VISIBILITY // int(INTERVAL)):
        world.step()

    sent_after = world.sqs.handles_sent()[sent_before:]
    assert not [h for h in sent_after if h.startswith("AQEB-b1-")]
    assert {handle_of(m) for m in kept} <= set(sent_after)
    assert [b for b, _ in world.journal.read[read_before:] if b == 1] == []
    assert hb.watched() == [2]
    snap = hb.snapshot(1)
    assert snap.expires_at == {} and snap.lost == frozenset()


def test_forgetting_an_unknown_batch_is_harmless() -> None:
    world = World()
    hb = world.heartbeat
    hb.forget(42)
    world.watch(1)
    world.watch(1)  # watching twice keeps what was discovered
    world.receive(1, 1)
    hb.tick()
    world.watch(1)
    hb.watch(1)  # also without naming the receivers again (a retry after a failed delete)
    assert set(hb.snapshot(1).expires_at) == {mid(1, 0, 0)}
    assert hb.watched() == [1]


def test_snapshot_reports_expiries_on_the_driver_s_monotonic_clock() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(3, (0, 1), planned=True)
    world.advance(10.0)
    [a] = world.receive(3, 1, receiver=0)
    world.advance(40.0)
    [b] = world.receive(3, 1, receiver=1)
    hb.tick()
    snap = hb.snapshot(3)
    assert snap.planned_at == MONO
    assert snap.expires_at == {}, "not read yet: the planning time bounds it"

    world.advance(DISCOVER_AFTER - 50.0)
    hb.tick()
    snap = hb.snapshot(3)
    expected = {a: MONO + VISIBILITY, b: MONO + VISIBILITY}
    assert snap.expires_at == pytest.approx(expected)
    assert snap.entry_expires == pytest.approx({0: MONO + VISIBILITY, 1: MONO + VISIBILITY})
    # An estimate is a lower bound of what SQS knows.
    for m in (a, b):
        assert snap.expires_at[m] <= world.sqs.visible_at[handle_of(m)]

    world.advance(DUE_AFTER - DISCOVER_AFTER)
    hb.tick()
    expected = {a: world.mono.now + VISIBILITY, b: world.mono.now + VISIBILITY}
    assert hb.snapshot(3).expires_at == pytest.approx(expected)
    # SQS agrees with what the heartbeat reports once it extended them (one clock).
    for m in (a, b):
        assert world.sqs.visible_at[handle_of(m)] == pytest.approx(expected[m])


# -- locking -----------------------------------------------------------------------------------


def test_tick_blocks_while_another_thread_holds_the_lock() -> None:
    """The acknowledger's pattern: hold the lock, delete the batch, forget it, release."""
    world = World()
    hb = world.heartbeat
    world.watch(1)
    world.watch(2)
    acked = world.receive(1, 2, ago=100.0)
    kept = world.receive(2, 2, ago=100.0)

    held, release, forgotten = threading.Event(), threading.Event(), threading.Event()
    started, ticked = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def acknowledger() -> None:
        with hb.lock:
            held.set()
            release.wait(WAIT)
            hb.forget(1)
            forgotten.set()

    def ticker() -> None:
        started.set()
        try:
            hb.tick()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        ticked.set()

    holder = threading.Thread(target=acknowledger, daemon=True)
    holder.start()
    assert held.wait(WAIT)
    other = threading.Thread(target=ticker, daemon=True)
    other.start()
    assert started.wait(WAIT)

    assert not ticked.wait(0.2), "tick ran while the lock was held"
    assert world.journal.read == [] and world.sqs.calls == []

    release.set()
    assert ticked.wait(WAIT)
    holder.join(WAIT)
    other.join(WAIT)
    assert errors == []
    assert forgotten.is_set()
    # The tick ran after the batch was forgotten: the acknowledged messages were not touched.
    assert world.sqs.handles_sent() == [handle_of(m) for m in kept]
    assert not {handle_of(m) for m in acked} & set(world.sqs.handles_sent())


def test_tick_calls_sqs_without_holding_the_lock_planning_needs() -> None:
    # Planning and acknowledgement take the heartbeat's lock (watch, forget, snapshot): a slow
    # ChangeMessageVisibilityBatch must not hold them up.
    world = World()
    hb = world.heartbeat
    world.watch(1)
    world.receive(1, 1, ago=100.0)
    free_during_call: list[bool] = []
    world.sqs.on_call = lambda: free_during_call.append(lock_is_free(hb.lock))

    hb.tick()

    assert free_during_call == [True]
    assert lock_is_free(hb.lock)


def test_a_batch_forgotten_during_an_extension_stays_forgotten() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1)
    world.receive(1, 2, ago=100.0)
    world.sqs.on_call = lambda: hb.forget(1)

    hb.tick()

    assert hb.watched() == []
    assert hb.snapshot(1).expires_at == {}


def test_a_batch_planned_now_is_not_read_until_it_could_need_extending() -> None:
    # A batch acknowledged well within its visibility timeout costs the heartbeat nothing: no
    # journal read, no SQS call: no per-message work on the driver.
    world = World()
    hb = world.heartbeat
    world.watch(1, planned=True)
    world.receive(1, 3)
    ticks = 0
    while world.sqs.handles_sent() == []:
        hb.tick()
        ticks += 1
        if world.mono.now < MONO + DISCOVER_AFTER:
            assert world.journal.read == [], "read too early"
            assert world.journal.marker_reads == []
        world.advance(world.interval)
    # It was still extended in time: before its visibility ran out.
    assert world.mono.now <= MONO + world.visibility
    assert ticks > 1


def test_the_lock_is_reentrant_for_the_thread_that_holds_it() -> None:
    world = World()
    hb = world.heartbeat
    world.watch(1)
    world.receive(1, 1, ago=100.0)
    done = threading.Event()

    def acknowledger() -> None:
        with hb.lock:
            hb.snapshot(1)
            hb.tick()
            hb.forget(1)
            hb.watch(2)
        done.set()

    thread = threading.Thread(target=acknowledger, daemon=True)
    thread.start()
    assert done.wait(WAIT), "deadlock: the acknowledger calls the heartbeat while holding lock"
    assert hb.watched() == [2]


# -- the thread --------------------------------------------------------------------------------


def test_the_thread_survives_a_failing_tick_and_stops(caplog: pytest.LogCaptureFixture) -> None:
    journal = FlakyJournal()
    sqs = VisibilitySqs(Clock(0.0))
    caller = BatchCaller(sqs, QUEUE_URL, sleep=lambda s: None, parallelism=1)
    hb = Heartbeat(journal, caller, visibility_timeout=VISIBILITY, interval=0.01)
    hb.watch(1, receivers=(0,))
    hb.stop()  # before start: nothing to stop

    with caplog.at_level(logging.ERROR, logger="spark_sqs.driver.heartbeat"):
        hb.start()
        hb.start()  # a second start does not start a second thread
        try:
            assert journal.recovered.wait(WAIT), "the heartbeat thread died after a failed tick"
        finally:
            hb.stop(timeout=WAIT)

    [thread] = journal.threads
    assert thread is not threading.current_thread()
    assert thread.name == "spark-sqs-heartbeat"
    assert not thread.is_alive()
    assert hb.stats.tick_errors == 1
    assert hb.stats.ticks >= 3
    assert any("tick failed" in r.getMessage() and r.exc_info for r in caplog.records)


def test_a_failure_a_person_must_fix_is_kept_for_the_driver_to_raise() -> None:
    world = World()
    world.receive(1, 3, ago=VISIBILITY - 1)
    world.watch(1)
    world.sqs.errors = [client_error("AccessDenied", 403, CHANGE_VISIBILITY)]

    world.heartbeat.tick_safely()
    world.sqs.errors = [
        client_error("AWS.SimpleQueueService.NonExistentQueue", 400, CHANGE_VISIBILITY)
    ]
    world.heartbeat.tick_safely()

    # The first such failure is kept, naming the permission; the thread's ticks go on.
    assert isinstance(world.heartbeat.fatal, SqsAccessError)
    assert "sqs:ChangeMessageVisibility" in str(world.heartbeat.fatal)
    assert world.heartbeat.stats.tick_errors == 2


def test_failures_a_retry_may_fix_are_never_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World()
    world.receive(1, 3, ago=VISIBILITY - 1)
    world.watch(1)

    def unreachable(batch: int, receiver: int) -> EntryReceipts | None:
        raise OSError("journal store unreachable (injected)")

    monkeypatch.setattr(world.journal, "read_receipts", unreachable)
    world.heartbeat.tick_safely()
    monkeypatch.undo()
    world.sqs.errors = [client_error("ServiceUnavailable", 503, CHANGE_VISIBILITY)] * 5
    world.heartbeat.tick_safely()

    assert world.heartbeat.fatal is None
    assert world.heartbeat.stats.tick_errors == 1


def test_extending_further_than_the_timeout_extends_each_message_that_much_less_often() -> None:
    """The driver's work for a batch that outlives visibilityTimeout: with extensions of 900 s
    instead of 30 s, a message is extended about 30 times less often, and never expires."""
    calls = {}
    for extend_by in (None, 900):
        world = World(visibility=30, interval=6.0, extend_by=extend_by)
        world.watch(1, planned=True)
        handles = [handle_of(m) for m in world.receive(1, 20)]
        for _ in range(int(1800 / 6.0)):
            world.step()
            world.assert_all_invisible(handles)
        assert all(c.timeouts == {extend_by or 30} for c in world.sqs.calls)
        calls[extend_by] = sum(len(c.handles) for c in world.sqs.calls)
    # 30 minutes: every 17 s against every 887 s (each extension is due two ticks and a second
    # before it runs out).
    assert calls[None] >= 20 * 100 and calls[900] <= 20 * 3


@pytest.mark.parametrize(("delete_on_commit", "expected"), [("true", 900), ("false", 30)])
def test_the_driver_extends_by_the_floor_unless_messages_must_come_back(
    tmp_path: Any, delete_on_commit: str, expected: int
) -> None:
    """With deleteOnCommit=false a committed batch's messages must reappear after about
    visibilityTimeout, for the queue's redrive policy: no longer extensions there."""
    from spark_sqs.driver.coordinator import Coordinator

    options = make_options(
        str(tmp_path / "j"), visibilityTimeout="30", deleteOnCommit=delete_on_commit
    )
    state = Coordinator(
        options, VisibilitySqs(Clock(MONO)), QUEUE_URL, Journal(options.journal_location, options)
    )
    assert state.heartbeat.extend_by == expected


# -- entries their receivers extended (executor/extension.py) ----------------------------------


def test_an_entry_its_receiver_extended_is_read_only_once_its_marker_reach_nears() -> None:
    """A receiver extended its own entry and recorded it in a marker: the heartbeat
    costs nothing for it until the marker's reach (the planning time plus the plan's
    extend_by, on the driver's clock) nears, and still keeps it invisible after. Receiver 1
    died between journaling and its marker (or its extension failed): the heartbeat reads and
    extends it as for any entry."""
    world = World(extend_by=900)
    hb = world.heartbeat
    world.watch(1, (0, 1), planned=True, extend_by=900)
    world.advance(1.0)
    marked = world.receive(1, 3, receiver=0)
    unmarked = world.receive(1, 2, receiver=1)
    # What the receiver did: extend by 900 s, then create its marker.
    for m in marked:
        world.sqs.visible_at[handle_of(m)] = world.mono.now + 900
    world.journal.extended[1][0] = NOW + 900
    handles = [handle_of(m) for m in marked + unmarked]

    while not world.journal.read:
        world.step()
        world.assert_all_invisible(handles)
    assert world.journal.read == [(1, 1)]
    assert hb.snapshot(1).held_until == {0: pytest.approx(MONO + 900)}
    for _ in range(int(1500 / INTERVAL)):
        world.step()
        world.assert_all_invisible(handles)
    assert world.journal.read == [(1, 1), (1, 0)], "the marked entry is read once, late"
    assert world.sqs.rejected == [] and hb.snapshot(1).lost == frozenset()
    # Its first extension by the driver came within three ticks of the marker's reach.
    first = world.first_extension(marked[0])
    assert MONO + 900 - 3 * INTERVAL - 10 <= first < MONO + 900
    assert hb.snapshot(1).held_until == {}
    # Markers are read by key, for the receivers whose entries were not read yet.
    assert {r for _, r in world.journal.marker_reads} == {0, 1}


def test_a_marker_whose_reach_already_nears_is_not_read_and_its_entry_is_extended() -> None:
    """The driver's first tick came late (a long pause): the receiver's extension, bounded by
    the planning time plus extend_by, ends within the read-ahead. The heartbeat reads the
    entry at once, without its marker, and extends it (its estimate passed: it is tried)."""
    world = World(extend_by=900)
    hb = world.heartbeat
    world.watch(1, planned=True, extend_by=900)
    [m] = world.receive(1, 1)
    world.sqs.visible_at[handle_of(m)] = world.mono.now + 900
    world.journal.extended[1][0] = NOW + 900
    world.advance(850.0)

    hb.tick()

    assert world.journal.marker_reads == []
    assert world.journal.read == [(1, 0)]
    assert world.sqs.handles_sent() == [handle_of(m)]
    assert hb.snapshot(1).expires_at[m] == pytest.approx(world.mono.now + 900)
    world.step()
    world.assert_all_invisible([handle_of(m)])
    assert hb.snapshot(1).lost == frozenset()


def test_a_marker_is_read_by_key_and_its_reach_is_the_planning_time_plus_extend_by(
    tmp_path: Path,
) -> None:
    """On a real journal whose LIST shows no batch file: the marker at ``<receiver>.extended``
    is read by key, and its reach is this driver's planning time plus the plan's extend_by,
    whatever deadline the executor's clock wrote in it (an hour behind here)."""
    location = str(tmp_path / "journal")
    store = ListHidingStore(LocalStore(location), lambda key: key.startswith("batches/"))
    journal = Journal(location, make_options(location), store=store)
    mono = Clock(MONO)
    sqs = VisibilitySqs(mono)
    caller = BatchCaller(sqs, QUEUE_URL, sleep=lambda s: None, parallelism=1)
    hb = Heartbeat(
        journal, caller, visibility_timeout=VISIBILITY, interval=INTERVAL, clock=mono, extend_by=900
    )
    hb.watch(1, planned=True, receivers=(0, 1), extend_by=900)
    mono.now += 1.0
    marked = [sqs_message(n) for n in (0, 1)]
    journal.entries.write(1, 0, messages_to_table(marked, QUEUE_URL))
    journal.entries.write(1, 1, messages_to_table([sqs_message(2)], QUEUE_URL))
    for n in (0, 1, 2):
        sqs.receive(f"AQEB-receipt-{n}-1", mono.now, VISIBILITY)
    for m in marked:
        sqs.visible_at[m["ReceiptHandle"]] = mono.now + 900
    journal.entries.write_extension(1, 0, int(NOW - 3600 + 900))
    handles = [f"AQEB-receipt-{n}-1" for n in (0, 1, 2)]

    while not sqs.calls:
        mono.now += INTERVAL
        hb.tick()
    assert hb.snapshot(1).held_until == {0: pytest.approx(MONO + 900)}
    assert sqs.handles_sent() == ["AQEB-receipt-2-1"], "the unmarked entry only"
    while mono.now < MONO + 1500:
        mono.now += INTERVAL
        hb.tick()
        assert [h for h in handles if sqs.visible_at[h] <= mono.now] == []
    first = min(c.at for c in sqs.calls if "AQEB-receipt-0-1" in c.handles)
    assert MONO + 900 - 3 * INTERVAL - 10 <= first < MONO + 900
    assert sqs.rejected == [] and hb.snapshot(1).lost == frozenset()
    assert not [c for c in store.calls if c[0] == "list"]
