"""Keeps the journal's lease: renews it on a thread of its own. Runs on: driver.

The lease (``spark_sqs.journal.lease``) holds only while each renewal's create returns within
``HELD_FOR`` (one and a half) heartbeat intervals of the previous renewal's start, on this
process's monotonic clock; a later one may have filled a hole another query left, and loses the
lease for good. So the renewals must never wait for other work: this thread renews half an
interval after the previous renewal started (that one's listing and deletes included), from
right after ``Lease.acquire`` (the coordinator's start-up reads and removals can take seconds)
until the query stops. That leaves a whole interval for a slow store or a short pause before a
renewal comes too late; the visibility heartbeat (``heartbeat``), whose tick may take a while
(journal reads, SQS calls retried with backoff), renews nothing.

A renewal that fails is logged and tried again soon; one that finds the lease taken or lost
(``JournalInUseError``) is kept in ``fatal``, the thread ends, and the driver raises it at its
next call. The driver's own ``Lease.confirm`` before each plan, acknowledgement and delete
raises it too (a lost lease stays lost).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..errors import JournalInUseError
from ..journal.lease import Lease

logger = logging.getLogger(__name__)

# Intervals between the start of a renewal and the start of the next.
RENEW_EVERY = 0.5
# Intervals to wait at least between two tries (a renewal that failed is tried again then).
RETRY_AFTER = 0.1


class LeaseKeeper:
    def __init__(
        self, lease: Lease, interval: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.lease = lease
        self._interval = interval
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The lease was taken over or lost: raised by the driver at its next call.
        self.fatal: JournalInUseError | None = None
        self.failures = 0

    @property
    def done(self) -> bool:
        """Nothing left to renew: the lease is lost, or released (the query stopped)."""
        return self.fatal is not None or self.lease.seq is None

    def wait(self) -> float:
        """Seconds until the next renewal is due."""
        due = self.lease.renewed_at + RENEW_EVERY * self._interval
        return max(due - self._clock(), RETRY_AFTER * self._interval)

    def renew_safely(self) -> None:
        """One renewal that never raises: the thread's body."""
        if self.done:
            return
        try:
            self.lease.renew()
        except JournalInUseError as exc:
            self.fatal = exc
        except Exception:
            self.failures += 1
            logger.warning(
                "journal lease renewal failed (%d so far); retrying", self.failures, exc_info=True
            )

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="spark-sqs-lease", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self.done and not self._stop.wait(self.wait()):
            self.renew_safely()
