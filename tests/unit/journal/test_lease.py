"""The journal's lease: one live query per journal, takeover after a driver died."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from spark_sqs.errors import JournalInUseError, LeaseLostError
from spark_sqs.journal import Journal, LocalStore
from spark_sqs.journal.lease import HELD_FOR, Lease
from spark_sqs.journal.stores import JournalStore
from tests.factories import make_options
from tests.fakes import NOW, Clock, HookedStore, ListHidingStore

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
    twin.seq, twin._renewed_at = owner.seq, owner._renewed_at  # one Lease, two threads
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
    heartbeat.seq, heartbeat._renewed_at = owner.seq, owner._renewed_at  # one Lease, two threads
    owner.renew()  # record 1, then the driver thread pauses
    clock.now += 1.5 * INTERVAL
    heartbeat.renew()
    assert heartbeat.seq == 2
    assert store.read("lease/000000000002.json") is not None, "a record written now"


class _StallsOnce(LocalStore):
    """A store whose next delete (a renewal's, after its create) stalls the process for
    ``pause`` seconds first, during which ``meanwhile`` runs (another query taking over)."""

    def __init__(self, root: str, clock: Clock) -> None:
        super().__init__(root)
        self.clock = clock
        self.pause = 0.0
        self.meanwhile = lambda: None

    def delete(self, key: str) -> None:
        if self.pause:
            self.clock.now += self.pause
            self.pause = 0.0
            self.meanwhile()
        super().delete(key)


def test_a_confirmation_whose_renewal_stalled_renews_again(tmp_path: Path) -> None:
    clock = Clock(NOW)
    store = _StallsOnce(str(tmp_path / "journal"), clock)
    owner = lease(store, clock, "owner")
    owner.acquire()
    for _ in range(3):
        owner.renew()  # records 1 to 3: the next renewal deletes record 0
    clock.now += 1.1 * INTERVAL
    store.pause = 1.2 * INTERVAL  # after the renewal's create, before it returns
    owner.confirm()
    assert owner.seq == 5, "renewed again after the stalled renewal"

    # A stall during which another query takes over (record 7 after 6): the next renewal
    # finds it, and the confirmation stops the query before it acknowledges anything.
    clock.now += 1.1 * INTERVAL
    newcomer = lease(store, clock, "newcomer")
    store.pause = 2.5 * INTERVAL
    store.meanwhile = lambda: newcomer._write(7)
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
    clock.now += INTERVAL * 1.4
    owner.renew()
    owner.renew()
    owner.renew()
    clock.now += INTERVAL * 0.2  # records 1 to 3 are not listed yet; record 0 is
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
    # Renews three times between the next query's read and its create of record 1.
    racing.after["read"].append(lambda: (owner.renew(), owner.renew(), owner.renew()))
    clock.on_sleep.append(lambda: owner.renew() if clock.now % INTERVAL < 1 else None)

    with pytest.raises(JournalInUseError, match=r"run slow\) is using"):
        lease(racing, clock, "next").acquire()
    owner.renew()


def test_renewals_remove_a_crashed_runs_records(store: LocalStore) -> None:
    clock = Clock(NOW)
    for run in ("a", "b", "c"):
        crashed = lease(store, clock, run)
        crashed.acquire()
        crashed.renew()
        clock.now += 3 * INTERVAL  # then killed
    owner = lease(store, clock, "d")
    owner.acquire()
    owner.renew()
    assert store.list("lease") == [f"lease/{n:012d}.json" for n in range(4, 8)]


# -- a renewal after a silence longer than the lease ---------------------------------------------


def _taken_over_behind_a_lagging_listing(
    journal_location: str, clock: Clock, *, stall_in_create: float = 0.0
) -> tuple[Lease, Lease, HookedStore]:
    """``paused`` took the journal (record 0) and went silent; ``new`` took it over, renewed
    past record 2 and deleted records 0 to 2 (it keeps four). The store's listing does not
    show the new owner's records yet, and ``paused``'s next create of record 1 fills a hole.
    ``stall_in_create``: how long paused's creates stall before they return."""
    real = Journal(journal_location, make_options(journal_location, region="us-east-1")).store
    paused = lease(real, clock, "paused")
    paused.acquire()  # record 0
    new = lease(real, clock, "new")
    new.acquire()  # watches record 0 for two intervals, then record 1
    for _ in range(5):
        new.renew()  # records 2 to 6; 0 to 2 are deleted
    assert real.read("lease/000000000001.json") is None
    assert real.read("lease/000000000002.json") is None
    theirs = set(real.list("lease"))

    def stall(method: str, key: str) -> None:
        if method == "create":
            clock.now += stall_in_create

    seen = HookedStore(ListHidingStore(real, lambda key: key in theirs), after=stall)
    paused._store = seen
    return paused, new, seen


def test_a_renewal_after_a_silence_longer_than_its_lease_is_lost_though_no_listing_shows_it(
    journal_location: str,
) -> None:
    """Found by the simulation (``--unkind all,replans``, seed 771): a driver frozen for longer
    than two intervals while it replayed a batch woke up; its renewal's create of the next
    number succeeded (a hole the new owner had made), and neither the lagging listing nor a
    read of the number after showed the new owner's records: the renewal counted, and the
    deposed driver ran receivers beside the new owner. The renewal came more than HELD_FOR
    intervals after the last one on the driver's clock: the lease is lost, whatever a
    listing shows."""
    clock = Clock(NOW)
    paused, new, store = _taken_over_behind_a_lagging_listing(journal_location, clock)
    assert clock.now - paused._renewed_at >= 2 * INTERVAL

    with pytest.raises(LeaseLostError, match=r"journalLocation s3://b/j.*restart the query") as err:
        paused.confirm()
    assert err.value.retriable
    assert "more than the 15.0s" in str(err.value)
    new.renew()  # the new owner keeps the journal


def test_a_renewal_whose_own_create_stalls_past_the_lease_is_lost(journal_location: str) -> None:
    """Renewed in time, but the create itself returned too late (retried for seconds, a
    pause inside the call): it may have taken effect after a takeover, into a hole."""
    clock = Clock(NOW)
    paused, _, store = _taken_over_behind_a_lagging_listing(
        journal_location, clock, stall_in_create=3 * INTERVAL
    )
    paused._renewed_at = clock.now - 0.5 * INTERVAL  # it renewed half an interval ago
    with pytest.raises(LeaseLostError):
        paused.renew()


def test_a_renewal_within_the_lease_keeps_it(journal_location: str) -> None:
    real = Journal(journal_location, make_options(journal_location, region="us-east-1")).store
    clock = Clock(NOW)
    owner = lease(real, clock, "owner")
    owner.acquire()
    clock.now += HELD_FOR * INTERVAL  # a pause, but not longer than the lease
    owner.renew()
    clock.now += INTERVAL + 1.0  # the next confirmation renews once the last is an interval old
    owner.confirm()
    assert owner.seq == 2
    stalls = HookedStore(real, after=lambda m, k: setattr(clock, "now", clock.now + 0.4 * INTERVAL))
    owner._store = stalls
    clock.now += INTERVAL  # the heartbeat's tick, whose create is slow: still within the lease
    owner.renew()
    assert owner.seq == 3


def test_a_lost_lease_stays_lost_and_is_not_released(journal_location: str) -> None:
    """Once lost, every renewal and confirmation raises without writing, and the release at
    query.stop() writes no released record: created into a hole, it would let the next query
    take, at once, a journal the new owner holds."""
    clock = Clock(NOW)
    paused, new, store = _taken_over_behind_a_lagging_listing(journal_location, clock)
    with pytest.raises(LeaseLostError):
        paused.renew()
    writes = len([c for c in store.calls if c[0] == "create"])
    clock.now += 0.1  # a while later, as if renewed just now: still lost
    paused._renewed_at = clock.now
    with pytest.raises(LeaseLostError):
        paused.renew()
    with pytest.raises(LeaseLostError):
        paused.confirm()
    paused.release()
    assert len([c for c in store.calls if c[0] == "create"]) == writes, "nothing written"
    records = [store.inner.read(k) or b"" for k in store.inner.inner.list("lease")]
    assert records and not [r for r in records if json.loads(r)["released"]]


def test_a_driver_back_from_a_pause_releases_nothing(journal_location: str) -> None:
    """query.stop() right after a long pause, with no renewal in between: the released
    record's create could fill a hole just the same. None is written; a restart waits."""
    clock = Clock(NOW)
    paused, _, store = _taken_over_behind_a_lagging_listing(journal_location, clock)
    paused.release()
    assert not [c for c in store.calls if c[0] == "create"]
    assert store.inner.read("lease/000000000001.json") is None
