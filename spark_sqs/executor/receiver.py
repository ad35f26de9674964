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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from botocore.exceptions import ClientError

from ..acknowledgement.assigned import acknowledge_assigned
from ..acknowledgement.deletes import delete_messages
from ..driver.planning import ReceiverPartition
from ..errors import JournalError, JournalOutcomeUnknown
from ..journal import (
    BYTES,
    DROPPED,
    EXPIRED_DROPPED,
    ID_COLUMNS,
    LIVE,
    PENDING_DELETE,
    RECEIVED_AT,
    REMOVED,
    RETIRED_STATUS,
    SEAL,
    STOPPED_BY,
    WINDOW_DROPPED,
    WINDOW_KEYS,
    BatchPlan,
    Journal,
    window,
)
from ..journal.poison import FIRST_ATTEMPT
from ..journal.stops import (
    STOP_BUDGET,
    STOP_BYTES,
    STOP_CAUGHT_UP,
    STOP_EMPTY,
    STOP_ERROR,
    STOP_IN_FLIGHT,
    STOP_LIMIT,
    STOP_VISIBLE,
    STOP_WAITED,
)
from ..schema import RECEIPT_HANDLE, messages_to_table, output_batches
from ..sqs.batching import BatchCaller, Entry
from ..sqs.client import SqsClient, cached_client, classify, error_code
from . import duplicates, memory, poison
from .envelopes import PayloadDeleter, Prepared, merged_metadata, message_bytes, prepare
from .extension import extend_journaled

if TYPE_CHECKING:
    from ..journal import EntryReceipts
    from ..options import SqsOptions

logger = logging.getLogger(__name__)

RECEIVE_BATCH = 10
# A message received longer ago than this fraction of visibilityTimeout is journaled only once
# SQS confirms its handle (_still_held): what is left of the timeout then covers the write.
HANDLE_CHECK_AFTER = 0.5
# Consecutive receives answered with fewer messages than asked for: the receiver has caught up
# with the queue, and waiting out the time budget would only add latency.
CAUGHT_UP_AFTER = 3
# A long poll that took longer than this had to wait: SQS found nothing visible when asked, so
# the receiver has caught up, whatever the call then returned (a producer's batch of 10 that
# arrived meanwhile comes back whole, never "short"). A call SQS answers at once costs a round
# trip: tens of ms in a region, 5-60 ms here against moto and LocalStack, with or without a
# 20 ms delay proxy. 0.25 s is several times that, and shorter than the gaps of a producer that
# sends batches of 10 at up to 40 messages/s. A busy machine can make an immediate answer
# slower still; the receiver then ends its batch early, with what it has journaled, and the
# rest waits for the next batch: a smaller batch, never a lost message. While a receiver is
# below its part of what the driver saw visible, a full answer is never taken for a wait: the
# messages were there, and a backlog drained on a busy machine keeps its batch size.
WAITED_SECONDS = 0.25
# Beyond its part of the messages the driver saw visible, a receiver takes up to one more call's
# worth, asking without waiting: the count is approximate (and eventually consistent on SQS),
# and a call returns up to 10 whatever the part. Anything left is the next batch's, planned
# with a fresh count right after this one.
VISIBLE_MARGIN = RECEIVE_BATCH


@dataclass(frozen=True)
class _Clocks:
    """Time as a receiver sees it; the simulation (sim/) passes its simulated clock."""

    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    # The duplicate window's segment listings this task made (its lookups), newest last: each
    # was taken after the task started, so after the previous batch committed, and the merge
    # of that batch's segments reuses the newest instead of listing again.
    window_listings: list[list[window.SegmentKey]] = field(default_factory=list)


@dataclass
class ReceiveStats:
    calls: int = 0
    received: int = 0
    duplicates_in_loop: int = 0
    stopped_by: str = ""  # a ``STOP_*`` reason (journal/stops.py)
    seconds: float = 0.0
    # Bytes the loop holds (envelopes.message_bytes of each message it keeps).
    bytes: int = 0
    # Message id -> the receiver's monotonic clock when the receive call that returned its
    # current handle started: its visibility runs out no earlier than that plus the timeout.
    received_at: dict[str, float] = field(default_factory=dict)


