"""The receive step: one receiver's ``ReceiveMessage`` loop. Runs on: executors.

``receive_messages`` calls SQS until the receiver has caught up with the queue or reached an
outer limit (its share of the batch, its byte limit, its time budget); the pipeline in
``receiver.py`` filters, journals and yields what it returns (or, under deleteAfterJournal,
each call's messages as they arrive: ``on_chunk``).
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from ..driver.planning import ReceiverPartition
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
from ..sqs.client import SqsClient, classify, error_code
from .envelopes import message_bytes

logger = logging.getLogger(__name__)

RECEIVE_BATCH = 10
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
class Clocks:
    """Time as a receiver sees it; the simulation (sim/) passes its simulated clock."""

    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep


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
