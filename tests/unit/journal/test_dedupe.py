"""The journal's redelivery dedupe records (journal/dedupe.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from spark_sqs.journal import EXPIRES_AT, Journal, JournalState
from tests.factories import make_options
from tests.fakes import ListHidingStore


@pytest.fixture
def location(tmp_path: Path) -> str:
    # A directory that does not exist yet: the journal creates it.
    return str(tmp_path / "checkpoints" / "journal")


@pytest.fixture
def journal(location: str) -> Journal:
    return Journal(location, make_options(location))


WINDOW = 1000.0


def test_dedupe_records_are_kept_a_window_on_the_writer_s_monotonic_clock(
    journal: Journal, location: str
) -> None:
    assert journal.dedupe.read(now=0.0, window=WINDOW) == {}

    journal.dedupe.write(3, ["a", "b"], now=0.0, window=WINDOW, wall=1_700_000_000.0)
    journal.dedupe.write(4, ["b", "c"], now=500.0, window=WINDOW, wall=1_700_000_500.0)

    # An id recorded twice keeps the later time.
    assert journal.dedupe.read(now=600.0, window=WINDOW) == {"a": 1000.0, "b": 1500.0, "c": 1500.0}
    assert journal.dedupe.read(now=1000.0, window=WINDOW) == {"b": 1500.0, "c": 1500.0}
    assert list(journal.dedupe.keys.values()) == [1500.0], "markers name only the kept record"
    # What was let go of is removed by key when collected.
    journal.dedupe.collect(1200.0)
    assert [n[:13] for n in os.listdir(Path(location) / "dedupe")] == ["000000000004-"]
    journal.dedupe.collect(1500.0)
    assert journal.dedupe.keys == {}
    assert not (Path(location) / "dedupe").exists()


def test_a_record_read_at_start_is_kept_a_window_from_the_start_whatever_its_written_expiry(
    journal: Journal, location: str
) -> None:
    """The written expiry is the writer's wall clock: an earlier version judges by it, never
    this one (the reader's clocks are another host's)."""
    journal.dedupe.write(9, ["x"], now=5.0, window=WINDOW, wall=1_700_000_000.0)
    [key] = journal.dedupe.keys
    data = journal.store.read(key)
    assert data is not None
    metadata = pa.ipc.open_file(pa.BufferReader(data)).schema.metadata
    assert float(metadata[EXPIRES_AT]) == 1_700_000_000.0 + WINDOW

    again = Journal(location, make_options(location))
    assert again.dedupe.read(now=40_000.0, window=WINDOW) == {"x": 40_000.0 + WINDOW}
    # Read again by the same process, it keeps its time.
    assert again.dedupe.read(now=40_500.0, window=WINDOW) == {"x": 40_000.0 + WINDOW}
    assert again.dedupe.read(now=41_000.0, window=WINDOW) == {}
    again.dedupe.collect(41_000.0)
    assert not (Path(location) / "dedupe").exists()


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
    driver.dedupe.write(3, ["m1", "m2"], now=1000.0, window=WINDOW, wall=1_700_000_000.0)
    driver.state.write(JournalState(planned_batch=3, acked_batch=3))

    hidden = ListHidingStore(driver.store, lambda key: key.startswith("dedupe/"))
    restarted = Journal(journal_location, options, store=hidden)
    restarted.state.read()
    assert restarted.dedupe.read(now=100.0, window=WINDOW) == {"m1": 1100.0, "m2": 1100.0}

    # Records let go of are no longer named by later markers.
    restarted.dedupe.write(4, ["m3"], now=1100.0, window=WINDOW, wall=1_700_000_000.0)
    restarted.state.write(JournalState(planned_batch=4, acked_batch=4))
    again = Journal(journal_location, options, store=hidden)
    again.state.read()
    assert again.dedupe.read(now=0.0, window=WINDOW) == {"m3": WINDOW}


def test_a_restart_keeps_a_named_record_only_what_it_had_left(journal_location: str) -> None:
    """A record's time is counted on each driver's monotonic clock and carried in the
    acknowledged marker as a duration: a query restarted more often than the window (short
    runs, e.g. a scheduled availableNow trigger) still lets it go once its runs add up to the
    window, and a restart never keeps it shorter than what was left."""
    options = make_options(journal_location, region="us-east-1")
    driver = Journal(journal_location, options)
    driver.state.read()
    driver.dedupe.write(3, ["m1"], now=50.0, window=WINDOW, wall=1_700_000_000.0)
    driver.dedupe.expire(650.0)
    driver.state.write(JournalState(planned_batch=3, acked_batch=3))

    # A restart on another host: a fresh monotonic clock, its wall clock irrelevant.
    restarted = Journal(journal_location, options)
    state = restarted.state.read()
    assert restarted.dedupe.read(now=7.0, window=WINDOW) == {"m1": 7.0 + 400.0}
    restarted.dedupe.expire(307.0)
    restarted.state.write(JournalState(planned_batch=4, acked_batch=4), known=state)

    again = Journal(journal_location, options)
    again.state.read()
    assert again.dedupe.read(now=0.0, window=WINDOW) == {"m1": 100.0}
    assert again.dedupe.read(now=100.0, window=WINDOW) == {}
    again.dedupe.collect(100.0)
    assert again.store.list("dedupe") == []


def test_a_marker_that_names_a_record_without_its_time_keeps_it_a_window(
    journal_location: str,
) -> None:
    """An earlier version's marker names its records without what they have left."""
    options = make_options(journal_location, region="us-east-1")
    driver = Journal(journal_location, options)
    driver.state.read()
    driver.dedupe.write(3, ["m1"], now=0.0, window=WINDOW, wall=1_700_000_000.0)
    [key] = driver.dedupe.keys
    driver.store.create("state/acked-000000000003", json.dumps({"dedupe": [key]}).encode())

    restarted = Journal(journal_location, options)
    restarted.state.read()
    assert restarted.dedupe.read(now=5.0, window=WINDOW) == {"m1": 5.0 + WINDOW}