def receive_messages(
    client: SqsClient,
    partition: ReceiverPartition,
    *,
    clock: Callable[[], float] = time.monotonic,
    on_chunk: Callable[[list[dict[str, Any]], float], None] | None = None,
    already: int = 0,
    already_bytes: int = 0,
) -> tuple[list[dict[str, Any]], ReceiveStats]:
    """Loop ``ReceiveMessage`` until the receiver has caught up or reached an outer limit.

    Caught up: an empty receive, ``CAUGHT_UP_AFTER`` short receives in a row, a long poll that
    waited (``WAITED_SECONDS``), or its part of the messages visible when the batch was planned
    (``partition.visible``) plus ``VISIBLE_MARGIN``, which it takes without waiting. Outer
    limits: its share of ``maxMessagesPerTrigger``, its byte limit, and the time budget.
    ``clock`` is the executor's monotonic clock (the simulation's in sim/).

    ``on_chunk`` sees the messages of each call as soon as they arrive, with the monotonic time
    the call started (``ReceiveStats.received_at``); ``already`` and ``already_bytes`` count
    the messages and bytes an earlier attempt journaled towards this receiver's share.

    The byte limit (``partition.max_bytes``, from the plan; None for a plan written before
    byte limits) is the memory bound: a call is made only while the bytes held
    (``envelopes.message_bytes``) are below it. Sizes are unknown before a call returns, so a
    receiver holds less than the limit plus one call's messages: at most 10 messages of 1 MiB
    each (SQS's largest), plus the declared payloads of Extended Client messages.
    """
    options = partition.options
    stats = ReceiveStats()
    started = clock()
    deadline = started + options.receive_budget_seconds
    by_id: dict[str, dict[str, Any]] = {}
    fifo = partition.queue_url.endswith(".fifo")
    short_in_a_row = 0
    part = partition.visible
    sizes: dict[str, int] = {}
    while len(by_id) + already < partition.max_messages:
        have = len(by_id) + already
        if part is not None and have >= part + VISIBLE_MARGIN:
            stats.stopped_by = STOP_VISIBLE
            break
        if partition.max_bytes is not None and stats.bytes + already_bytes >= partition.max_bytes:
            stats.stopped_by = STOP_BYTES
            break
        wanted = min(RECEIVE_BATCH, partition.max_messages - have)
        # Past its part of what the driver saw, a receiver only takes what is there now.
        beyond = part is not None and have >= part
        if beyond:
            wanted = min(wanted, part + VISIBLE_MARGIN - have)
        wait = 0 if beyond else options.wait_time_seconds
        request: dict[str, Any] = {
            "QueueUrl": partition.queue_url,
            "MaxNumberOfMessages": wanted,
            "WaitTimeSeconds": wait,
            "VisibilityTimeout": options.visibility_timeout,
            "MessageSystemAttributeNames": ["All"],
            "MessageAttributeNames": list(options.message_attribute_names),
        }
        if fifo:
            request["ReceiveRequestAttemptId"] = attempt_id(partition, stats.calls)
        called_at = clock()
        try:
            response = _receive(client, request, partition)
        except Exception as exc:
            if error_code(exc) == "OverLimit":
                # The queue is at SQS's in-flight limit: a short poll fails where a long poll
                # returns nothing. Failing the task would keep this batch's other receivers'
                # messages in flight, so every retry would fail again; end like a long poll.
                logger.warning(
                    "batch %d receiver %d: the queue is at SQS's in-flight limit (OverLimit); "
                    "stopping the receive loop after %d messages",
                    partition.batch,
                    partition.receiver,
                    len(by_id),
                )
                stats.stopped_by = STOP_IN_FLIGHT
                break
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
            stats.stopped_by = STOP_ERROR
            break
        took = clock() - called_at
        stats.calls += 1
        messages = response.get("Messages") or []
        for message in messages:
            if message["MessageId"] in by_id:
                # A redelivery within the loop: only the newest receipt handle stays valid.
                stats.duplicates_in_loop += 1
            by_id[message["MessageId"]] = message
            stats.received_at[message["MessageId"]] = called_at
            size = message_bytes(message, options)
            # A redelivery replaces the message it repeats.
            stats.bytes += size - sizes.get(message["MessageId"], 0)
            sizes[message["MessageId"]] = size
        if messages and on_chunk is not None:
            on_chunk(messages, called_at)
        if not messages:
            stats.stopped_by = STOP_EMPTY
            break
        short = len(messages) < wanted
        # With a trickle of messages, a long poll returns each one as it arrives and never comes
        # back empty: without this, every batch would last the whole time budget.
        short_in_a_row = short_in_a_row + 1 if short else 0
        if short_in_a_row >= CAUGHT_UP_AFTER or (beyond and short):
            stats.stopped_by = STOP_CAUGHT_UP
            break
        # A full answer that leaves the receiver below its part is a slow server, not a wait:
        # the driver saw those messages.
        below_part = part is not None and len(by_id) + already < part
        if wait > 0 and took > WAITED_SECONDS and (short or not below_part):
            stats.stopped_by = STOP_WAITED
            break
        if clock() >= deadline:
            stats.stopped_by = STOP_BUDGET
            break
    else:
        stats.stopped_by = STOP_LIMIT
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


