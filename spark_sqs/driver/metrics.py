"""The counters of each acknowledged batch: one INFO line, and the counters the batch's
acknowledged marker holds. Runs on: driver.

The acknowledger hands over what it settled (rows journaled, deleted, dropped, lag) before it
writes the batch's acknowledged marker; this adds what only the driver knows (receivers that
replayed, the heartbeat's work since the previous batch, the queue's in-flight count as last
polled) and returns them for the marker (``state/acked-<N>``, read by journal/metrics.py;
docs/operations.md lists the fields). No request of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .heartbeat import Heartbeat
    from .queues import BacklogPoller

logger = logging.getLogger(__name__)

#: The counters of the newest settled batch that go into Spark's progress report (Spark 4.2+,
#: ``sources[0].latestOffset.lastBatch``); the acknowledged marker has them all.
PROGRESS_COUNTERS = (
    "batch",
    "received",
    "journaled",
    "deleted",
    "deleteFailures",
    "uncertainAcknowledgements",
    "duplicatesDropped",
    "duplicateWindowDropped",
    "visibilityExtensionFailures",
    "oldestMessageAgeMs",
    "medianMessageAgeMs",
    "acknowledgedAt",
)


class BatchReporter:
    def __init__(
        self,
        heartbeat: Heartbeat,
        poller: BacklogPoller,
        wall_clock: Callable[[], float],
    ) -> None:
        self._heartbeat = heartbeat
        self._poller = poller
        self._wall = wall_clock
        # Receivers that replayed from the journal, by batch (set when the batch is planned).
        self.replayed: dict[int, int] = {}
        self._heartbeat_seen = (0, 0)
        # The newest settled batch's counters for the progress report (reportLatestOffset).
        self.latest: dict[str, Any] | None = None

    def report(self, counters: dict[str, Any]) -> dict[str, Any]:
        """Log the counters of one acknowledged batch; returns them with the driver's own, for
        its acknowledged marker."""
        hb = self._heartbeat.stats
        extended, failed = hb.extended, hb.failed_permanent + hb.failed_transient
        batch = counters["batch"]
        # Batches up to this one are acknowledged; one that never is (adopted into a later
        # batch) must not stay here for the rest of the run.
        for done in [b for b in self.replayed if b < batch]:
            del self.replayed[done]
        counters = {
            **counters,
            "replayedReceivers": self.replayed.pop(batch, 0),
            "received": counters["journaled"] + counters["duplicatesDropped"],
            # Heartbeat work since the previous acknowledged batch.
            "visibilityExtensions": extended - self._heartbeat_seen[0],
            "visibilityExtensionFailures": failed - self._heartbeat_seen[1],
            # As last polled: the queue's ApproximateNumberOfMessagesNotVisible.
            "inFlightMessages": self._poller.total.get("ApproximateNumberOfMessagesNotVisible"),
            "acknowledgedAt": self._wall(),
        }
        self._heartbeat_seen = (extended, failed)
        self.latest = {key: counters.get(key) for key in PROGRESS_COUNTERS}
        logger.info(
            "batch %d: received %d, journaled %d, replayed receivers %d, deleted %d, delete "
            "failures %d, visibility extensions %d (failed %d), duplicates dropped %d (copies "
            "within duplicateWindow %d), oldest message age %s ms (median %s ms), in flight %s",
            counters["batch"],
            counters["received"],
            counters["journaled"],
            counters["replayedReceivers"],
            counters["deleted"],
            counters["deleteFailures"],
            counters["visibilityExtensions"],
            counters["visibilityExtensionFailures"],
            counters["duplicatesDropped"],
            counters.get("duplicateWindowDropped", 0),
            counters.get("oldestMessageAgeMs"),
            counters.get("medianMessageAgeMs"),
            counters["inFlightMessages"],
        )
        return counters
