"""The journal's lease: one live query per journal, takeover after a driver died."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from spark_sqs.errors import JournalInUseError
from spark_sqs.journal import Journal, LocalStore
from spark_sqs.journal.lease import Lease
from spark_sqs.journal.stores import JournalStore
from tests.factories import make_options
from tests.fakes import NOW, Clock, ListHidingStore

INTERVAL = 10.0


def acquire_at_once(store: LocalStore, clock: Clock, owner: str) -> Lease:
    start = clock.now
    taken = lease(store, clock, owner)
    taken.acquire()
    assert clock.now == start, "acquiring waited"
    return taken


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(str(tmp_path / "journal"))


def lease(store: JournalStore, clock: Clock, owner: str) -> Lease:
    return Lease(
        store, "s3://b/j", owner, INTERVAL, wall_clock=clock, clock=clock, sleep=clock.sleep
    )


def test_a_fresh_journal_is_taken_at_once(store: LocalStore) -> None:
    clock = Clock(NOW)
    first = lease(store, clock, "a")
    first.acquire()
    assert clock.now == 1_700_000_000.0
    assert store.list("lease") == ["lease/000000000000.json"]


def test_a_second_live_query_stops_with_an_error_naming_the_journal(store: LocalStore) -> None:
    clock = Clock(NOW)
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
    clock = Clock(NOW)
    lease(store, clock, "dead").acquire()  # then SIGKILLed: never renews again
    clock.now += 1.0

    with caplog.at_level(logging.WARNING):
        restarted = lease(store, clock, "new")
        restarted.acquire()
    assert restarted.seq == 1
    assert clock.now - 1_700_000_001.0 <= 2 * INTERVAL
    assert "watching its lease for 20s" in caplog.text


def test_an_old_record_is_watched_too_its_time_is_another_hosts_clock(store: LocalStore) -> None:
    """The record's writtenAt is the owner's wall clock: a newcomer whose clock runs ahead
    would take a live journal at once if it judged the record's age. It watches instead."""
    owner_clock = Clock(NOW)
    owner = lease(store, owner_clock, "owner")
    owner.acquire()
    # The newcomer's wall clock is two intervals plus five seconds ahead of the owner's.
    newcomer_clock = Clock(NOW + 2 * INTERVAL + 5.0)
    newcomer_clock.on_sleep.append(
        lambda: (owner_clock.sleep(1.0), owner.renew() if owner_clock.now % INTERVAL < 1 else None)
    )
    with pytest.raises(JournalInUseError, match=r"run owner\) is using"):
        lease(store, newcomer_clock, "newcomer").acquire()
    owner.renew()  # the owner was never displaced


def test_a_dead_owner_is_waited_out_however_old_its_record(store: LocalStore) -> None:
    clock = Clock(NOW)
    lease(store, clock, "dead").acquire()
    clock.now += 3 * INTERVAL
    start = clock.now
    lease(store, clock, "new").acquire()
    assert clock.now - start >= 2 * INTERVAL


def test_confirm_renews_a_lease_older_than_one_interval_and_stops_a_displaced_owner(
    store: LocalStore,
) -> None:
    clock = Clock(NOW)
    owner = lease(store, clock, "owner")
    owner.acquire()
    owner.confirm()
    assert owner.seq == 0, "a lease renewed within the interval is not renewed again"
    clock.now += INTERVAL + 1
    owner.confirm()
    assert owner.seq == 1
    clock.now += 3 * INTERVAL  # a pause: another run takes over
    lease(store, clock, "new").acquire()
    with pytest.raises(JournalInUseError, match=r"run new\) took over"):
        owner.confirm()


def test_concurrent_renewals_of_one_owner_keep_its_lease(store: LocalStore) -> None:
    """The heartbeat renews while the driver's confirm renews: both ask for one number, or one
    goes past the other; neither is a takeover."""
    clock = Clock(NOW)
    owner = lease(store, clock, "owner")
    owner.acquire()
    twin = lease(store, clock, "owner")
    twin.seq = owner.seq
    owner.renew()
    twin.renew()  # its record 1 exists (the owner's): not taken over, and it renews past it
    assert twin.seq == 2
    owner.renew()
    owner.renew()
    twin.renew()  # records 3 and 4 are newer: still its own
    assert twin.seq >= 5


def test_a_renewal_that_meets_its_own_older_record_renews_past_it(store: LocalStore) -> None:
    """Found by the simulation (--unkind all --poison, seed 294): the driver's confirm created
    record 1 and paused; the heartbeat's renewal found record 1 taken by its own run and took
    that for a renewal, so nothing was renewed for two intervals while the heartbeat ran, and a
    newcomer watching the record took over a live query."""
    clock = Clock(NOW)
    owner = lease(store, clock, "owner")
    owner.acquire()
    heartbeat = lease(store, clock, "owner")
    heartbeat.seq = owner.seq
    owner.renew()  # record 1, then the driver thread pauses
    clock.now += 1.5 * INTERVAL
    heartbeat.renew()
    assert heartbeat.seq == 2
    assert store.read("lease/000000000002.json") is not None, "a record written now"