def _receive(client: SqsClient, request: dict[str, Any], partition: ReceiverPartition) -> Any:
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
    client_factory: Callable[[], SqsClient] | None = None,
    journal: Journal | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[pa.RecordBatch]:
    """The body of ``SqsStreamReader.read``: replay the journal entry or receive and journal.

    ``clock``, ``wall_clock`` and ``sleep`` (of batch-call retries) are seams for the
    deterministic simulation (sim/); Spark's executors use the defaults."""
    options = partition.options
    clocks = _Clocks(clock, wall_clock, sleep)
    if journal is None:
        journal = Journal(options.journal_location, options)
    table = journal.entries.read(partition.batch, partition.receiver)
    if table is not None:
        # Poison batches (poison.py): count this attempt; refuse (policy fail) or deliver only
        # what a narrowed batch keeps (policy deadLetter).
        table = poison.on_replay(journal, partition, table)
        table = _without_siblings_ids(journal, partition, table)
        logger.info(
            "batch %d receiver %d: replayed %d messages from the journal",
            partition.batch,
            partition.receiver,
            table.num_rows,
        )
        yield from output_batches(table, options.sns)
        return
    plan = journal.plans.read(partition.batch)
    mine = plan.receiver(partition.receiver) if plan is not None else None
    if plan is None or mine is None:
        if plan is None and _removed_long_ago(journal, partition):
            return
        raise JournalError(
            f"batch {partition.batch} receiver {partition.receiver}: the batch's plan is not in "
            f"journalLocation {options.journal_location} as this executor sees it, though the "
            "driver wrote it. Fix: on a cluster, use an s3://bucket/prefix journalLocation (a "
            "local path must be one file system shared by the driver and every executor). (A "
            "straggling attempt of a batch that was acknowledged meanwhile fails like this too; "
            "Spark discards it.)"
        )
    if journal.batches.status(partition.batch) == RETIRED_STATUS:
        # A task of a dead driver: a later batch delivers this orphan's entries.
        logger.warning(
            "batch %d receiver %d: the batch was adopted by a later batch; this attempt "
            "delivers nothing",
            partition.batch,
            partition.receiver,
        )
        return
    if mine.adopt_from is not None:
        # The driver copies adopted entries (an empty one for a source that vanished) before
        # it returns the partitions.
        raise JournalError(
            f"batch {partition.batch} receiver {partition.receiver}: the entry it delivers, "
            f"copied from batch {mine.adopt_from[0]}, is missing from journalLocation "
            f"{options.journal_location}. Fix: if the journal was changed by hand, stop the "
            f"query and run `spark-sqs release --journal {options.journal_location} --batch "
            f"{partition.batch}` (the batch then delivers nothing; its messages come back to "
            "the queue)"
        )
    # The plan's limits and count, not the partition's: a replay receives what the first plan
    # allowed.
    partition = replace(
        partition, max_messages=mine.limit, visible=mine.visible, max_bytes=mine.max_bytes
    )
    drop_ids = journal.drops.read(plan.drops)
    if partition.replay:
        # After a restart, journaled messages may have become visible again (no heartbeat
        # ran): other receivers' of this batch, and those of earlier pending batches.
        drop_ids = (
            drop_ids
            | journal.drops.read(partition.replay_drops)
            | journal.entries.batch_message_ids(
                partition.batch, (r.receiver for r in plan.receivers), but=partition.receiver
            )
        )
    client = (
        client_factory()
        if client_factory
        else cached_client(options.connection, wait_time_seconds=options.wait_time_seconds)
    )
    assigned = plan.acks_by(partition.receiver)
    if assigned:
        # Committed batches' messages, deleted here rather than by the driver, before this
        # receiver journals: a retry repeats the deletes; the batch commits only once all ran.
        acknowledge_assigned(
            journal,
            client,
            partition.queue_url,
            partition.batch,
            partition.receiver,
            assigned,
            on_deleted=_payload_deleter(options),
            wall_clock=wall_clock,
            duplicate_window=options.duplicate_window,
        )
    if plan.deletes_on_journal(options.delete_after_journal):
        yield from _read_deleting_after_journal(
            journal, client, partition, drop_ids, clocks, plan=plan
        )
        return
    received_at = wall_clock()
    messages, stats = receive_messages(client, partition, clock=clock)
    # Looked up after receiving: a copy exists only after its delete, which comes after its
    # window segment (journal/window.py), so this sees the segment of any copy received here.
    copies = _window_copies(journal, partition, messages, clocks)
    drop_ids = drop_ids | _held_elsewhere(journal, plan, partition, messages) | copies
    kept = [m for m in messages if m["MessageId"] not in drop_ids]
    # Without their bodies: only their handles and window keys are needed, after yielding.
    dropped = [_slim(m) for m in messages if m["MessageId"] in drop_ids]
    del messages
    # SNS unwrapping, extended payloads, lag metadata (envelopes.py), before journaling.
    prepared = _prepare(client, partition, kept, clocks)
    # A receiver that stalled (GC, payload fetches, a lost network) may hold handles that
    # expired: another receiver may have the messages now. Only what SQS confirms is journaled.
    held, expired = _still_held(client, partition, prepared.messages, stats.received_at, clocks)
    metadata = {
        RECEIVED_AT: repr(received_at),
        DROPPED: str(len(dropped)),
        WINDOW_DROPPED: str(len(copies)),
        EXPIRED_DROPPED: str(expired),
        **_window_metadata(kept, options),
        # The first attempt is counted by its entry, at no extra write (poison.py).
        FIRST_ATTEMPT: poison.attempt_key(partition.run),
        **prepared.metadata,
        STOPPED_BY: stats.stopped_by,
    }
    table = messages_to_table(held, partition.queue_url, sns=options.sns)
    # The memory bound (maxBytesPerReceiver): the received messages go once they are in the
    # table, so that the table and what journaling it costs are all this attempt holds.
    del kept, prepared, held
    memory.release(stats.bytes)
    table = table.replace_schema_metadata(metadata)
    try:
        written = journal.entries.write(partition.batch, partition.receiver, table)
    except JournalOutcomeUnknown:
        # The entry may exist (or appear later): its messages must stay invisible, held by
        # it. A retry of this task replays it if it landed; if not, they reappear after the
        # visibility timeout.
        raise
    except Exception:
        # Nothing was journaled: hand the messages back now rather than after the timeout.
        _release(client, partition, table, clocks)
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
        released = _release(client, partition, _without(table, held), clocks)
        table = stored
        logger.warning(
            "batch %d receiver %d: another attempt journaled first; released the %d of %d "
            "messages it does not hold",
            partition.batch,
            partition.receiver,
            released,
            stats.received,
        )
    elif (finished := _finished(journal, partition)) is not None:
        if finished == REMOVED:
            # A straggler: the batch was acknowledged (and its entries removed) while this
            # attempt received. Nothing of ours reached a sink: remove our entry first, then
            # hand the messages back (a crash between leaves them invisible until the
            # timeout, not lost).
            journal.entries.remove(partition.batch, partition.receiver)
            _release(client, partition, table, clocks)
        # Retired: the adoption may have copied our entry (it reads entries after retiring the
        # batch); it stays, and so do its messages' handles, for whoever delivers them.
        return
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
    if written and plan.extend_by:
        # A slow pipeline (the plan says so): the first extension is made here, not by the
        # driver one message at a time (extension.py).
        extend_journaled(
            journal,
            client,
            partition.queue_url,
            partition.batch,
            partition.receiver,
            table,
            plan.extend_by,
            wall_clock=wall_clock,
            sleep=sleep,
        )
    if dropped:
        _delete_redeliveries(journal, client, partition, dropped, clocks)
    _merge_window(journal, partition, plan, clocks)
    yield from output_batches(table, options.sns)


