"""The per-task send engine of the SQS sink. Runs on: executors.

``Sender.send`` takes one partition's entries (lazily, a bounded look-ahead at a time) and sends
them with ``SendMessageBatch``: at most 10 entries and ``max_batch_bytes`` per call, several
calls in flight on a thread pool (boto3 calls release the GIL while they wait on the network).

Failures: botocore already retries a throttled or failed call a few times; what still fails
(a whole call, or single entries in the response's ``Failed`` list) is retried here with
exponential backoff and jitter. Throttling is absorbed (it is retried for five times as many
attempts as other errors); an entry SQS rejects as the sender's fault, or one that exhausts its
attempts, fails the task, and Spark retries the task (FIFO deduplication ids make that safe).

FIFO order: entries of one message group leave in input order. A call carries at most one
entry per group, and a group has at most one entry in flight: its next entry waits for the
previous call's answer, and a failed entry goes back to the head of its group, holding back the
group's later entries until it is sent. SQS documents no ordering between entries of one group
in one call when one of them fails, so packing several would risk order on a partial failure.
Different groups go in parallel, ten per call.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from typing import Any

from ..sqs.client import SqsClient, classify, error_code
from .errors import SinkSendError
from .rows import Entry

logger = logging.getLogger(__name__)

MAX_BATCH_ENTRIES = 10
MAX_BATCH_BYTES = 1024 * 1024
LOOK_AHEAD_BYTES = 64 * 1024 * 1024
_THROTTLING = {
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "AWS.SimpleQueueService.RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "KmsThrottled",
    "KMS.ThrottlingException",
}
THROTTLE_ATTEMPT_FACTOR = 5


@dataclass
class SendCounters:
    """What one task did; summed per batch by the writer's commit()."""

    rows: int = 0
    sent: int = 0
    retried: int = 0
    throttled: int = 0
    failed: int = 0
    calls: int = 0
    deadLettered: int = 0  # noqa: N815 - the name the metrics files use
    dedupeAttributeSkipped: int = 0  # noqa: N815

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def add(self, other: SendCounters) -> None:
        for key, value in asdict(other).items():
            setattr(self, key, getattr(self, key) + value)


