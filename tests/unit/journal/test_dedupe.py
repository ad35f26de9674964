"""The journal's redelivery dedupe records (journal/dedupe.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_sqs.journal import Journal, JournalState
from tests.factories import make_options
from tests.fakes import ListHidingStore


@pytest.fixture
def location(tmp_path: Path) -> str:
    # A directory that does not exist yet: the journal creates it.
    return str(tmp_path / "checkpoints" / "journal")


@pytest.fixture
def journal(location: str) -> Journal:
    return Journal(location, make_options(location))


def test_dedupe_record_round_trip_and_expiry(journal: Journal, location: str) -> None:
    assert journal.dedupe.read(now=0.0) == {}

    journal.dedupe.write(3, ["a", "b"], expires_at=1000.0)
    journal.dedupe.write(4, ["b", "c"], expires_at=2000.0)

    # An id recorded twice keeps the later expiry.
    assert journal.dedupe.read(now=500.0) == {"a": 1000.0, "b": 2000.0, "c": 2000.0}
    assert journal.dedupe.read(now=1000.0) == {"b": 2000.0, "c": 2000.0}
    # Expired records are removed from the journal.
    assert [n[:13] for n in os.listdir(Path(location) / "dedupe")] == ["000000000004-"]
    assert journal.dedupe.read(now=2000.0) == {}
    assert not (Path(location) / "dedupe").exists()


def test_dedupe_record_survives_a_restart(journal: Journal, location: str) -> None:
    journal.dedupe.write(9, ["x"], expires_at=1_800_000_000.5)
    again = Journal(location, make_options(location))
    assert again.dedupe.read(now=1_700_000_000.0) == {"x": 1_800_000_000.5}


def test_dedupe_records_are_found_by_key_through_the_acknowledged_marker(
    journal_location: str,
) -> None:
    """Found by the simulation (seed 374 --unkind all): a journal put back while the listing
    still hid what it held; the next start found no dedupe record by its LIST, so redeliveries
    of messages whose deletes may not have taken effect were journaled and delivered again.
    The newest acknowledged marker names the live records, which a start reads by key."""
    options = make_options(journal_location, region="us-east-1")
    driver = Journal(journal_location, options)
    driver.state.read()
    driver.dedupe.write(3, ["m1", "m2"], expires_at=2000.0, now=1000.0)
    driver.state.write(JournalState(planned_batch=3, acked_batch=3))

    hidden = ListHidingStore(driver.store, lambda key: key.startswith("dedupe/"))
    restarted = Journal(journal_location, options, store=hidden)
    restarted.state.read()
    assert restarted.dedupe.read(now=1500.0) == {"m1": 2000.0, "m2": 2000.0}

    # Expired records are no longer named by later markers, and are removed when read.
    restarted.dedupe.write(4, ["m3"], expires_at=3000.0, now=2500.0)
    restarted.state.write(JournalState(planned_batch=4, acked_batch=4))
    again = Journal(journal_location, options, store=hidden)
    again.state.read()
    assert again.dedupe.read(now=2600.0) == {"m3": 3000.0}