def _merge_window(
    journal: Journal, partition: ReceiverPartition, plan: BatchPlan, clocks: _Clocks
) -> None:
    """One receiver of each batch merges the previous batch's window segments into one, so
    that the workers of later batches read one object per batch, not one per receiver. The
    previous batch is committed (Spark runs a batch only after the one before it), so all its
    segments exist; the receiver is fixed by the stored plan, so a replay picks the same one.
    The merge uses the listing of this task's newest window lookup (taken after the previous
    batch committed), and lists only when the task made none. FIFO queues write no segments."""
    options = partition.options
    if options.duplicate_window <= 0 or partition.batch < 1 or not plan.receivers:
        return
    if window.is_fifo(partition.queue_url):
        return
    previous = partition.batch - 1
    if plan.receivers[previous % len(plan.receivers)].receiver != partition.receiver:
        return
    try:
        listing = clocks.window_listings[-1] if clocks.window_listings else None
        window.merge_batch(journal.store, previous, listing)
    except Exception:
        # Storage, not correctness: readers read the parts until a later merge or expiry.
        logger.warning(
            "batch %d receiver %d: could not merge the window segments of batch %d",
            partition.batch,
            partition.receiver,
            previous,
            exc_info=True,
        )


def _window_copies(
    journal: Journal,
    partition: ReceiverPartition,
    messages: list[dict[str, Any]],
    clocks: _Clocks,
) -> frozenset[str]:
    """Ids of ``messages`` that copy a message acknowledged within ``duplicateWindow``: by
    MessageId, or by their ``duplicateAttribute`` value (also among ``messages`` themselves:
    two sends of one row handed to this receiver)."""
    options = partition.options
    keys = {m["MessageId"]: _window_keys(m, options) for m in messages}
    seen = duplicates.copies(
        journal.store,
        options.journal_location,
        options.duplicate_window,
        [k for m in messages for k in (m["MessageId"], *keys[m["MessageId"]])],
        queue_url=partition.queue_url,
        now=clocks.wall_clock(),
        listed=clocks.window_listings,
    )
    found: set[str] = set()
    first: set[str] = set()
    for m in messages:
        mine = keys[m["MessageId"]]
        if m["MessageId"] in seen or any(k in seen or k in first for k in mine):
            found.add(m["MessageId"])
        first.update(mine)
    if found:
        logger.warning(
            "batch %d receiver %d: dropped %d copies of messages acknowledged within the last "
            "%.0fs (duplicateWindow)",
            partition.batch,
            partition.receiver,
            len(found),
            options.duplicate_window,
        )
    return frozenset(found)


