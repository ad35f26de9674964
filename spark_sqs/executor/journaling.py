"""The journal step: what a receiver journals, and what it hands back. Runs on: executors.

Received messages that passed the filter are prepared (``envelopes.prepare``: SNS unwrapping,
Extended Client payloads, lag metadata), checked (``prepare``: only handles SQS confirms are
journaled), and written as the receiver's entry (``write_entry``) or, under
deleteAfterJournal, as parts (``parts.py``). An attempt that loses the write to a concurrent
one releases only what the winner lacks; one whose batch was acknowledged or adopted meanwhile
(``finished``) delivers nothing; messages that were never journaled are released at once.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from ..driver.planning import ReceiverPartition
from ..errors import JournalError, JournalOutcomeUnknown
from ..journal import LIVE, REMOVED, Journal
from ..schema import RECEIPT_HANDLE
from ..sqs.batching import BatchCaller, Entry
from ..sqs.client import SqsClient
from .envelopes import Prepared
from .envelopes import prepare as prepare_envelopes
from .receiving import Clocks

logger = logging.getLogger(__name__)

# A message received longer ago than this fraction of visibilityTimeout is journaled only once
# SQS confirms its handle (_still_held): what is left of the timeout then covers the write.
HANDLE_CHECK_AFTER = 0.5


def prepare(
    client: SqsClient,
    partition: ReceiverPartition,
    messages: list[dict[str, Any]],
    received_at: dict[str, float],
    clocks: Clocks,
) -> tuple[Prepared, list[dict[str, Any]], int]:
    """The kept ``messages`` prepared for journaling, those of them whose handles are still
    this receiver's, and how many are not. ``received_at``: message id -> the monotonic time
    the call that returned its handle started.

    A receiver that stalled (GC, payload fetches, a lost network) may hold handles that
    expired: another receiver may have the messages now. Only what SQS confirms is journaled."""
    prepared = _prepare(client, partition, messages, clocks)
    held, expired = _still_held(client, partition, prepared.messages, received_at, clocks)
    return prepared, held, expired


def write_entry(
    journal: Journal,
    client: SqsClient,
    partition: ReceiverPartition,
    table: pa.Table,
    clocks: Clocks,
    received: int,
) -> tuple[bool, pa.Table] | None:
    """Journal ``table`` as the receiver's entry. Returns whether this attempt wrote it and the
    rows to yield (the stored entry's, if another attempt journaled first), or None if the
    attempt delivers nothing (``finished``). ``received``: how many messages it received."""
    try:
        written = journal.entries.write(partition.batch, partition.receiver, table)
    except JournalOutcomeUnknown:
        # The entry may exist (or appear later): its messages must stay invisible, held by
        # it. A retry of this task replays it if it landed; if not, they reappear after the
        # visibility timeout.
        raise
    except Exception:
        # Nothing was journaled: hand the messages back now rather than after the timeout.
        release(client, partition, table, clocks)
        raise
    if not written:
        # Another attempt of this task journaled first (or our own PUT was retried after its
        # answer was lost): the stored entry is the batch's rows. Release only what it lacks.
        stored = journal.entries.read(partition.batch, partition.receiver)
        if stored is None:
            raise JournalError(
                f"batch {partition.batch} receiver {partition.receiver}: the journal entry "
                "exists but cannot be read back"
            )
        held = set(stored.column("messageId").to_pylist())
        released = release(client, partition, without(table, held), clocks)
        logger.warning(
            "batch %d receiver %d: another attempt journaled first; released the %d of %d "
            "messages it does not hold",
            partition.batch,
            partition.receiver,
            released,
            received,
        )
        return False, stored
    if (status := finished(journal, partition)) is not None:
        if status == REMOVED:
            # A straggler: the batch was acknowledged (and its entries removed) while this
            # attempt received. Nothing of ours reached a sink: remove our entry first, then
            # hand the messages back (a crash between leaves them invisible until the
            # timeout, not lost).
            journal.entries.remove(partition.batch, partition.receiver)
            release(client, partition, table, clocks)
        # Retired: the adoption may have copied our entry (it reads entries after retiring the
        # batch); it stays, and so do its messages' handles, for whoever delivers them.
        return None
    return True, table


def _still_held(
    client: SqsClient,
    partition: ReceiverPartition,
    messages: list[dict[str, Any]],
    received_at: dict[str, float],
    clocks: Clocks,
) -> tuple[list[dict[str, Any]], int]:
    """The messages whose handles are still this receiver's, and how many are not. A message
    received longer ago than ``HANDLE_CHECK_AFTER`` of ``visibilityTimeout`` (judged on this
    process's monotonic clock, where it was measured) may have become visible, and been
    received by someone else: SQS is asked, by extending its visibility by the timeout
    again, which it refuses for an expired or superseded handle. A message it does not
    confirm is neither journaled nor yielded; whoever holds it now delivers it."""
    limit = HANDLE_CHECK_AFTER * partition.options.visibility_timeout
    now = clocks.clock()
    old = [m for m in messages if now - received_at.get(m["MessageId"], now) > limit]
    if not old:
        return messages, 0
    entries = [Entry(m["MessageId"], m["ReceiptHandle"]) for m in old]
    try:
        caller = BatchCaller(client, partition.queue_url, sleep=clocks.sleep)
        confirmed = set(
            caller.change_visibility(entries, partition.options.visibility_timeout).succeeded
        )
    except Exception as exc:
        logger.warning(
            "batch %d receiver %d: could not check the handles of %d messages (%s); not "
            "journaling them",
            partition.batch,
            partition.receiver,
            len(entries),
            exc,
        )
        confirmed = set()
    expired = {m["MessageId"] for m in old} - confirmed
    for message_id in confirmed:
        # Held for another visibility timeout from the check: later checks count from here.
        received_at[message_id] = now
    if expired:
        logger.warning(
            "batch %d receiver %d: %d of %d messages received more than %.0fs ago are no longer "
            "held (their visibility ran out while this receiver stalled); not journaling them",
            partition.batch,
            partition.receiver,
            len(expired),
            len(messages),
            limit,
        )
    return [m for m in messages if m["MessageId"] not in expired], len(expired)


def finished(
    journal: Journal, partition: ReceiverPartition, status: str | None = None
) -> str | None:
    """Why no attempt of this batch may keep (or deliver) what it journaled any more, or None
    while the batch is live: ``"removed"`` (acknowledged and removed: a straggler, e.g. of
    speculation) or ``"retired"`` (an orphan that a later batch delivers: a task of a dead
    driver). Read by key (``Batches.status``), never from a LIST that may lag; ``status``: the
    batch's status as the caller just read it so, after what it decides on (None: read here)."""
    if status is None:
        status = journal.batches.status(partition.batch, partition.plan_id)
    if status == LIVE:
        return None
    logger.warning(
        "batch %d receiver %d: the batch was %s meanwhile; this attempt delivers nothing",
        partition.batch,
        partition.receiver,
        "acknowledged" if status == REMOVED else "adopted by a later batch",
    )
    return status


def without(table: pa.Table, ids: set[str]) -> pa.Table:
    keep = [i not in ids for i in table.column("messageId").to_pylist()]
    return table.filter(pa.array(keep, pa.bool_()))


def _prepare(
    client: SqsClient, partition: ReceiverPartition, messages: list[dict[str, Any]], clocks: Clocks
) -> Prepared:
    """``envelopes.prepare`` for this receiver: on a rejected message or a payload that cannot
    be fetched, every message of the call is released and the task fails."""
    return prepare_envelopes(
        messages,
        partition.options,
        now=clocks.wall_clock(),
        release=lambda ms: _release_entries(
            client, partition, [Entry(m["MessageId"], m["ReceiptHandle"]) for m in ms], clocks
        ),
        where=f"batch {partition.batch} receiver {partition.receiver}",
    )


def release(
    client: SqsClient, partition: ReceiverPartition, table: pa.Table, clocks: Clocks
) -> int:
    """Make messages this attempt received but did not journal visible again at once."""
    if table.num_rows == 0:
        return 0
    ids = table.column("messageId").to_pylist()
    handles = table.column(RECEIPT_HANDLE).to_pylist()
    entries = [Entry(i, h) for i, h in zip(ids, handles, strict=True)]
    _release_entries(client, partition, entries, clocks)
    return table.num_rows


def _release_entries(
    client: SqsClient, partition: ReceiverPartition, entries: list[Entry], clocks: Clocks
) -> None:
    try:
        BatchCaller(client, partition.queue_url, sleep=clocks.sleep).change_visibility(entries, 0)
    except Exception:
        # Not releasing only delays them by the visibility timeout.
        logger.warning(
            "batch %d receiver %d: could not release messages",
            partition.batch,
            partition.receiver,
            exc_info=True,
        )
