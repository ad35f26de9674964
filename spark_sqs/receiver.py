"""Receiving on executors: one receiver per input partition. Runs on: executors.

``read_partition`` either replays the receiver's journal entry for the batch (a retried task or a
restarted query), or receives anew, journals what it got, and only then yields it. Either way the
rows are produced from the same Arrow table, so a replay is exactly the first attempt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .acknowledgement import BatchCaller, Entry
from .client import classify, make_client
from .journal import RECEIVED_AT, Journal
from .planning import ReceiverPartition
from .schema import RECEIPT_HANDLE, messages_to_table, output_batches

logger = logging.getLogger(__name__)

RECEIVE_BATCH = 10


@dataclass
class ReceiveStats:
    calls: int = 0
    received: int = 0
    duplicates_in_loop: int = 0
    stopped_by: str = ""
    seconds: float = 0.0


def receive_messages(
    client: Any,
    partition: ReceiverPartition,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[dict[str, Any]], ReceiveStats]:
    """Loop ``ReceiveMessage`` until the receiver's share, an empty receive, or the time budget."""
    options = partition.options
    stats = ReceiveStats()
    started = clock()
    deadline = started + options.receive_budget_seconds
    by_id: dict[str, dict[str, Any]] = {}
    while len(by_id) < partition.max_messages:
        wanted = min(RECEIVE_BATCH, partition.max_messages - len(by_id))
        try:
            response = client.receive_message(
                QueueUrl=partition.queue_url,
                MaxNumberOfMessages=wanted,
                WaitTimeSeconds=options.wait_time_seconds,
                VisibilityTimeout=options.visibility_timeout,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=list(options.message_attribute_names),
            )
        except Exception as exc:
            err = classify(exc, "ReceiveMessage", partition.queue_url)
            if not by_id:
                raise err from None
            # Keep what was received: journaling it now beats letting it time out.
            logger.warning(
                "batch %d receiver %d: stopping the receive loop after %d messages: %s",
                partition.batch,
                partition.receiver,
                len(by_id),
                err,
            )
            stats.stopped_by = "error"
            break
        stats.calls += 1
        messages = response.get("Messages") or []
        for message in messages:
            if message["MessageId"] in by_id:
                # A redelivery within the loop: only the newest receipt handle stays valid.
                stats.duplicates_in_loop += 1
            by_id[message["MessageId"]] = message
        if not messages:
            stats.stopped_by = "empty receive"
            break
        if clock() >= deadline:
            stats.stopped_by = "time budget"
            break
    else:
        stats.stopped_by = "limit"
    stats.received = len(by_id)
    stats.seconds = clock() - started
    return list(by_id.values()), stats


def read_partition(
    partition: ReceiverPartition,
    *,
    client_factory: Callable[[], Any] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The body of ``SqsStreamReader.read``: replay the journal entry or receive and journal."""
    options = partition.options
    journal = Journal(options.journal_location, options)
    table = journal.read_entry(partition.batch, partition.receiver)
    if table is not None:
        logger.info(
            "batch %d receiver %d: replayed %d messages from the journal",
            partition.batch,
            partition.receiver,
            table.num_rows,
        )
        yield from output_batches(table)
        return

    state = journal.read_state()
    if partition.batch <= state.acked_batch:
        # Only a straggling task attempt of a finished batch gets here (e.g. speculation).
        # Anything it received would be acknowledged without reaching a sink, so it receives
        # nothing.
        logger.warning(
            "batch %d receiver %d: batch already acknowledged (up to %d); receiving nothing",
            partition.batch,
            partition.receiver,
            state.acked_batch,
        )
        return

    client = client_factory() if client_factory else make_client(options)
    received_at = time.time()
    messages, stats = receive_messages(client, partition)
    kept = [m for m in messages if m["MessageId"] not in partition.drop_ids]
    dropped = [m for m in messages if m["MessageId"] in partition.drop_ids]
    table = messages_to_table(kept, partition.queue_url).replace_schema_metadata(
        {RECEIVED_AT: repr(received_at)}
    )
    try:
        written = journal.write_entry(partition.batch, partition.receiver, table)
    except Exception:
        # Nothing was yielded: hand the messages back now rather than after the timeout, and
        # let Spark retry the task.
        _release(client, partition, table)
        raise
    if not written:
        # Another attempt of this task journaled first; its rows are the batch's rows.
        _release(client, partition, table)
        table = journal.read_entry(partition.batch, partition.receiver)
        assert table is not None
        logger.warning(
            "batch %d receiver %d: another attempt journaled first; released %d messages",
            partition.batch,
            partition.receiver,
            stats.received,
        )
    else:
        logger.info(
            "batch %d receiver %d: received and journaled %d messages in %d calls, %.2fs "
            "(stopped by %s)",
            partition.batch,
            partition.receiver,
            stats.received,
            stats.calls,
            stats.seconds,
            stats.stopped_by,
        )
    if dropped:
        _delete_redeliveries(client, partition, dropped)
    yield from output_batches(table)


def _delete_redeliveries(
    client: Any, partition: ReceiverPartition, dropped: list[dict[str, Any]]
) -> None:
    """Delete redeliveries of already-journaled messages with their fresh receipt handles."""
    entries = [Entry(m["MessageId"], m["ReceiptHandle"]) for m in dropped]
    try:
        result = BatchCaller(client, partition.queue_url).delete(entries)
        failed = len(result.permanent) + len(result.transient)
    except Exception:
        logger.warning("could not delete redelivered messages", exc_info=True)
        failed = len(entries)
    # If a delete failed the message comes back once more and is dropped again.
    logger.warning(
        "batch %d receiver %d: dropped %d redelivered messages already journaled by an earlier "
        "batch (%d could not be deleted yet)",
        partition.batch,
        partition.receiver,
        len(dropped),
        failed,
    )


def _release(client: Any, partition: ReceiverPartition, table: pa.Table) -> None:
    """Make messages this attempt received but did not journal visible again at once."""
    ids = table.column("messageId").to_pylist()
    handles = table.column(RECEIPT_HANDLE).to_pylist()
    entries = [Entry(i, h) for i, h in zip(ids, handles, strict=True)]
    try:
        BatchCaller(client, partition.queue_url).change_visibility(entries, 0)
    except Exception:
        # Not releasing only delays them by the visibility timeout.
        logger.warning(
            "batch %d receiver %d: could not release messages",
            partition.batch,
            partition.receiver,
            exc_info=True,
        )