def _window_keys(message: dict[str, Any], options: Any) -> tuple[str, ...]:
    """The window keys of a message's ``duplicateAttribute`` value (none without one)."""
    name = options.duplicate_attribute
    if not name or options.duplicate_window <= 0:
        return ()
    value = ((message.get("MessageAttributes") or {}).get(name) or {}).get("StringValue")
    return (window.attribute_key(value),) if value else ()


def _window_metadata(messages: list[dict[str, Any]], options: Any) -> dict[bytes, bytes]:
    """The entry's ``duplicateAttribute`` keys, which its acknowledgement adds to the window."""
    keys = [k for m in messages for k in _window_keys(m, options)]
    return {WINDOW_KEYS: json.dumps(keys).encode()} if keys else {}


def _held_elsewhere(
    journal: Journal,
    plan: BatchPlan,
    partition: ReceiverPartition,
    messages: list[dict[str, Any]],
) -> frozenset[str]:
    """Ids journaled by the batches pending when this one was planned (its other receivers
    included), read only when a message arrives that SQS delivered before: its visibility ran
    out while a batch held it (a late or failing heartbeat, a task started late, a restart).
    Each batch's receivers are those its plan (or carry record) names, read by key."""
    again = [m for m in messages if _receive_count(m) > 1]
    if not again:
        return frozenset()
    ids: set[str] = set()
    for batch in plan.pending:
        if batch == partition.batch:
            receivers: tuple[int, ...] | None = tuple(r.receiver for r in plan.receivers)
        elif journal.batches.status(batch) != LIVE:
            # Acknowledged (its messages were deleted: a copy is the duplicate window's), or
            # retired: what it held was copied into the batch that adopted it, and what a
            # task of a dead driver wrote there afterwards is delivered by nobody.
            continue
        else:
            receivers = journal.batches.live_receivers(batch)
        if receivers:
            ids |= journal.entries.batch_message_ids(
                batch, receivers, but=partition.receiver if batch == partition.batch else None
            )
    return frozenset(ids)


