"""driver/state.py: the driver's view of the journal's state markers, on both stores."""

from __future__ import annotations

from spark_sqs.driver.state import StateMarkers
from spark_sqs.journal import Journal


def _markers(journal: Journal) -> list[str]:
    return sorted(journal.store.list("state"))


def test_advancing_adds_the_new_marker_and_removes_the_old_acked_one(journal_location: str) -> None:
    journal = Journal(journal_location)
    markers = StateMarkers(journal)
    assert (markers.planned, markers.acked, markers.initial) == (0, 0, None)

    markers.advance(initial=0)
    markers.advance(planned=1)
    markers.advance(planned=2)
    markers.advance(acked=1)

    assert _markers(journal) == [
        "state/acked-000000000001",
        "state/initial.json",
        # The newest planned markers are kept (a listing that lags still shows one).
        "state/planned-000000000001",
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


def test_retirement_markers_of_an_earlier_version_become_the_batches_own(
    journal_location: str,
) -> None:
    from spark_sqs.journal import BatchPlan, ReceiverPlan

    journal = Journal(journal_location)
    for batch in (3, 8):
        journal.plans.write(BatchPlan(batch, (ReceiverPlan(0, 5),)))
        journal.store.create(f"state/retired-{batch:012d}", b"")
    journal.store.create("state/retired-000000000004", b"")  # its batch is gone already

    markers = StateMarkers(journal)

    assert markers.current.retired == frozenset()
    assert not [k for k in _markers(journal) if "retired" in k]
    assert journal.batches.status(3) == journal.batches.status(8) == "retired"
    assert journal.batches.status(4) == "removed"


def test_the_newest_planned_marker_is_confirmed_by_key_when_a_listing_lags(
    journal_location: str,
) -> None:
    """A batch number must never be handed out twice: markers above what a LIST shows are
    found by reading the next numbers."""
    journal = Journal(journal_location)
    markers = StateMarkers(journal)
    for batch in range(1, 21):
        markers.advance(planned=batch)
    real_list = journal.store.list
    journal.store.list = lambda prefix: [  # type: ignore[method-assign]
        k for k in real_list(prefix) if k < "state/planned-000000000015"
    ]
    assert StateMarkers(journal).planned == 20
    assert len([k for k in real_list("state") if "planned" in k]) == 16
