"""The journal's lease: one live query per journal, takeover after a driver died."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from spark_sqs.errors import JournalInUseError
from spark_sqs.journal import LocalStore
from spark_sqs.journal.lease import Lease

INTERVAL = 10.0


class Clock:
    """Wall and monotonic time that only move when someone sleeps."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.on_sleep: list = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for hook in self.on_sleep:
            hook()


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(str(tmp_path / "journal"))


def lease(store: LocalStore, clock: Clock, owner: str) -> Lease:
    return Lease(
        store, "s3://b/j", owner, INTERVAL, wall_clock=clock, clock=clock, sleep=clock.sleep
    )


def test_a_fresh_journal_is_taken_at_once(store: LocalStore) -> None:
    clock = Clock()
    first = lease(store, clock, "a")
    first.acquire()
    assert clock.now == 1_700_000_000.0
    assert store.list("lease") == ["lease/000000000000.json"]


def test_a_second_live_query_stops_with_an_error_naming_the_journal(store: LocalStore) -> None:
    clock = Clock()
    first = lease(store, clock, "a")
    first.acquire()
    # The first query keeps renewing on its heartbeat while the second one watches.
    clock.on_sleep.append(lambda: first.renew() if clock.now % INTERVAL < 1 else None)

    with pytest.raises(JournalInUseError, match=r"s3://b/j.*Fix: stop the other query"):
        lease(store, clock, "b").acquire()
    assert clock.now - 1_700_000_000.0 <= 2 * INTERVAL


def test_a_restart_after_the_driver_died_takes_over_within_two_intervals(
    store: LocalStore, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    lease(store, clock, "dead").acquire()  # then SIGKILLed: never renews again
    clock.now += 1.0

    with caplog.at_level(logging.WARNING):
        restarted = lease(store, clock, "new")
        restarted.acquire()
    assert restarted.seq == 1
    assert clock.now - 1_700_000_001.0 <= 2 * INTERVAL
    assert "waiting up to 20s" in caplog.text


def test_a_lease_older_than_two_intervals_is_taken_without_waiting(store: LocalStore) -> None:
    clock = Clock()
    lease(store, clock, "dead").acquire()
    clock.now += 3 * INTERVAL
    start = clock.now
    lease(store, clock, "new").acquire()
    assert clock.now == start


def test_a_released_lease_is_taken_without_waiting(store: LocalStore) -> None:
    clock = Clock()
    stopped = lease(store, clock, "stopped")
    stopped.acquire()
    stopped.release()  # query.stop(): SIGTERM handler
    start = clock.now
    lease(store, clock, "next").acquire()
    assert clock.now == start


def test_the_owner_that_was_taken_over_finds_out_at_its_next_renewal(store: LocalStore) -> None:
    clock = Clock()
    paused = lease(store, clock, "paused")
    paused.acquire()
    clock.now += 3 * INTERVAL  # a long GC pause: the lease lapsed
    lease(store, clock, "new").acquire()

    with pytest.raises(JournalInUseError, match="took over"):
        paused.renew()


def test_renewals_keep_two_records(store: LocalStore) -> None:
    clock = Clock()
    owner = lease(store, clock, "a")
    owner.acquire()
    for _ in range(5):
        owner.renew()
    assert store.list("lease") == ["lease/000000000004.json", "lease/000000000005.json"]


def test_a_lost_answer_to_taking_the_lease_is_not_another_query(store: LocalStore) -> None:
    # The conditional PUT took effect, its answer was lost, botocore retried it: 412.
    clock = Clock()
    owner = lease(store, clock, "me")
    real_create = store.create

    def create_twice(key: str, data: bytes) -> bool:
        real_create(key, data)
        return real_create(key, data)

    store.create = create_twice  # type: ignore[method-assign]
    owner.acquire()
    assert owner.seq == 0