def _receive_count(message: dict[str, Any]) -> int:
    try:
        return int((message.get("Attributes") or {}).get("ApproximateReceiveCount", "1"))
    except ValueError:
        return 1


def _still_held(
    client: SqsClient,
    partition: ReceiverPartition,
    messages: list[dict[str, Any]],
    received_at: dict[str, float],
    clocks: _Clocks,
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


def _without_siblings_ids(
    journal: Journal, partition: ReceiverPartition, table: pa.Table
) -> pa.Table:
    """A replayed entry without the ids that a receiver of the same batch with a lower number
    journaled. No message is ever meant to be in two entries of one batch; one can be only
    after a journal write that landed after its handles expired (docs/design.md, "Stalls"):
    the lowest receiver that holds it delivers it, on every replay alike. Read by key, on
    replays only."""
    plan = journal.plans.read(partition.batch)
    lower = [r.receiver for r in plan.receivers if r.receiver < partition.receiver] if plan else []
    if not lower or table.num_rows == 0:
        return table
    theirs = set(journal.entries.batch_message_ids(partition.batch, lower))
    if not theirs.intersection(table.column("messageId").to_pylist()):
        return table
    logger.warning(
        "batch %d receiver %d: its entry holds messages another receiver of the batch "
        "journaled (a journal write that outlasted its handles); the replay leaves them out",
        partition.batch,
        partition.receiver,
    )
    return _without(table, theirs)


def _finished(journal: Journal, partition: ReceiverPartition) -> str | None:
    """Why no attempt of this batch may keep what it journaled any more, or None while the
    batch is live: ``"removed"`` (acknowledged and removed: a straggler, e.g. of speculation)
    or ``"retired"`` (an orphan that a later batch delivers: a task of a dead driver). Read by
    key (``Batches.status``), never from a LIST that may lag."""
    status = journal.batches.status(partition.batch)
    if status == LIVE:
        return None
    logger.warning(
        "batch %d receiver %d: the batch was %s meanwhile; this attempt delivers nothing",
        partition.batch,
        partition.receiver,
        "acknowledged" if status == REMOVED else "adopted by a later batch",
    )
    return status


def _removed_long_ago(journal: Journal, partition: ReceiverPartition) -> bool:
    """An attempt that found no plan: a straggler of a batch acknowledged and removed before it
    started, if the state says the batch is acknowledged (a LIST: a listing that lags only
    turns this quiet return into the error the caller raises, which Spark discards too)."""
    if partition.batch > journal.state.read().acked_batch:
        return False
    logger.warning(
        "batch %d receiver %d: batch already acknowledged; this attempt delivers nothing",
        partition.batch,
        partition.receiver,
    )
    return True


def _slim(message: dict[str, Any]) -> dict[str, Any]:
    """A received message without its body: what deleting it and its window keys need."""
    return {
        k: message[k] for k in ("MessageId", "ReceiptHandle", "MessageAttributes") if k in message
    }


def ids_of(messages: list[dict[str, Any]]) -> list[str]:
    return [m["MessageId"] for m in messages]


def _without(table: pa.Table, ids: set[str]) -> pa.Table:
    keep = [i not in ids for i in table.column("messageId").to_pylist()]
    return table.filter(pa.array(keep, pa.bool_()))


class _StopReceiving(Exception):
    """Ends the receive loop of a deleteAfterJournal attempt that must not go on."""


def _read_deleting_after_journal(
    journal: Journal,
    client: SqsClient,
    partition: ReceiverPartition,
    drop_ids: frozenset[str],
    clocks: _Clocks | None = None,
    plan: BatchPlan | None = None,
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
    clocks = clocks or _Clocks()
    # Their ids and metadata only: the bodies stay in the store (the memory bound).
    earlier = journal.entries.read_parts(partition.batch, partition.receiver, ID_COLUMNS)
    stopped_by = ""
    if not _sealed(earlier):
        stopped_by, received = _receive_parts(
            journal, client, partition, drop_ids, earlier, clocks, plan
        )
        # Each call's messages are in their part: the heap they took goes back (memory.py).
        memory.release(received)
        if _finished(journal, partition) is not None:
            return
    del earlier
    written, pending = _seal(journal, partition, clocks, stopped_by)
    if written and _finished(journal, partition) == REMOVED:
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
    if plan is not None:
        _merge_window(journal, partition, plan, clocks)
    yield from output_batches(combined, partition.options.sns)


def _receive_parts(
    journal: Journal,
    client: SqsClient,
    partition: ReceiverPartition,
    drop_ids: frozenset[str],
    earlier: list[tuple[int, pa.Table]],
    clocks: _Clocks,
    plan: BatchPlan | None = None,
) -> tuple[str, int]:
    """Receive, journaling each call's messages as a part and then deleting them. Returns why
    receiving stopped and the bytes received (``ReceiveStats.bytes``); ``("", 0)`` if the loop
    was stopped."""
    journaled: set[str] = {i for _, t in earlier for i in t.column("messageId").to_pylist()}
    next_part = earlier[-1][0] + 1 if earlier else 0
    caller = BatchCaller(client, partition.queue_url, sleep=clocks.sleep)

    options = partition.options

    def on_chunk(messages: list[dict[str, Any]], called_at: float) -> None:
        nonlocal next_part
        # Redeliveries of messages journaled by this receiver's earlier parts (a retried task)
        # or by other batches are already held by the journal: delete, never journal again.
        elsewhere = (
            _held_elsewhere(journal, plan, partition, messages) if plan is not None else frozenset()
        )
        copies = _window_copies(journal, partition, messages, clocks)
        held = [
            m["MessageId"] in drop_ids
            or m["MessageId"] in journaled
            or m["MessageId"] in elsewhere
            or m["MessageId"] in copies
            for m in messages
        ]
        kept = [m for m, h in zip(messages, held, strict=True) if not h]
        dropped = [m for m, h in zip(messages, held, strict=True) if h]
        if dropped:
            _delete_redeliveries(journal, client, partition, dropped, clocks)
        if not kept:
            return
        # SNS unwrapping, extended payloads, lag metadata (envelopes.py), before journaling.
        prepared = _prepare(client, partition, kept, clocks)
        # Only what this receiver still holds is journaled (and then deleted): see _still_held.
        kept, _ = _still_held(
            client, partition, prepared.messages, dict.fromkeys(ids_of(kept), called_at), clocks
        )
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
            _release(client, partition, table, clocks)
            raise
        if not created:
            # A concurrent attempt took this number: it goes on; we stop without deleting, and
            # hand back only what its part lacks (FIFO twins got the same messages).
            theirs = journal.entries.read_part(
                partition.batch, partition.receiver, next_part, ID_COLUMNS
            )
            held = set(theirs.column("messageId").to_pylist()) if theirs is not None else set()
            _release(client, partition, _without(table, held), clocks)
            raise _StopReceiving
        next_part += 1
        journaled.update(m["MessageId"] for m in kept)
        if _finished(journal, partition) is not None:
            # Acknowledged: the part is in no entry; retired: the adoption may copy it or not.
            # Either way its messages are left in flight, not deleted: they reappear.
            raise _StopReceiving
        entries = [Entry(m["MessageId"], m["ReceiptHandle"]) for m in kept]
        # The window's segment precedes the delete: a copy can only come after it.
        deletion = delete_messages(
            journal,
            caller,
            [entries],
            window=[(k, None) for m in kept for k in (m["MessageId"], *_window_keys(m, options))],
            queue_url=partition.queue_url,
            duplicate_window=partition.options.duplicate_window,
            batch=partition.batch,
            who=f"r{partition.receiver:06d}-p{next_part - 1:05d}",
            now=clocks.wall_clock(),
            catch=Exception,
        )
        if deletion.error is not None:
            # The entry lists every part's messages as awaiting deletion: the driver retries.
            logger.warning(
                "deleting journaled messages failed; deleting on commit: %s", deletion.error
            )

    already = sum(t.num_rows for _, t in earlier)
    already_bytes = sum(int((t.schema.metadata or {}).get(BYTES, b"0")) for _, t in earlier)
    try:
        _, stats = receive_messages(
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
    journal: Journal, partition: ReceiverPartition, clocks: _Clocks, stopped_by: str = ""
) -> tuple[bool, set[str]]:
    """Create the seal after the last part (or find the one another attempt created), then
    create the entry from the parts below it, streamed one part at a time. Every message of
    the entry is marked as awaiting deletion: which attempt deleted what is unknown, and a
    repeated delete is harmless. ``stopped_by``: why this attempt stopped receiving, if it
    received (the entry's counters only). Returns whether this call created the entry, and
    its ids."""
    empty = messages_to_table([], partition.queue_url, sns=partition.options.sns)
    while True:
        # Ids and metadata (where the seal is marked) only: the bodies are read once, below.
        parts = journal.entries.read_parts(partition.batch, partition.receiver, ID_COLUMNS)
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
        FIRST_ATTEMPT: poison.attempt_key(partition.run).encode(),
        **merged_metadata(t.schema.metadata for _, t in below),
        **({STOPPED_BY: stopped_by.encode()} if stopped_by else {}),
    }
    written = journal.entries.write_from_parts(
        partition.batch, partition.receiver, [k for k, _ in below], metadata, empty.schema
    )
    return written, ids


def _delete_redeliveries(
    journal: Journal,
    client: SqsClient,
    partition: ReceiverPartition,
    dropped: list[dict[str, Any]],
    clocks: _Clocks,
) -> None:
    """Delete redeliveries of already-journaled messages with their fresh receipt handles."""
    entries = [Entry(m["MessageId"], m["ReceiptHandle"]) for m in dropped]
    ids = sorted(k for m in dropped for k in (m["MessageId"], *_window_keys(m, partition.options)))
    # Like every delete: a copy SQS hands out after it must find the id in the window.
    deletion = delete_messages(
        journal,
        BatchCaller(client, partition.queue_url, sleep=clocks.sleep),
        [entries],
        window=[(i, None) for i in ids],
        queue_url=partition.queue_url,
        duplicate_window=partition.options.duplicate_window,
        batch=partition.batch,
        who=f"r{partition.receiver:06d}-d{hashlib.sha256(' '.join(ids).encode()).hexdigest()[:10]}",
        now=clocks.wall_clock(),
        catch=Exception,
    )
    if deletion.error is not None:
        logger.warning("could not delete redelivered messages", exc_info=deletion.error)
        failed = len(entries)
    else:
        failed = len(deletion.permanent) + len(deletion.transient)
    # If a delete failed the message comes back once more and is dropped again.
    logger.warning(
        "batch %d receiver %d: dropped %d redelivered messages already journaled by an earlier "
        "batch (%d could not be deleted yet)",
        partition.batch,
        partition.receiver,
        len(dropped),
        failed,
    )


def _prepare(
    client: SqsClient, partition: ReceiverPartition, messages: list[dict[str, Any]], clocks: _Clocks
) -> Prepared:
    """``envelopes.prepare`` for this receiver: on a rejected message or a payload that cannot
    be fetched, every message of the call is released and the task fails."""
    return prepare(
        messages,
        partition.options,
        now=clocks.wall_clock(),
        release=lambda ms: _release_entries(
            client, partition, [Entry(m["MessageId"], m["ReceiptHandle"]) for m in ms], clocks
        ),
        where=f"batch {partition.batch} receiver {partition.receiver}",
    )


def _release(
    client: SqsClient, partition: ReceiverPartition, table: pa.Table, clocks: _Clocks
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
    client: SqsClient, partition: ReceiverPartition, entries: list[Entry], clocks: _Clocks
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


def _payload_deleter(options: SqsOptions) -> PayloadDeleter | None:
    """deleteExtendedPayloads: a receiver that deletes committed messages deletes their S3
    payloads too, never those of messages whose deletion may not have taken effect."""
    if not options.delete_extended_payloads:
        return None
    from .envelopes import delete_payloads, s3_client

    def delete(receipts: Sequence[EntryReceipts], uncertain: set[str]) -> None:
        delete_payloads(receipts, s3_client(options), exclude=uncertain)

    return delete
