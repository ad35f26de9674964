"""The journal's state markers (journal/state.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_sqs.journal import Journal, JournalState
from tests.factories import make_options
from tests.fakes import GhostListingStore, ListHidingStore


@pytest.fixture
def location(tmp_path: Path) -> str:
    # A directory that does not exist yet: the journal creates it.
    return str(tmp_path / "checkpoints" / "journal")


@pytest.fixture
def journal(location: str) -> Journal:
    return Journal(location, make_options(location))


def test_read_state_defaults_to_zero(journal: Journal) -> None:
    assert journal.state.read() == JournalState(planned_batch=0, acked_batch=0)


def test_state_round_trip_and_overwrite(journal: Journal, location: str) -> None:
    journal.state.write(JournalState(planned_batch=5, acked_batch=3))
    assert journal.state.read() == JournalState(5, 3)

    journal.state.write(JournalState(planned_batch=6, acked_batch=6))
    assert journal.state.read() == JournalState(6, 6)
    # A new process (another Journal object) sees the same state.
    assert Journal(location, make_options(location)).state.read() == JournalState(6, 6)


def test_state_markers_a_lagging_listing_still_shows_count_only_once_read(
    journal_location: str,
) -> None:
    """Found by the simulation (seed 1134 --unkind all): the journal was deleted and a run
    started anew while the listing still showed the old journal's markers; the new journal
    took planned=6 from them, and Spark's replay of the checkpoint's batch 0..6 was answered
    with an empty batch instead of being refused."""
    options = make_options(journal_location, region="us-east-1")
    old = Journal(journal_location, options)
    old.state.write(JournalState(planned_batch=6, acked_batch=5))
    ghosts = old.store.list("state")
    old.store.delete_many(ghosts)

    deleted = Journal(journal_location, options, store=GhostListingStore(old.store, ghosts))
    assert deleted.state.read().planned_batch == 0
    assert deleted.state.read().acked_batch == 0

    # A newer marker that exists beside a listed one that is gone: the newest that exists.
    again = Journal(journal_location, options, store=GhostListingStore(old.store, ghosts))
    again.state.write(JournalState(planned_batch=2, acked_batch=1))
    state = again.state.read()
    assert (state.planned_batch, state.acked_batch) == (2, 1)


def test_the_newest_acknowledged_marker_counts_when_a_listing_hides_it(
    journal_location: str,
) -> None:
    """A driver created ``state/acked-3`` (naming a dedupe record of batch 3) and died before
    it removed batch 3's plan; the store's listing lags that marker. Taken from the LIST alone,
    the state said 2: batch 3 was pending again (a new checkpoint adopts it as an orphan and
    delivers it twice) and the dedupe record was named by no marker read. Numbers above the
    newest listed marker are read by key, down from the newest planned one (4 here: batch 4
    was planned, never acknowledged)."""
    options = make_options(journal_location, region="us-east-1")
    driver = Journal(journal_location, options)
    known = driver.state.read()
    for acked in (1, 2):
        state = JournalState(planned_batch=acked, acked_batch=acked - 1)
        driver.state.write(state, known)
        driver.state.write(JournalState(acked, acked), state)
        known = JournalState(acked, acked)
    driver.dedupe.write(3, ["m1"], now=0.0, window=1000.0, wall=1_700_000_000.0)
    driver.state.write(JournalState(3, 2), known)
    driver.state.write(JournalState(3, 3), JournalState(3, 2))
    driver.state.write(JournalState(4, 3), JournalState(3, 3))
    newest = "state/acked-000000000003"
    hiding = ListHidingStore(driver.store, lambda key: key == newest)
    assert newest not in hiding.list("state") and "state/acked-000000000002" in hiding.list("state")

    restarted = Journal(journal_location, options, store=hiding)
    state = restarted.state.read()

    assert (state.planned_batch, state.acked_batch) == (4, 3)
    assert list(restarted.dedupe.named) == list(driver.dedupe.keys)
    reads = [k for m, k in hiding.calls if m == "read" and k.startswith("state/acked-")]
    assert reads == ["state/acked-000000000002", "state/acked-000000000004", newest]
