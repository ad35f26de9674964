"""Flow control: how much the next micro-batch may take, and whether to start it. Runs on: driver.

Spark 4.2+ hands ``latestOffset`` a read limit (``ReadMaxRows`` from ``maxMessagesPerTrigger``
by default, ``ReadAllAvailable`` for some triggers); Spark 4.0/4.1 hand none, and the option is
applied here instead. Whatever the trigger, a batch never takes more than
``maxInFlightMessages`` minus what is still unacknowledged. ``minMessagesPerTrigger`` /
``maxTriggerDelay`` hold a batch back until enough messages are visible, but not longer than the
delay. ``Trigger.AvailableNow`` reads the messages visible when the query starts, then stops.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..options import SqsOptions

logger = logging.getLogger(__name__)

try:  # Spark 4.2+
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
    )
except ImportError:  # Spark 4.0/4.1: no read limits for Python sources
    ReadAllAvailable = ReadLimit = ReadMaxRows = ReadMinRows = None  # type: ignore[misc,assignment]


def default_read_limit(options: SqsOptions) -> ReadLimit | None:
    """``getDefaultReadLimit`` for Spark 4.2+."""
    if ReadMaxRows is None:
        return None
    return ReadMaxRows(options.max_messages_per_trigger)


def batch_size_warning(options: SqsOptions) -> str | None:
    """Why the options make batches wait on each other's deletes, or None. A committed batch
    counts against ``maxInFlightMessages`` until the next batch's receivers have deleted it, so
    two batches are counted at once: above half of the limit, every other batch is smaller,
    and at or above it every other batch is acknowledge-only (empty). Not with
    ``deleteAfterJournal`` (a committed batch counts nothing) nor ``deleteOnCommit=false``."""
    size, limit = options.max_messages_per_trigger, options.max_in_flight_messages
    if not options.delete_on_commit or options.delete_after_journal or 2 * size <= limit:
        return None
    effect = (
        "every other micro-batch only deletes the one before it and delivers no rows"
        if size >= limit
        else "every other micro-batch delivers fewer rows than maxMessagesPerTrigger"
    )
    return (
        f"maxMessagesPerTrigger={size} is more than half of maxInFlightMessages={limit}: a "
        f"committed batch counts against the limit until the next batch has deleted it, so "
        f"{effect}. Fix: set maxMessagesPerTrigger to at most {limit // 2}, raise "
        "maxInFlightMessages (at most 120000), or set deleteAfterJournal=true"
    )


@dataclass
class AvailableNow:
    """The target of a ``Trigger.AvailableNow`` run: the messages visible when it started."""

    target: int
    delivered_at_start: int


class FlowControl:
    def __init__(self, options: SqsOptions, clock: Callable[[], float] = time.monotonic) -> None:
        self._options = options
        self._clock = clock
        self._last_batch = clock()
        self.available_now: AvailableNow | None = None

    def batch_limit(self, limit: ReadLimit | None, in_flight: int) -> int:
        """Messages the next batch may take (0: none now)."""
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            wanted = limit.max_rows
        elif ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable):
            # The trigger asks for everything (the option limit must be ignored); only the
            # in-flight ceiling still applies.
            wanted = self._options.max_in_flight_messages
        else:
            wanted = self._options.max_messages_per_trigger
        room = self._options.max_in_flight_messages - in_flight
        if room <= 0:
            logger.warning(
                "%d messages received and not yet acknowledged (maxInFlightMessages=%d): "
                "no new batch until deletes catch up",
                in_flight,
                self._options.max_in_flight_messages,
            )
            return 0
        return max(0, min(wanted, room))

    def wait_for_more(self, visible: int) -> bool:
        """True while ``minMessagesPerTrigger`` is not reached and ``maxTriggerDelay`` not over."""
        minimum = self._options.min_messages_per_trigger
        if minimum is None or self.available_now is not None or visible >= minimum:
            return False
        return self._clock() - self._last_batch < self._options.max_trigger_delay

    def started_batch(self) -> None:
        self._last_batch = self._clock()

    def remaining_available_now(self, delivered: int) -> int | None:
        """Messages still to deliver in an AvailableNow run; None outside one."""
        if self.available_now is None:
            return None
        return max(
            0, self.available_now.target - (delivered - self.available_now.delivered_at_start)
        )
