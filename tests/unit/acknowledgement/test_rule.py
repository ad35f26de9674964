"""The acknowledgement rule alone (spark_sqs/acknowledgement/rule.py): which committed batches
are due, and who deletes them."""

from __future__ import annotations

import pytest

from spark_sqs.acknowledgement.rule import By, Step, due, once_planned, when_in_flight_is_full


def test_batches_assigned_to_a_committed_batch_are_settled_from_its_reports() -> None:
    assert due({1, 2, 3}, 2, {1: 2}, by=By.RECEIVERS) == [Step(1, settle_from=2)]
    assert due({1, 2, 3}, 3, {1: 2, 2: 3}, by=By.RECEIVERS) == [Step(1, 2), Step(2, 3)]


def test_a_batch_assigned_to_an_uncommitted_batch_waits_and_so_does_everything_after_it() -> None:
    # Batch 2's receivers have not all run: batch 1 waits, and batch 2 behind it too.
    assert due({1, 2}, 2, {1: 3}, by=By.DRIVER) == []
    assert due({1, 2, 3}, 3, {1: 2, 2: 4}, by=By.DRIVER) == [Step(1, 2)]


def test_the_newest_committed_batch_is_left_to_the_next_batch_s_receivers() -> None:
    assert due({4}, 4, {}, by=By.RECEIVERS) == []
    assert due({4}, 4, {}, by=By.DRIVER) == [Step(4)]


def test_an_earlier_unassigned_committed_batch_is_deleted_by_the_driver() -> None:
    """It had no entries when the next batch was planned, or that batch had no receiver that
    receives: no plan would ever assign it."""
    assert due({3, 4}, 4, {}, by=By.RECEIVERS) == [Step(3)]
    assert due({3, 4, 5}, 5, {4: 5}, by=By.RECEIVERS) == [Step(3), Step(4, 5)]


def test_without_deletes_the_driver_removes_even_the_newest_committed_batch() -> None:
    """deleteOnCommit=false: nothing is deleted, no receivers are assigned anything."""
    assert due({4}, 4, {}, by=By.RECEIVERS, deleting=False) == [Step(4)]


def test_only_committed_pending_batches_are_due_oldest_first() -> None:
    assert due({7, 5, 9, 6}, 7, {}, by=By.DRIVER) == [Step(5), Step(6), Step(7)]
    assert due(set(), 7, {}, by=By.DRIVER) == []


@pytest.mark.parametrize(
    ("available_now", "unassigned", "queue", "expected"),
    [
        (False, True, True, By.RECEIVERS),  # an acknowledge-only batch
        (False, True, False, By.DRIVER),  # an idle queue: no next batch would come
        (True, True, True, By.DRIVER),  # AvailableNow counts what is acknowledged
        (False, False, True, By.DRIVER),  # nothing left to assign
    ],
)
def test_when_in_flight_is_full(
    available_now: bool, unassigned: bool, queue: bool, expected: By
) -> None:
    asked: list[bool] = []

    def queue_has_messages() -> bool:
        asked.append(True)
        return queue

    by = when_in_flight_is_full(
        available_now=available_now, unassigned=unassigned, queue_has_messages=queue_has_messages
    )
    assert by is expected
    # The queue is polled only when its answer decides.
    assert asked == ([True] if not available_now and unassigned else [])


@pytest.mark.parametrize(
    ("next_batch", "available_now", "heartbeat_failed", "expected"),
    [
        (True, False, False, By.RECEIVERS),
        (False, False, False, By.DRIVER),
        (True, True, False, By.DRIVER),
        (True, False, True, By.DRIVER),
    ],
)
def test_once_planned(
    next_batch: bool, available_now: bool, heartbeat_failed: bool, expected: By
) -> None:
    assert (
        once_planned(
            next_batch=next_batch, available_now=available_now, heartbeat_failed=heartbeat_failed
        )
        is expected
    )
