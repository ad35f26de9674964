"""Receiving on executors: one receiver per input partition. Runs on: executors.

``read_partition`` either replays the receiver's journal entry for the batch (a retried task or a
restarted query), or receives anew, journals what it got, and only then yields it. Either way the
rows are produced from the same Arrow table, so a replay is exactly the first attempt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from botocore.exceptions import ClientError

from .acknowledgement import BatchCaller, Entry
from .client import cached_client, classify
from .envelopes import Prepared, merged_metadata, prepare
from .errors import JournalError
from .journal import DROPPED, PENDING_DELETE, RECEIVED_AT, Journal
from .planning import ReceiverPartition
from .schema import RECEIPT_HANDLE, messages_to_table, output_batches

logger = logging.getLogger(__name__)

RECEIVE_BATCH = 10
# Consecutive receives answered with fewer messages than asked for: the receiver has caught up
# with the queue, and waiting out the time budget would only add latency.
CAUGHT_UP_AFTER = 3


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
    on_chunk: Callable[[list[dict[str, Any]]], None] | None = None,
    already: int = 0,
) -> tuple[list[dict[str, Any]], ReceiveStats]:
    """Loop ``ReceiveMessage`` until the receiver's share, an empty receive, ``CAUGHT_UP_AFTER``
    short receives in a row, or the time budget.

    ``on_chunk`` sees the messages of each call as soon as they arrive; ``already`` counts
    messages an earlier attempt journaled towards this receiver's share.
    """
    options = partition.options
    stats = ReceiveStats()
    started = clock()
    deadline = started + options.receive_budget_seconds
    by_id: dict[str, dict[str, Any]] = {}
    fifo = partition.queue_url.endswith(".fifo")
    short_in_a_row = 0
    while len(by_id) + already < partition.max_messages:
        wanted = min(RECEIVE_BATCH, partition.max_messages - len(by_id) - already)
        request: dict[str, Any] = {
            "QueueUrl": partition.queue_url,
            "MaxNumberOfMessages": wanted,
            "WaitTimeSeconds": options.wait_time_seconds,
            "VisibilityTimeout": options.visibility_timeout,
            "MessageSystemAttributeNames": ["All"],
            "MessageAttributeNames": list(options.message_attribute_names),
        }
        if fifo:
            request["ReceiveRequestAttemptId"] = attempt_id(partition, stats.calls)
        try:
            response = _receive(client, request, partition)
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
        if messages and on_chunk is not None:
            on_chunk(messages)
        if not messages:
            stats.stopped_by = "empty receive"
            break
        # With a trickle of messages, a long poll returns each one as it arrives and never comes
        # back empty: without this, every batch would last the whole time budget.
        short_in_a_row = short_in_a_row + 1 if len(messages) < wanted else 0
        if short_in_a_row >= CAUGHT_UP_AFTER:
            stats.stopped_by = "caught up"
            break
        if clock() >= deadline:
            stats.stopped_by = "time budget"
            break
    else:
        stats.stopped_by = "limit"
    stats.received = len(by_id)
    stats.seconds = clock() - started
    return list(by_id.values()), stats


def attempt_id(partition: ReceiverPartition, call: int) -> str:
    """The ``ReceiveRequestAttemptId`` of call ``call`` of this receiver in this batch.

    Derived from the journal (one per query), the batch, the receiver and the call, so that a
    retried task repeats the ids of the failed attempt: within five minutes, FIFO SQS answers
    with the messages that attempt received (and locked) instead of making their groups wait
    out the visibility timeout.
    """
    key = "\0".join(
        (
            partition.options.journal_location,
            partition.queue_url,
            str(partition.batch),
            str(partition.receiver),
            str(call),
        )
    )
    return hashlib.sha256(key.encode()).hexdigest()


def _receive(client: Any, request: dict[str, Any], partition: ReceiverPartition) -> Any:
    try:
        return client.receive_message(**request)
    except ClientError as exc:
        if "ReceiveRequestAttemptId" not in request or not _attempt_not_retryable(exc):
            raise
    # SQS no longer accepts this id (older than 5 minutes, or the call was throttled and so is
    # not retryable): a fresh id gets new messages; the earlier attempt's reappear later.
    logger.warning(
        "batch %d receiver %d: SQS refused the deterministic receive attempt id (not retryable "
        "any more); retrying with a fresh one",
        partition.batch,
        partition.receiver,
    )
    return client.receive_message(**{**request, "ReceiveRequestAttemptId": uuid.uuid4().hex})


def _attempt_not_retryable(exc: ClientError) -> bool:
    error = exc.response.get("Error", {})
    return error.get("Code") in ("InvalidParameterValue", "InvalidParameterValueException") and (
        "ReceiveRequestAttemptId" in str(error.get("Message", ""))
    )


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
        yield from output_batches(table, options.sns)
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

    client = client_factory() if client_factory else cached_client(options)
    if options.delete_after_journal:
        yield from _read_deleting_after_journal(journal, client, partition)
        return
    received_at = time.time()
    messages, stats = receive_messages(client, partition)
    kept = [m for m in messages if m["MessageId"] not in partition.drop_ids]
    dropped = [m for m in messages if m["MessageId"] in partition.drop_ids]
    # Hook (envelopes): SNS unwrapping, extended payloads, lag metadata.
    prepared = _prepare(client, partition, kept)
    table = messages_to_table(
        prepared.messages, partition.queue_url, sns=options.sns
    ).replace_schema_metadata(
        {RECEIVED_AT: repr(received_at), DROPPED: str(len(dropped)), **prepared.metadata}
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
    yield from output_batches(table, options.sns)


def _read_deleting_after_journal(
    journal: Journal, client: Any, partition: ReceiverPartition
) -> Iterator[pa.RecordBatch]:
    """``deleteAfterJournal``: journal each receive call's messages as a part, then delete them
    at once, so a FIFO group unlocks and can yield more messages within the same batch.

    The parts of an earlier, failed attempt are kept (their messages may already be deleted):
    they belong to this receiver's rows. The final entry, the parts combined, records in its
    metadata which messages still await deletion (the driver deletes those on commit).
    """
    earlier = journal.read_parts(partition.batch, partition.receiver)
    tables = [table for _, table in earlier]
    # Whether the failed attempt deleted them is unknown: the driver deletes them again.
    pending: set[str] = {i for t in tables for i in t.column("messageId").to_pylist()}
    dropped_count = 0
    next_part = earlier[-1][0] + 1 if earlier else 0
    caller = BatchCaller(client, partition.queue_url)

    def on_chunk(messages: list[dict[str, Any]]) -> None:
        nonlocal dropped_count, next_part
        kept = [m for m in messages if m["MessageId"] not in partition.drop_ids]
        dropped = [m for m in messages if m["MessageId"] in partition.drop_ids]
        # Hook (envelopes): SNS unwrapping, extended payloads, lag metadata.
        prepared = _prepare(client, partition, kept)
        kept = prepared.messages
        table = messages_to_table(kept, partition.queue_url, sns=partition.options.sns)
        table = table.replace_schema_metadata({RECEIVED_AT: repr(time.time()), **prepared.metadata})
        if not journal.write_part(partition.batch, partition.receiver, next_part, table):
            raise JournalError(
                f"batch {partition.batch} receiver {partition.receiver}: part {next_part} "
                "was written by a concurrent attempt of this task"
            )
        next_part += 1
        tables.append(table)
        entries = [Entry(m["MessageId"], m["ReceiptHandle"]) for m in kept]
        try:
            result = caller.delete(entries)
            pending.update(result.permanent)
            pending.update(result.transient)
        except Exception as exc:
            logger.warning("deleting journaled messages failed; deleting on commit: %s", exc)
            pending.update(e.message_id for e in entries)
        if dropped:
            dropped_count += len(dropped)
            _delete_redeliveries(client, partition, dropped)

    already = sum(t.num_rows for t in tables)
    _, stats = receive_messages(client, partition, on_chunk=on_chunk, already=already)
    combined = (
        pa.concat_tables([t.replace_schema_metadata(None) for t in tables])
        if tables
        else messages_to_table([], partition.queue_url, sns=partition.options.sns)
    )
    first_receive = min(
        (float((t.schema.metadata or {}).get(RECEIVED_AT, b"0")) for t in tables),
        default=time.time(),
    )
    combined = combined.replace_schema_metadata(
        {
            RECEIVED_AT: repr(first_receive),
            PENDING_DELETE: json.dumps(sorted(pending)),
            DROPPED: str(dropped_count),
            **merged_metadata(t.schema.metadata for t in tables),
        }
    )
    if not journal.write_entry(partition.batch, partition.receiver, combined):
        replay = journal.read_entry(partition.batch, partition.receiver)
        assert replay is not None
        combined = replay
    logger.info(
        "batch %d receiver %d: received, journaled and deleted %d messages in %d calls "
        "(%d from an earlier attempt, %d left to delete on commit)",
        partition.batch,
        partition.receiver,
        combined.num_rows,
        stats.calls,
        already,
        len(pending),
    )
    yield from output_batches(combined, partition.options.sns)


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


def _prepare(client: Any, partition: ReceiverPartition, messages: list[dict[str, Any]]) -> Prepared:
    """``envelopes.prepare`` for this receiver: on a rejected message or a payload that cannot
    be fetched, every message of the call is released and the task fails."""
    return prepare(
        messages,
        partition.options,
        now=time.time(),
        release=lambda ms: _release_entries(
            client, partition, [Entry(m["MessageId"], m["ReceiptHandle"]) for m in ms]
        ),
        where=f"batch {partition.batch} receiver {partition.receiver}",
    )


def _release(client: Any, partition: ReceiverPartition, table: pa.Table) -> None:
    """Make messages this attempt received but did not journal visible again at once."""
    ids = table.column("messageId").to_pylist()
    handles = table.column(RECEIPT_HANDLE).to_pylist()
    _release_entries(client, partition, [Entry(i, h) for i, h in zip(ids, handles, strict=True)])


def _release_entries(client: Any, partition: ReceiverPartition, entries: list[Entry]) -> None:
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
