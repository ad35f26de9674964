"""The one way messages are deleted from SQS. Runs on: both (the driver's acknowledgement and
the quarantine; the receivers' acknowledgement, deleteAfterJournal's parts and dropped
redeliveries on the executors).

Every delete follows the duplicate window's rule (journal/window.py): the deleted ids' window
segment is written *before* the delete, so that a copy SQS hands out after the delete finds its
id in the window. Then the messages are deleted, and what did not certainly take effect is
collected: the ids the caller already doubted (the heartbeat lost their handles, or they may
have expired) and those SQS refused for good. What a deleter does with a failure (retry, fail
its task, log) is its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..journal import window
from ..journal.window import Seal
from ..sqs.batching import BatchResult, Entry

if TYPE_CHECKING:
    from ..journal import EntryReceipts, Journal
    from ..sqs.client import SqsClient

logger = logging.getLogger(__name__)

# A deleter whose monotonic clock moved on by more than this since it wrote its segment (a
# stall: a GC pause, a slow seal, a delete call's retries) writes the segment again before its
# next delete call, into a batch live then: each delete follows its ids' last segment by at most
# this, which the driver's range covers (journal/window.py, EXPIRY_MARGIN).
RESEGMENT_AFTER = 30.0


class Deleter(Protocol):
    """What deletes entries: ``spark_sqs.sqs.batching.BatchCaller``, or ``OneByOne``."""

    def delete(self, entries: Sequence[Entry]) -> BatchResult: ...


@dataclass
class Deleted:
    """What the delete of one group of entries did."""

    result: BatchResult
    # Ids whose delete may not have taken effect: the doubted ones, and those SQS refused.
    uncertain: set[str] = field(default_factory=set)

    @property
    def deleted(self) -> int:
        return len(self.result.succeeded)

    @property
    def failures(self) -> int:
        return len(self.result.permanent)


@dataclass
class Deletion:
    """What ``delete_messages`` did: one ``Deleted`` per group it deleted, in order."""

    groups: list[Deleted] = field(default_factory=list)
    # What a delete call raised, of the types the caller asked to have returned.
    error: Exception | None = None

    @property
    def transient(self) -> dict[str, str]:
        """Ids whose deletes failed transiently after every retry, with their error codes."""
        return {i: c for g in self.groups for i, c in g.result.transient.items()}

    @property
    def permanent(self) -> dict[str, str]:
        return {i: c for g in self.groups for i, c in g.result.permanent.items()}

    @property
    def uncertain(self) -> set[str]:
        return {i for g in self.groups for i in g.uncertain}

    @property
    def deleted(self) -> int:
        return sum(g.deleted for g in self.groups)


class OneByOne:
    """Deletes each entry with its own ``DeleteMessage`` call (the quarantine's one message);
    a failure raises."""

    def __init__(self, client: SqsClient, queue_url: str) -> None:
        self._client = client
        self._queue_url = queue_url

    def delete(self, entries: Sequence[Entry]) -> BatchResult:
        for entry in entries:
            self._client.delete_message(
                QueueUrl=entry.queue_url or self._queue_url, ReceiptHandle=entry.receipt_handle
            )
        return BatchResult(succeeded=[e.message_id for e in entries])


def lost_ids(message_ids: Iterable[str], lost: Iterable[str]) -> set[str]:
    """Messages whose delete may not take effect because the driver's heartbeat lost them
    (their handle went stale or expired before it knew). Whether a handle expired before its
    delete is judged by the driver alone, on its own clock (``acknowledgement.acknowledger``):
    never against an executor's clock."""
    lost = set(lost)
    return {i for i in message_ids if i in lost}


def window_ids(receipts: Iterable[EntryReceipts]) -> list[tuple[str, str | None]]:
    """The (id, queue) pairs a delete of journal entries puts in the duplicate window: every
    row the entries journaled (also those deleteAfterJournal already deleted), then their
    duplicateAttribute keys (one entry's rows are of one queue)."""
    receipts = list(receipts)
    return [pair for r in receipts for pair in r.journaled] + [
        (k, r.journaled[0][1]) for r in receipts if r.journaled for k in r.window_keys
    ]


def delete_messages(
    journal: Journal,
    deleter: Deleter,
    groups: Sequence[Sequence[Entry]],
    *,
    window: Sequence[tuple[str, str | None]],
    queue_url: str,
    duplicate_window: float,
    batch: int,
    who: str,
    doubtful: Sequence[Iterable[str]] = (),
    catch: type[Exception] | tuple[type[Exception], ...] = (),
    seal: Seal | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Deletion:
    """Delete ``groups`` of entries, one delete call each, in order, after writing the window
    segment of ``window`` ((id, queue) pairs, a queue of None meaning ``queue_url``) as writer
    ``who``'s next of ``batch``: ids of FIFO queues are left out (they never come back), and
    nothing is written with the window off (``duplicate_window`` 0 s). ``seal``: the segment
    goes into that batch's seal (``Window.write``).

    ``doubtful``: per group, the ids already known uncertain. It stops after a group some of
    whose deletes failed transiently (the caller retries). An error of a delete call of a type
    in ``catch`` stops it too and is returned (``Deletion.error``); any other error, and any of
    the segment's write, propagates.

    ``clock``: this process's monotonic clock, read before the segment and again before each
    delete call: if it moved on by more than ``RESEGMENT_AFTER`` (the writer stalled), the
    segment is written again, as the writer's next segment of ``batch`` (forwarded on if the
    batch was sealed or removed meanwhile)."""

    def write(into: Seal | None = None) -> None:
        _write_segment(
            journal,
            window,
            queue_url=queue_url,
            duplicate_window=duplicate_window,
            batch=batch,
            who=who,
            seal=into,
        )

    since = clock()
    write(seal)

    def renew() -> None:
        nonlocal since
        if duplicate_window <= 0:
            return
        current = clock()
        if current - since <= RESEGMENT_AFTER:
            return
        logger.info(
            "batch %d: %.0fs passed since the window segment of %s's delete: written again",
            batch,
            current - since,
            who,
        )
        since = current
        write()

    return _delete_groups(deleter, groups, doubtful, catch, renew)


def _write_segment(
    journal: Journal,
    pairs: Sequence[tuple[str, str | None]],
    *,
    queue_url: str,
    duplicate_window: float,
    batch: int,
    who: str,
    seal: Seal | None = None,
) -> None:
    if duplicate_window <= 0:
        return
    ids = [i for i, q in pairs if not window.is_fifo(q or queue_url)]
    journal.window.write(ids, batch=batch, who=who, seal=seal)


def _delete_groups(
    deleter: Deleter,
    groups: Sequence[Sequence[Entry]],
    doubtful: Sequence[Iterable[str]],
    catch: type[Exception] | tuple[type[Exception], ...],
    renew: Callable[[], None] = lambda: None,
) -> Deletion:
    """The deletes themselves, after the window segment (sim/mutations.py swaps the two);
    ``renew`` before each (the segment again after a stall)."""
    out = Deletion()
    for n, entries in enumerate(groups):
        renew()
        try:
            result = deleter.delete(entries)
        except catch as exc:
            out.error = exc
            break
        uncertain = set(doubtful[n]) if n < len(doubtful) else set()
        uncertain.update(result.permanent)
        out.groups.append(Deleted(result, uncertain))
        if result.transient:
            break
    return out
