"""driver/state.py: the driver's view of the journal's state markers, on both stores."""

from __future__ import annotations

from spark_sqs.driver.state import StateMarkers
from spark_sqs.journal import Journal


def _markers(journal: Journal) -> list[str]:
    return sorted(journal.store.list("state"))


def test_advancing_adds_the_new_marker_and_removes_the_old(journal_location: str) -> None:
    journal = Journal(journal_location)
    markers = StateMarkers(journal)
    assert (markers.planned, markers.acked, markers.initial) == (0, 0, None)

    markers.advance(initial=0)
    markers.advance(planned=1)
    markers.advance(planned=2)
    markers.advance(acked=1)

    assert _markers(journal) == [
        "state/acked-000000000001",
        "state/initial-000000000000",
        "state/planned-000000000002",
    ]
    # A new driver (a restart) reads what this one wrote.
    again = StateMarkers(Journal(journal_location))
    assert (again.planned, again.acked, again.initial) == (2, 1, 0)


def test_the_first_offset_is_never_moved(journal_location: str) -> None:
    """Spark asks for initialOffset again after a restart whose first batch never committed:
    the answer must not change."""
    journal = Journal(journal_location)
    StateMarkers(journal).advance(initial=3)
    StateMarkers(journal).advance(initial=7)
    assert StateMarkers(journal).initial == 3


def test_a_reserved_batch_is_planned_before_it_is_handed_out(journal_location: str) -> None:
    journal = Journal(journal_location)
    markers = StateMarkers(journal)
    markers.advance(planned=4)
    assert markers.reserve_batch() == 5
    assert markers.reserve_batch() == 6
    # A restart plans after the reserved numbers, never on top of them.
    assert StateMarkers(Journal(journal_location)).planned == 6


def test_acknowledging_past_a_retired_batch_removes_its_marker(journal_location: str) -> None:
    journal = Journal(journal_location)
    journal.retire(3)
    journal.retire(8)
    markers = StateMarkers(journal)
    assert markers.current.retired == frozenset({3, 8})

    markers.advance(planned=9, acked=5)

    assert "state/retired-000000000003" not in _markers(journal)
    assert "state/retired-000000000008" in _markers(journal)
    assert markers.current.retired == frozenset({8})
    assert markers.current == StateMarkers(Journal(journal_location)).current
    assert markers.current.finished(3) and markers.current.finished(8)
    assert not markers.current.finished(6)