class _StallsOnce(LocalStore):
    """A store whose next listing stalls the process for ``pause`` seconds first, during which
    ``meanwhile`` runs (another query taking over)."""

    def __init__(self, root: str, clock: Clock) -> None:
        super().__init__(root)
        self.clock = clock
        self.pause = 0.0
        self.meanwhile = lambda: None

    def list(self, prefix: str) -> list[str]:
        if self.pause:
            self.clock.now += self.pause
            self.pause = 0.0
            self.meanwhile()
        return super().list(prefix)


def test_a_confirmation_whose_renewal_stalled_renews_again(tmp_path: Path) -> None:
    clock = Clock(NOW)
    store = _StallsOnce(str(tmp_path / "journal"), clock)
    owner = lease(store, clock, "owner")
    owner.acquire()
    clock.now += 1.5 * INTERVAL
    store.pause = 2.5 * INTERVAL  # after the renewal's create, before it returns
    owner.confirm()
    assert owner.seq == 2, "renewed again after the stalled renewal"

    # The same stall, during which another query takes over (record 3 after 2): the second
    # renewal finds it, and the confirmation stops the query before it acknowledges anything.
    clock.now += 1.5 * INTERVAL
    newcomer = lease(store, clock, "newcomer")
    store.pause = 2.5 * INTERVAL
    store.meanwhile = lambda: newcomer._write(4)
    with pytest.raises(JournalInUseError, match="took over"):
        owner.confirm()


class Lagging(LocalStore):
    """A store whose listing lags: records created in the last ``lag`` seconds are not listed."""

    def __init__(self, root: str, clock: Clock, lag: float) -> None:
        super().__init__(root)
        self.clock, self.lag, self.created_at = clock, lag, {}

    def create(self, key: str, data: bytes) -> bool:
        created = super().create(key, data)
        if created:
            self.created_at[key] = self.clock.now
        return created

    def list(self, prefix: str) -> list[str]:
        return [
            k
            for k in super().list(prefix)
            if self.clock.now - self.created_at.get(k, -1e18) >= self.lag
        ]


def test_a_listing_that_lags_does_not_hide_the_newest_record(tmp_path: Path) -> None:
    clock = Clock(NOW)
    store = Lagging(str(tmp_path / "journal"), clock, lag=INTERVAL * 1.5)
    owner = lease(store, clock, "owner")
    owner.acquire()
    clock.now += INTERVAL * 2
    owner.renew()
    owner.renew()
    owner.renew()  # records 1 to 3 are not listed yet; record 0 is kept
    newest = lease(store, clock, "reader").newest()
    assert newest is not None and newest.seq == 3


def test_a_released_lease_is_taken_without_waiting(store: LocalStore) -> None:
    clock = Clock(NOW)
    stopped = lease(store, clock, "stopped")
    stopped.acquire()
    stopped.release()  # query.stop(): SIGTERM handler
    acquire_at_once(store, clock, "next")


def test_the_owner_that_was_taken_over_finds_out_at_its_next_renewal(store: LocalStore) -> None:
    clock = Clock(NOW)
    paused = lease(store, clock, "paused")
    paused.acquire()
    clock.now += 3 * INTERVAL  # a long GC pause: the lease lapsed
    lease(store, clock, "new").acquire()

    with pytest.raises(JournalInUseError, match="took over"):
        paused.renew()


def test_renewals_keep_two_records(store: LocalStore) -> None:
    clock = Clock(NOW)
    owner = lease(store, clock, "a")
    owner.acquire()
    for _ in range(5):
        owner.renew()
    assert store.list("lease") == [f"lease/{n:012d}.json" for n in range(2, 6)]


def test_a_lost_answer_to_taking_the_lease_is_not_another_query(store: LocalStore) -> None:
    # The conditional PUT took effect, its answer was lost, botocore retried it: 412.
    clock = Clock(NOW)
    owner = lease(store, clock, "me")
    real_create = store.create

    def create_twice(key: str, data: bytes) -> bool:
        real_create(key, data)
        return real_create(key, data)

    store.create = create_twice  # type: ignore[method-assign]
    owner.acquire()
    assert owner.seq == 0


