"""deleteAfterJournal: the journal step per receive call, as parts, then a seal. Runs on:
executors.

Each receive call's messages pass the same filter (``filtering.py``) and preparation
(``journaling.py``) as the default mode's, are journaled as a part, and are then deleted at
once, so a FIFO group unlocks and can yield more messages within the same batch. A seal ends
the parts; the entry combines the parts below it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterator
from typing import Any

import pyarrow as pa

from ..acknowledgement.deletes import delete_messages
from ..driver.planning import ReceiverPartition
from ..errors import JournalError, JournalOutcomeUnknown
from ..journal import (
    BYTES,
    ID_COLUMNS,
    PENDING_DELETE,
    RECEIVED_AT,
    REMOVED,
    SEAL,
    STOPPED_BY,
    BatchPlan,
    Journal,
    window,
)
from ..schema import messages_to_table, output_batches
from ..sqs.batching import BatchCaller, Entry
from ..sqs.client import SqsClient
from . import filtering, journaling, memory, poison, receiving
from .envelopes import merged_metadata, message_bytes
from .receiving import Clocks

logger = logging.getLogger(__name__)


class _StopReceiving(Exception):
    """Ends the receive loop of a deleteAfterJournal attempt that must not go on."""


def read(
    journal: Journal,
    client: SqsClient,
    partition: ReceiverPartition,
    drops: frozenset[str],
    clocks: Clocks,
    plan: BatchPlan,
) -> Iterator[pa.RecordBatch]:
    """``deleteAfterJournal``: journal each receive call's messages as a part, then delete them
    at once, so a FIFO group unlocks and can yield more messages within the same batch.

    Parts are numbered densely, each created if absent, and a message is deleted only after
    its part was created. The entry combines the parts below a *seal* (an empty part created
    if absent once receiving ends), so any part that was created, by this attempt or by a
    concurrent one, is below the seal and in the entry: no deleted message is left out. An
    attempt that finds its next part number taken, or its batch acknowledged, stops receiving
    and deletes nothing more. The entry records which messages may still await deletion (the
    driver deletes those on commit).
    """
    # Their ids and metadata only: the bodies stay in the store (the memory bound).
    earlier = journal.entries.read_parts(partition.batch, partition.receiver, ID_COLUMNS)
    # The parts this attempt saw or created: each must still be there when it seals.
    known = [k for k, _ in earlier]
    stopped_by = ""
    if not _sealed(earlier):
        stopped_by, received = _receive_parts(
            journal, client, partition, drops, earlier, clocks, plan, known
        )
        # Each call's messages are in their part: the heap they took goes back (memory.py).
        memory.release(received)
        if journaling.finished(journal, partition) is not None:
            return
    del earlier
    sealed = _seal(journal, partition, clocks, stopped_by, known=known)
    if sealed is None:
        if journaling.finished(journal, partition) is not None:
            return
        raise JournalError(
            f"batch {partition.batch} receiver {partition.receiver}: a part of its journal "
            "entry that this attempt created or read is gone from journalLocation "
            f"{partition.options.journal_location}, so the journal was deleted, moved or "
            "restored while the task ran; nothing was sealed. The part's messages were "
            "deleted from SQS and are only in it. Fix: put the journal back as it was and "
            "restart the query; restore a journal only after every task of the query that "
            "used it has ended"
        )
    written, pending = sealed
    if written and journaling.finished(journal, partition) == REMOVED:
        journal.entries.remove(partition.batch, partition.receiver)
        return
    # Written part by part (never all parts in memory at once), read back whole to be yielded:
    # the stored entry is the batch's rows, this attempt's or a concurrent one's.
    combined = journal.entries.read(partition.batch, partition.receiver)
    if combined is None:
        raise JournalError(
            f"batch {partition.batch} receiver {partition.receiver}: the journal entry "
            "exists but cannot be read back"
        )
    logger.info(
        "batch %d receiver %d: journaled %d messages in parts (%d left to delete on commit)",
        partition.batch,
        partition.receiver,
        combined.num_rows,
        len(pending),
    )
    yield from output_batches(combined, partition.options.sns)


def _receive_parts(
    journal: Journal,
    client: SqsClient,
    partition: ReceiverPartition,
    drops: frozenset[str],
    earlier: list[tuple[int, pa.Table]],
    clocks: Clocks,
    plan: BatchPlan,
    made: list[int],
) -> tuple[str, int]:
    """Receive, journaling each call's messages as a part and then deleting them. Returns why
    receiving stopped and the bytes received (``ReceiveStats.bytes``); ``("", 0)`` if the loop
    was stopped. The number of each part it creates is appended to ``made``."""
    journaled: set[str] = {i for _, t in earlier for i in t.column("messageId").to_pylist()}
    next_part = earlier[-1][0] + 1 if earlier else 0
    caller = BatchCaller(client, partition.queue_url, sleep=clocks.sleep)

    options = partition.options

    def on_chunk(messages: list[dict[str, Any]], called_at: float) -> None:
        nonlocal next_part
        # Redeliveries of messages journaled by this receiver's earlier parts (a retried task)
        # or by other batches are already held by the journal: delete, never journal again.
        kept, dropped, _ = filtering.sort_out(
            journal, plan, partition, messages, drops | journaled, clocks
        )
        if dropped:
            filtering.delete_redeliveries(journal, client, partition, dropped, clocks)
        if not kept:
            return
        # Only what this receiver still holds is journaled (and then deleted).
        received_at = {m["MessageId"]: called_at for m in kept}
        prepared, kept, _ = journaling.prepare(client, partition, kept, received_at, clocks)
        if not kept:
            return
        table = messages_to_table(kept, partition.queue_url, sns=partition.options.sns)
        table = table.replace_schema_metadata(
            {
                RECEIVED_AT: repr(clocks.wall_clock()),
                # What a retried attempt counts towards its byte limit.
                BYTES: str(sum(message_bytes(m, options) for m in kept)),
                **prepared.metadata,
            }
        )
        try:
            created = journal.entries.write_part(
                partition.batch, partition.receiver, next_part, table
            )
        except JournalOutcomeUnknown:
            # The part may exist: keep its messages invisible; the seal decides.
            raise _StopReceiving from None
        except Exception:
            journaling.release(client, partition, table, clocks)
            raise
        if not created:
            # A concurrent attempt took this number: it goes on; we stop without deleting, and
            # hand back only what its part lacks (FIFO twins got the same messages).
            theirs = journal.entries.read_part(
                partition.batch, partition.receiver, next_part, ID_COLUMNS
            )
            held = set(theirs.column("messageId").to_pylist()) if theirs is not None else set()
            journaling.release(client, partition, journaling.without(table, held), clocks)
            raise _StopReceiving
        made.append(next_part)
        next_part += 1
        journaled.update(m["MessageId"] for m in kept)
        if (status := journaling.finished(journal, partition)) is not None:
            # Acknowledged: the part is in no entry; retired: the adoption may copy it or not.
            # Either way its messages are left in flight, not deleted: they reappear. Removed,
            # the part goes too: the batch may have been planned again by a driver that lost
            # the journal (Batches.status), whose acknowledgement would delete what the part
            # holds; an adoption that copied it first holds its own copy.
            if status == REMOVED:
                journal.entries.remove_part(partition.batch, partition.receiver, next_part - 1)
            raise _StopReceiving
        entries = [Entry(m["MessageId"], m["ReceiptHandle"]) for m in kept]
        # The window's segment precedes the delete: a copy can only come after it.
        deletion = delete_messages(
            journal,
            caller,
            [entries],
            window=[
                (k, None)
                for m in kept
                for k in (m["MessageId"], *filtering.window_keys(m, options))
            ],
            queue_url=partition.queue_url,
            duplicate_window=partition.options.duplicate_window,
            batch=partition.batch,
            who=window.receiver_writer(partition.receiver),
            catch=Exception,
            clock=clocks.clock,
        )
        if deletion.error is not None:
            # The entry lists every part's messages as awaiting deletion: the driver retries.
            logger.warning(
                "deleting journaled messages failed; deleting on commit: %s", deletion.error
            )

    already = sum(t.num_rows for _, t in earlier)
    already_bytes = sum(int((t.schema.metadata or {}).get(BYTES, b"0")) for _, t in earlier)
    try:
        _, stats = receiving.receive_messages(
            client,
            partition,
            clock=clocks.clock,
            on_chunk=on_chunk,
            already=already,
            already_bytes=already_bytes,
        )
    except _StopReceiving:
        return "", 0
    return stats.stopped_by, stats.bytes


def _sealed(parts: list[tuple[int, pa.Table]]) -> bool:
    return any(SEAL in (t.schema.metadata or {}) for _, t in parts)


def _seal(
    journal: Journal,
    partition: ReceiverPartition,
    clocks: Clocks,
    stopped_by: str = "",
    known: Collection[int] = (),
) -> tuple[bool, set[str]] | None:
    """Create the seal after the last part (or find the one another attempt created), then
    create the entry from the parts below it, streamed one part at a time. Every message of
    the entry is marked as awaiting deletion: which attempt deleted what is unknown, and a
    repeated delete is harmless. ``stopped_by``: why this attempt stopped receiving, if it
    received (the entry's counters only). Returns whether this call created the entry, and
    its ids; None, writing nothing, if a part in ``known`` (parts this attempt created or
    read) is gone: the batch was removed, or the journal deleted or moved, meanwhile. A seal
    below a missing part would leave that part's messages, deleted from SQS, out of the
    entry; and a journal put back later keeps what tasks wrote in the meantime."""
    empty = messages_to_table([], partition.queue_url, sns=partition.options.sns)
    while True:
        # Ids and metadata (where the seal is marked) only: the bodies are read once, below.
        parts = journal.entries.read_parts(partition.batch, partition.receiver, ID_COLUMNS)
        if set(known) - {k for k, _ in parts}:
            return None
        seal = next((k for k, t in parts if SEAL in (t.schema.metadata or {})), None)
        if seal is None:
            seal = parts[-1][0] + 1 if parts else 0
            marker = empty.replace_schema_metadata({SEAL: b"1"})
            if not journal.entries.write_part(partition.batch, partition.receiver, seal, marker):
                continue
        below = [(k, t) for k, t in parts if k < seal]
        break
    ids = {i for _, t in below for i in t.column("messageId").to_pylist()}
    first_receive = min(
        (float((t.schema.metadata or {}).get(RECEIVED_AT, b"0")) for _, t in below),
        default=clocks.wall_clock(),
    )
    metadata = {
        RECEIVED_AT: repr(first_receive).encode(),
        PENDING_DELETE: json.dumps(sorted(ids)).encode(),
        **poison.first_attempt(partition),
        **merged_metadata(t.schema.metadata for _, t in below),
        **({STOPPED_BY: stopped_by.encode()} if stopped_by else {}),
    }
    written = journal.entries.write_from_parts(
        partition.batch, partition.receiver, [k for k, _ in below], metadata, empty.schema
    )
    return written, ids
