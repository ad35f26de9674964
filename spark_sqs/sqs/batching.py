"""The 10-entry batch calls: ``DeleteMessageBatch`` and ``ChangeMessageVisibilityBatch`` over any
number of entries. Runs on: driver and executors.

The driver's acknowledger and heartbeat use ``BatchCaller`` to delete and extend; executors use it
to delete the entries assigned to them and to hand messages back (visibility 0) that they
received but could not journal.

SQS batch calls take at most 10 entries and can answer HTTP 200 with a ``Failed`` list, so every
call is checked entry by entry: entries that failed for a transient reason are retried with
backoff; entries whose receipt handle is no longer valid cannot succeed and are reported.
Calls run in parallel on a small thread pool.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import SqsSourceError
from ..per_process import PerProcess
from .client import SqsClient, classify, error_code

if TYPE_CHECKING:
    from ..journal.entries import EntryReceipts

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
    # The queue the handle came from; None: the caller's queue. Several queues in one stream
    # (driver/queues.py): a handle must go back to its own queue, whatever the options say now.
    queue_url: str | None = None


def entries_of(receipts: EntryReceipts) -> list[Entry]:
    """The entries of a journal entry's ``EntryReceipts``, each with the queue of its row."""
    queues = receipts.queue_urls or (None,) * len(receipts.message_ids)
    return [
        Entry(i, h, q)
        for i, h, q in zip(receipts.message_ids, receipts.receipt_handles, queues, strict=True)
    ]


def chunks(entries: Sequence[Entry], size: int = BATCH_LIMIT) -> list[Sequence[Entry]]:
    return [entries[i : i + size] for i in range(0, len(entries), size)]


PARALLELISM = 8
_POOLS: PerProcess[tuple[int, int], ThreadPoolExecutor] = PerProcess()


def process_pool(threads: int = PARALLELISM) -> ThreadPoolExecutor:
    """A pool of ``threads`` threads kept for this process's life, for the batch calls of
    tasks that run one after another in a Python worker: a pool of its own would start its
    threads again in every task (about 1 ms of CPU a task of 50 delete calls, measured)."""
    return _POOLS.get_or_build(
        (os.getpid(), threads),
        lambda: ThreadPoolExecutor(threads, thread_name_prefix="spark-sqs-batch"),
    )


class BatchCaller:
    """Runs ``DeleteMessageBatch`` / ``ChangeMessageVisibilityBatch`` over any number of entries."""

    def __init__(
        self,
        client: SqsClient,
        queue_url: str,
        *,
        parallelism: int = PARALLELISM,
        attempts: int = 5,
        base_delay: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
        pool: Executor | None = None,
    ) -> None:
        """``pool``: the threads to make the calls on (``process_pool``), else a pool of
        ``parallelism`` threads for each call of ``delete`` or ``change_visibility``."""
        self._client = client
        self._pool = pool
        self._queue_url = queue_url
        self._parallelism = max(1, parallelism)
        self._attempts = max(1, attempts)
        self._base_delay = base_delay
        self._sleep = sleep

    @property
    def queue_url(self) -> str:
        """The queue of entries that name none."""
        return self._queue_url

    def delete(self, entries: Sequence[Entry]) -> BatchResult:
        return self._run(entries, "DeleteMessageBatch", None)

    def change_visibility(self, entries: Sequence[Entry], timeout: int) -> BatchResult:
        return self._run(entries, "ChangeMessageVisibilityBatch", timeout)

    def _run(self, entries: Sequence[Entry], action: str, timeout: int | None) -> BatchResult:
        result = BatchResult()
        if not entries:
            return result
        # One batch call names one queue: entries are grouped by the queue of their handle.
        by_queue: dict[str, list[Entry]] = {}
        for entry in entries:
            by_queue.setdefault(entry.queue_url or self._queue_url, []).append(entry)
        parts = [(queue, part) for queue, group in by_queue.items() for part in chunks(group)]
        if len(parts) == 1 or self._parallelism == 1:
            for queue, part in parts:
                result.merge(self._call_with_retries(part, action, timeout, queue))
            return result

        def call(part: tuple[str, Sequence[Entry]]) -> BatchResult:
            return self._call_with_retries(part[1], action, timeout, part[0])

        if self._pool is not None:
            futures = [self._pool.submit(call, part) for part in parts]
            # Every call has ended before this returns or raises, as with a pool of its own.
            wait(futures)
            for future in futures:
                result.merge(future.result())
            return result
        with ThreadPoolExecutor(max_workers=min(self._parallelism, len(parts))) as pool:
            for partial in pool.map(call, parts):
                result.merge(partial)
        return result

    def _call_with_retries(
        self, part: Sequence[Entry], action: str, timeout: int | None, queue_url: str
    ) -> BatchResult:
        result = BatchResult()
        pending = list(part)
        for attempt in range(self._attempts):
            if attempt:
                # Full jitter: spreads retries of parallel callers.
                self._sleep(random.uniform(0, self._base_delay * (2**attempt)))
            failed_transient: dict[str, str] = {}
            try:
                response = self._call(pending, action, timeout, queue_url)
            except SqsSourceError:
                raise
            except Exception as exc:
                err = classify(exc, action.replace("Batch", ""), queue_url)
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

    def _call(
        self, part: Sequence[Entry], action: str, timeout: int | None, queue_url: str
    ) -> dict[str, Any]:
        if action == "DeleteMessageBatch":
            return self._client.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": e.receipt_handle} for i, e in enumerate(part)
                ],
            )
        return self._client.change_message_visibility_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": e.receipt_handle, "VisibilityTimeout": timeout}
                for i, e in enumerate(part)
            ],
        )


def handle_margin(visibility_timeout: int) -> float:
    """A handle closer than this to its expiry may expire before the delete reaches SQS; it
    also absorbs clock skew between the executor that received and the one that deletes."""
    return max(2.0, 0.05 * visibility_timeout)