class Racing(LocalStore):
    """A store on which the owner renews right after another query's listing or read answered
    (the interleaving the simulation found with seed 329)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.after: dict[str, list] = {"list": [], "read": []}

    def _then(self, call: str) -> None:
        hooks, self.after[call] = self.after[call], []
        for hook in hooks:
            hook()

    def list(self, prefix: str) -> list[str]:
        keys = super().list(prefix)
        self._then("list")
        return keys

    def read(self, key: str) -> bytes | None:
        data = super().read(key)
        self._then("read")
        return data


@pytest.fixture
def racing(tmp_path: Path) -> Racing:
    return Racing(str(tmp_path / "journal"))


def test_a_record_deleted_between_listing_and_read_is_not_a_free_journal(racing: Racing) -> None:
    # Seed 329: the owner renews twice within one tick (before and after it) and deletes
    # record 0 between the second query's listing and its read of record 0.
    clock = Clock(NOW)
    owner = lease(racing, clock, "owner")
    owner.acquire()
    clock.on_sleep.append(lambda: owner.renew() if clock.now % INTERVAL < 1 else None)
    racing.after["list"].append(lambda: (owner.renew(), owner.renew()))

    with pytest.raises(JournalInUseError, match=r"run owner\) is using"):
        lease(racing, clock, "second").acquire()
    owner.renew()  # still the owner


def test_an_owner_back_from_a_long_pause_does_not_renew_into_a_hole(store: LocalStore) -> None:
    clock = Clock(NOW)
    paused = lease(store, clock, "paused")
    paused.acquire()  # record 0
    clock.now += 3 * INTERVAL  # a long GC pause: the lease lapsed
    new = lease(store, clock, "new")
    new.acquire()  # record 1
    new.renew()
    new.renew()  # records 2 and 3; 1 is deleted, so a create of it succeeds again

    with pytest.raises(JournalInUseError, match=r"run new\) took over"):
        paused.renew()
    new.renew()  # the new owner keeps it


def test_a_takeover_of_a_lease_renewed_past_meanwhile_looks_again(racing: Racing) -> None:
    clock = Clock(NOW)
    owner = lease(racing, clock, "slow")
    owner.acquire()  # record 0
    clock.now += 3 * INTERVAL  # looks dead to the next query, which will not wait ...
    # ... but renews three times between that query's read and its create of record 1.
    racing.after["read"].append(lambda: (owner.renew(), owner.renew(), owner.renew()))
    clock.on_sleep.append(lambda: owner.renew() if clock.now % INTERVAL < 1 else None)

    with pytest.raises(JournalInUseError, match=r"run slow\) is using"):
        lease(racing, clock, "next").acquire()
    owner.renew()


def test_renewals_remove_a_crashed_runs_records_but_the_fences(store: LocalStore) -> None:
    clock = Clock(NOW)
    for run in ("a", "b", "c"):
        crashed = lease(store, clock, run)
        crashed.acquire()  # b, c and d take over from a run that did not release: 2, 4, 6
        crashed.renew()
        clock.now += 3 * INTERVAL  # then killed
    owner = lease(store, clock, "d")
    owner.acquire()
    owner.renew()
    assert store.list("lease") == [f"lease/{n:012d}.json" for n in (2, 4, 5, 6, 7)]


# -- fences: the record a takeover created is never deleted --------------------------------------


def _store(journal_location: str) -> JournalStore:
    return Journal(journal_location, make_options(journal_location, region="us-east-1")).store


def test_an_owner_back_from_a_long_pause_finds_its_renewal_fenced_whatever_the_listing_shows(
    journal_location: str,
) -> None:
    """Found by the simulation (``--unkind all,replans``, seed 771): a driver frozen for longer
    than two intervals while it replayed a batch woke up. The query that had taken over had
    renewed past the frozen driver's next number and deleted it, so the renewal's create
    succeeded (a hole); the listing lagged the new owner's records and the number after was
    deleted too, so the renewal counted, and the deposed driver ran receivers beside the new
    owner. The takeover's record is kept for good: the create fails, whatever is listed."""
    clock = Clock(NOW)
    real = _store(journal_location)
    paused = lease(real, clock, "paused")
    paused.acquire()  # record 0, then frozen
    new = lease(real, clock, "new")
    new.acquire()  # watches record 0 for two intervals, then creates record 1: a fence
    for _ in range(6):
        new.renew()  # records 2 to 7; 0, 2 and 3 are deleted
    assert real.read("lease/000000000001.json") is not None, "the fence is kept"
    assert real.read("lease/000000000002.json") is None
    assert real.read("lease/000000000003.json") is None
    # A listing that lags the new owner's recent records (the fence is older).
    recent = set(real.list("lease")) - {"lease/000000000001.json"}
    paused._store = ListHidingStore(real, lambda key: key in recent)

    with pytest.raises(JournalInUseError, match=r"run new\) took over"):
        paused.confirm()
    new.renew()  # the new owner keeps the journal


def test_every_later_owner_keeps_a_fence(journal_location: str) -> None:
    """An owner frozen across two takeovers (the second after a clean stop) still finds its
    next number taken: each owner inherits the fences named in the record it took over from.
    The takeover from a released record is no fence (its owner renews no more), and goes with
    the other old records."""
    clock = Clock(NOW)
    store = _store(journal_location)
    frozen = lease(store, clock, "frozen")
    frozen.acquire()  # record 0
    second = lease(store, clock, "second")
    second.acquire()  # record 1, a fence
    second.renew()
    second.release()  # records 2 and 3 (released)
    third = lease(store, clock, "third")
    third.acquire()  # record 4, taken at once: no fence
    for _ in range(6):
        third.renew()  # records 5 to 10
    assert store.list("lease") == [f"lease/{n:012d}.json" for n in (1, 7, 8, 9, 10)]
    with pytest.raises(JournalInUseError, match=r"took over"):
        frozen.renew()
    assert len(store.list("lease")) == 5, "the failed renewal wrote nothing"
