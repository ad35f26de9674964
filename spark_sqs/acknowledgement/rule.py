"""When committed batches are acknowledged, and who deletes them. Runs on: driver.

The whole rule, as pure functions of what the driver knows; ``Coordinator.latest_offset`` and
``commit`` ask them, the ``Acknowledger`` carries out what they decide.

A committed batch's messages are deleted by one of two parties:

- the *receivers* of the next batch (``By.RECEIVERS``): its plan spreads the committed entries
  over them (``AckAssignment``), each deletes its share on an executor before it receives and
  writes a report; once that next batch commits, the driver settles the batch from the reports;
- the *driver* itself (``By.DRIVER``), with parallel batch calls, when no next batch will come:
  an idle queue, the end of ``Trigger.AvailableNow`` (which counts what it delivered by what is
  acknowledged), a heartbeat that failed for good (the query stops), or the committed batches
  alone filling ``maxInFlightMessages`` while the queue has nothing more.

``due`` says which committed batches are acted on now and how, in order; the acknowledged
watermark never passes a batch whose messages may still be in SQS, so the caller stops at the
first one it cannot finish.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass


class By(enum.Enum):
    """Who deletes the committed batches not yet assigned to anyone's receivers."""

    RECEIVERS = "the next batch's receivers"
    DRIVER = "the driver"


@dataclass(frozen=True)
class Step:
    """One committed batch acted on now: settled from the reports of the receivers of
    ``settle_from``, or (``settle_from`` None) deleted by the driver itself."""

    batch: int
    settle_from: int | None = None


def due(
    pending: Collection[int],
    committed: int,
    assigned: Mapping[int, int],
    *,
    by: By,
    deleting: bool = True,
) -> list[Step]:
    """The pending batches up to ``committed`` (which Spark committed) to act on now, oldest
    first. ``assigned``: committed batch -> the batch whose receivers delete it; ``deleting``:
    deleteOnCommit (without it nothing is deleted: the driver only removes the entries).

    A batch assigned to a batch Spark has committed is settled from its receivers' reports; one
    assigned to a later batch waits, and so does everything after it (those receivers have not
    all run). With ``by=RECEIVERS``, ``committed`` itself, if unassigned, is left to the batch
    about to be planned. Any other committed batch no receivers were given (it had no entries
    when the next batch was planned, or that batch had no receiver that receives, a replay) is
    deleted by the driver: waiting for a plan to assign it could wait forever."""
    out: list[Step] = []
    for batch in sorted(b for b in pending if b <= committed):
        acknowledging = assigned.get(batch)
        if acknowledging is not None:
            if acknowledging > committed:
                break
            out.append(Step(batch, acknowledging))
            continue
        if by is By.RECEIVERS and deleting and batch == committed:
            break
        out.append(Step(batch))
    return out


def when_in_flight_is_full(
    *, available_now: bool, unassigned: bool, queue_has_messages: Callable[[], bool]
) -> By:
    """The committed batches alone fill maxInFlightMessages: no batch may receive before they
    are deleted. While the queue has more, the next batch only acknowledges (its receivers
    delete them on the executors and receive nothing); otherwise (an idle queue, AvailableNow,
    nothing left to assign, e.g. deleteOnCommit=false) no next batch would come for them, and
    the driver deletes them itself. ``queue_has_messages`` is asked last, only when it decides
    (it may poll the queue)."""
    if not available_now and unassigned and queue_has_messages():
        return By.RECEIVERS
    return By.DRIVER


def once_planned(*, next_batch: bool, available_now: bool, heartbeat_failed: bool = False) -> By:
    """Who deletes the committed batches once ``latestOffset`` knows whether a next batch
    starts: its receivers, unless none starts, the trigger is AvailableNow (which counts what it
    delivered by what is acknowledged) or the heartbeat failed for good (the query stops)."""
    if heartbeat_failed or not next_batch or available_now:
        return By.DRIVER
    return By.RECEIVERS