class Sender:
    def __init__(
        self,
        client: SqsClient,
        queue_url: str,
        *,
        fifo: bool,
        max_in_flight: int = 4,
        max_attempts: int = 10,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        backoff_base: float = 0.05,
        backoff_cap: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.queue_url = queue_url
        self.fifo = fifo
        self.max_in_flight = max_in_flight
        self.max_attempts = max_attempts
        self.max_batch_bytes = max_batch_bytes
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.clock = clock
        self.counters = SendCounters()
        # Enough look-ahead to fill every call in flight twice over (on FIFO queues, to find
        # ten groups per call behind a run of one group), and no more: a partition's rows are
        # never all held in memory.
        self.look_ahead = max_in_flight * MAX_BATCH_ENTRIES * (20 if fifo else 2)
        self.look_ahead_bytes = LOOK_AHEAD_BYTES
        self._pending_bytes = 0
        self._seq = itertools.count()
        # Standard queues: entries ready to go, and retries waiting for their backoff.
        self._ready: deque[Entry] = deque()
        self._waiting: list[tuple[float, int, Entry]] = []
        # FIFO: each group's entries in order; groups free to send; groups backing off.
        self._groups: dict[str, deque[Entry]] = {}
        self._free_groups: deque[str] = deque()
        self._waiting_groups: list[tuple[float, int, str]] = []
        self._pending = 0

    # -- public -------------------------------------------------------------------------------

    def send(self, entries: Iterable[Entry]) -> SendCounters:
        """Send every entry; returns the counters or raises (``SinkSendError`` and the errors
        of ``spark_sqs.sqs.client.classify``)."""
        source: Iterator[Entry] = iter(entries)
        exhausted = False
        in_flight: dict[Future[Any], list[Entry]] = {}
        pool = ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="sqs-sink")
        try:
            while True:
                while (
                    not exhausted
                    and self._pending < self.look_ahead
                    and self._pending_bytes < self.look_ahead_bytes
                ):
                    entry = next(source, None)
                    if entry is None:
                        exhausted = True
                    else:
                        self._add(entry)
                now = self.clock()
                self._release_due(now)
                while len(in_flight) < self.max_in_flight:
                    batch = self._next_batch()
                    if not batch:
                        break
                    self.counters.calls += 1
                    future = pool.submit(self._call, batch)
                    in_flight[future] = batch
                if not in_flight:
                    if exhausted and self._pending == 0:
                        return self.counters
                    # Everything left is backing off.
                    assert self._has_waiting(), "entries pending but none can be sent"
                    time.sleep(max(0.0, min(self._next_due() - now, self.backoff_cap)))
                    continue
                timeout = self._next_due() - now if self._has_waiting() else None
                done, _ = wait(list(in_flight), timeout=timeout, return_when=FIRST_COMPLETED)
                for future in done:
                    self._settle(in_flight.pop(future), future)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    # -- queueing -----------------------------------------------------------------------------

    def _add(self, entry: Entry) -> None:
        self._pending += 1
        self._pending_bytes += entry.size
        if not self.fifo:
            self._ready.append(entry)
            return
        group = self._groups.get(entry.group_id)  # type: ignore[arg-type]
        if group is None:
            self._groups[entry.group_id] = deque([entry])  # type: ignore[index]
            self._free_groups.append(entry.group_id)  # type: ignore[arg-type]
        else:
            # The group is free (and listed), in flight or backing off: it is picked up again
            # when that ends.
            group.append(entry)

    def _next_batch(self) -> list[Entry]:
        batch: list[Entry] = []
        size = 0
        if not self.fifo:
            while self._ready and len(batch) < MAX_BATCH_ENTRIES:
                if batch and size + self._ready[0].size > self.max_batch_bytes:
                    break
                entry = self._ready.popleft()
                size += entry.size
                batch.append(entry)
            return batch
        skipped: list[str] = []
        while self._free_groups and len(batch) < MAX_BATCH_ENTRIES:
            group_id = self._free_groups.popleft()
            entry = self._groups[group_id][0]
            if batch and size + entry.size > self.max_batch_bytes:
                skipped.append(group_id)
                continue
            self._groups[group_id].popleft()
            size += entry.size
            batch.append(entry)
        # Groups whose head did not fit stay first in line for the next call.
        self._free_groups.extendleft(reversed(skipped))
        return batch

    def _release_due(self, now: float) -> None:
        while self._waiting and self._waiting[0][0] <= now:
            self._ready.append(heapq.heappop(self._waiting)[2])
        while self._waiting_groups and self._waiting_groups[0][0] <= now:
            self._free_groups.append(heapq.heappop(self._waiting_groups)[2])

    def _has_waiting(self) -> bool:
        return bool(self._waiting or self._waiting_groups)

    def _next_due(self) -> float:
        dues = [w[0] for w in self._waiting[:1]] + [w[0] for w in self._waiting_groups[:1]]
        return min(dues) if dues else self.clock()

    # -- calls --------------------------------------------------------------------------------

    def _call(self, batch: list[Entry]) -> Any:
        return self.client.send_message_batch(
            QueueUrl=self.queue_url,
            Entries=[e.request(str(i), fifo=self.fifo) for i, e in enumerate(batch)],
        )

    def _settle(self, batch: list[Entry], future: Future[Any]) -> None:
        # One jitter per call: the entries of a failed call come due together and go back out
        # together, rather than one per call.
        jitter = 0.5 + random.random() / 2
        try:
            response = future.result()
        except Exception as exc:
            err = classify(exc, "SendMessageBatch", self.queue_url)
            if not err.retriable:
                raise err from None
            throttled = error_code(exc) in _THROTTLING
            logger.debug("SendMessageBatch failed, retrying %d entries: %s", len(batch), err)
            for entry in batch:
                self._retry(entry, throttled, str(err), jitter)
            return
        failed = {f.get("Id"): f for f in response.get("Failed", [])}
        succeeded = {s.get("Id") for s in response.get("Successful", [])}
        for i, entry in enumerate(batch):
            key = str(i)
            if key in succeeded:
                self._done(entry)
                continue
            failure = failed.get(key, {"Code": "Missing", "Message": "not in the response"})
            code = str(failure.get("Code", ""))
            if failure.get("SenderFault") and code not in _THROTTLING:
                self.counters.failed += 1
                raise SinkSendError(
                    f"SQS rejected the row at position {entry.position} of this partition "
                    f"[{code}]: {str(failure.get('Message', ''))[:300]}. Fix: correct the row "
                    "(body characters, attribute names and types, deduplication or group id "
                    "format)"
                )
            self._retry(entry, code in _THROTTLING, code, jitter)

    def _done(self, entry: Entry) -> None:
        self.counters.sent += 1
        self._pending -= 1
        self._pending_bytes -= entry.size
        if self.fifo:
            group_id = entry.group_id
            group = self._groups[group_id]  # type: ignore[index]
            if group:
                self._free_groups.append(group_id)  # type: ignore[arg-type]
            else:
                del self._groups[group_id]  # type: ignore[arg-type]

    def _retry(self, entry: Entry, throttled: bool, reason: str, jitter: float) -> None:
        self.counters.failed += 1
        if throttled:
            entry.throttled += 1
            self.counters.throttled += 1
        else:
            entry.attempts += 1
        if (
            entry.attempts >= self.max_attempts
            or entry.throttled >= self.max_attempts * THROTTLE_ATTEMPT_FACTOR
        ):
            raise SinkSendError(
                f"SQS did not accept the row at position {entry.position} of this partition "
                f"after {entry.attempts + entry.throttled} attempts (last: {reason}). "
                "Fix: check the queue's health and throttling limits, or raise "
                "'maxSendAttempts'; Spark retries the task",
                retriable=True,
            )
        self.counters.retried += 1
        exponent = entry.attempts + entry.throttled - 1
        delay = min(self.backoff_cap, self.backoff_base * 2**exponent)
        not_before = self.clock() + delay * jitter
        entry.not_before = not_before
        if not self.fifo:
            heapq.heappush(self._waiting, (not_before, next(self._seq), entry))
            return
        # Back to the head of its group: nothing behind it may overtake it.
        self._groups[entry.group_id].appendleft(entry)  # type: ignore[index]
        heapq.heappush(self._waiting_groups, (not_before, next(self._seq), entry.group_id))  # type: ignore[arg-type]
