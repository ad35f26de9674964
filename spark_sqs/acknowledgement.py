"""Acknowledging messages: batch deletes and visibility changes. Runs on: driver and executors.

The driver deletes what a committed micro-batch journaled (``Acknowledger``). Executors use the
same batch calls to hand messages back (visibility 0) that they received but could not journal.

SQS batch calls take at most 10 entries and can answer HTTP 200 with a ``Failed`` list, so every
call is checked entry by entry: entries that failed for a transient reason are retried with
backoff; entries whose receipt handle is no longer valid cannot succeed and are reported.
Calls run in parallel on a small thread pool.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .client import classify, error_code
from .errors import SqsSourceError

logger = logging.getLogger(__name__)

BATCH_LIMIT = 10
# Failed-entry codes that no retry can fix: the handle is stale or the message is gone.
PERMANENT_ENTRY_CODES = {
    "ReceiptHandleIsInvalid",
    "InvalidReceiptHandle",
    "MessageNotInflight",
    "AWS.SimpleQueueService.MessageNotInflight",
    "InvalidParameterValue",
    "ReceiptHandleInvalid",
}


@dataclass
class BatchResult:
    """What happened to each entry of a batch operation, by message id."""

    succeeded: list[str] = field(default_factory=list)
    # message id -> error code, for entries no retry can fix
    permanent: dict[str, str] = field(default_factory=dict)
    # message id -> error code, for entries that still failed transiently after all retries
    transient: dict[str, str] = field(default_factory=dict)

    def merge(self, other: BatchResult) -> None:
        self.succeeded.extend(other.succeeded)
        self.permanent.update(other.permanent)
        self.transient.update(other.transient)


@dataclass(frozen=True)
class Entry:
    message_id: str
    receipt_handle: str = field(repr=False)


def chunks(entries: Sequence[Entry], size: int = BATCH_LIMIT) -> list[Sequence[Entry]]:
    return [entries[i : i + size] for i in range(0, len(entries), size)]


class BatchCaller:
    """Runs ``DeleteMessageBatch`` / ``ChangeMessageVisibilityBatch`` over any number of entries."""

    def __init__(
        self,
        client: Any,
        queue_url: str,
        *,
        parallelism: int = 8,
        attempts: int = 5,
        base_delay: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self._queue_url = queue_url
        self._parallelism = max(1, parallelism)
        self._attempts = max(1, attempts)
        self._base_delay = base_delay
        self._sleep = sleep

    def delete(self, entries: Sequence[Entry]) -> BatchResult:
        return self._run(entries, "DeleteMessageBatch", None)

    def change_visibility(self, entries: Sequence[Entry], timeout: int) -> BatchResult:
        return self._run(entries, "ChangeMessageVisibilityBatch", timeout)

    def _run(self, entries: Sequence[Entry], action: str, timeout: int | None) -> BatchResult:
        result = BatchResult()
        if not entries:
            return result
        parts = chunks(list(entries))
        if len(parts) == 1 or self._parallelism == 1:
            for part in parts:
                result.merge(self._call_with_retries(part, action, timeout))
            return result
        with ThreadPoolExecutor(max_workers=min(self._parallelism, len(parts))) as pool:
            for partial in pool.map(lambda p: self._call_with_retries(p, action, timeout), parts):
                result.merge(partial)
        return result

    def _call_with_retries(
        self, part: Sequence[Entry], action: str, timeout: int | None
    ) -> BatchResult:
        result = BatchResult()
        pending = list(part)
        for attempt in range(self._attempts):
            if attempt:
                # Full jitter: spreads retries of parallel callers.
                self._sleep(random.uniform(0, self._base_delay * (2**attempt)))
            failed_transient: dict[str, str] = {}
            try:
                response = self._call(pending, action, timeout)
            except SqsSourceError:
                raise
            except Exception as exc:
                err = classify(exc, action.replace("Batch", ""), self._queue_url)
                if not err.retriable:
                    raise err from None
                failed_transient = {e.message_id: error_code(exc) for e in pending}
                logger.debug("%s call failed transiently (attempt %d)", action, attempt + 1)
            else:
                by_index = {str(i): e for i, e in enumerate(pending)}
                for ok in response.get("Successful", []):
                    result.succeeded.append(by_index[ok["Id"]].message_id)
                for bad in response.get("Failed", []):
                    entry = by_index[bad["Id"]]
                    code = bad.get("Code", "")
                    if code in PERMANENT_ENTRY_CODES or (
                        bad.get("SenderFault") and code not in ("Throttling", "RequestThrottled")
                    ):
                        result.permanent[entry.message_id] = code
                    else:
                        failed_transient[entry.message_id] = code
            result.transient = failed_transient
            if not failed_transient:
                return result
            pending = [e for e in pending if e.message_id in failed_transient]
        return result

    def _call(self, part: Sequence[Entry], action: str, timeout: int | None) -> dict[str, Any]:
        if action == "DeleteMessageBatch":
            return self._client.delete_message_batch(
                QueueUrl=self._queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": e.receipt_handle} for i, e in enumerate(part)
                ],
            )
        return self._client.change_message_visibility_batch(
            QueueUrl=self._queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": e.receipt_handle, "VisibilityTimeout": timeout}
                for i, e in enumerate(part)
            ],
        )


@dataclass
class AckStats:
    batches: int = 0
    deleted: int = 0
    delete_failed: int = 0
    pending_retry: int = 0


class Acknowledger:
    """Cumulative, idempotent acknowledgement of journaled batches. Runs on: driver.

    ``acknowledge_through(n)`` deletes every message journaled for batches up to ``n`` and then
    removes those journal entries. Calling it again for the same ``n`` does nothing; a batch
    whose deletes failed transiently stays pending and is retried on a later call (after a
    backoff), so an AWS outage delays deletion but never fails the query.
    """

    def __init__(
        self,
        journal: Any,
        caller: BatchCaller,
        *,
        delete: bool,
        on_acked: Callable[[int], None],
        clock: Callable[[], float] = time.monotonic,
        retry_after: float = 5.0,
    ) -> None:
        self._journal = journal
        self._caller = caller
        self._delete = delete
        self._on_acked = on_acked
        self._clock = clock
        self._retry_after = retry_after
        self._pending: set[int] = set()
        self._acked = 0
        self._not_before = 0.0

    @property
    def pending(self) -> list[int]:
        return sorted(self._pending)

    @property
    def acked_batch(self) -> int:
        return self._acked

    def start(self, acked_batch: int, journaled_batches: list[int]) -> None:
        self._acked = acked_batch
        self._pending = set(journaled_batches)

    def track(self, batch: int) -> None:
        """A batch was planned: it will need acknowledging once Spark commits it."""
        self._pending.add(batch)

    def acknowledge_through(self, batch: int) -> AckStats:
        stats = AckStats()
        due = sorted(b for b in self._pending if b <= batch)
        if not due or self._clock() < self._not_before:
            return stats
        for b in due:
            if not self._acknowledge(b, stats):
                # Later batches wait too: the acknowledged watermark must never pass a batch
                # whose messages are still in SQS.
                self._not_before = self._clock() + self._retry_after
                break
        return stats

    def _acknowledge(self, batch: int, stats: AckStats) -> bool:
        entries = [Entry(i, h) for i, h in self._journal.batch_handles(batch)]
        if self._delete and entries:
            try:
                result = self._caller.delete(entries)
            except SqsSourceError as exc:
                if not exc.retriable:
                    raise
                logger.warning(
                    "batch %d: deleting %d messages failed, will retry: %s",
                    batch,
                    len(entries),
                    exc,
                )
                stats.pending_retry += len(entries)
                return False
            if result.transient:
                logger.warning(
                    "batch %d: %d of %d deletes failed transiently (%s), will retry",
                    batch,
                    len(result.transient),
                    len(entries),
                    sorted(set(result.transient.values())),
                )
                stats.pending_retry += len(result.transient)
                return False
            stats.deleted += len(result.succeeded)
            if result.permanent:
                stats.delete_failed += len(result.permanent)
                logger.warning(
                    "batch %d: %d deletes failed permanently (%s); SQS may deliver those "
                    "messages again",
                    batch,
                    len(result.permanent),
                    sorted(set(result.permanent.values())),
                )
        self._acked = max(self._acked, batch)
        self._on_acked(self._acked)
        self._journal.remove_batch(batch)
        self._pending.discard(batch)
        stats.batches += 1
        logger.info(
            "batch %d: acknowledged %d messages (%s)",
            batch,
            len(entries),
            "deleted" if self._delete else "deleteOnCommit=false, left in the queue",
        )
        return True
