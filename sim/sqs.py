"""An in-memory SQS for the deterministic simulation. Runs on: the simulator's process only.

``SimSqs`` answers the calls spark-sqs makes with the boto3 client's request and response shapes
(keyword arguments in, dicts with ``ResponseMetadata`` out, ``botocore.exceptions.ClientError``
with the codes botocore surfaces from AWS). Everything random comes from ``random.Random`` seeded
by the constructor's ``seed``; time comes from a :class:`sim.clock.SimClock`. One seed, one
history: the ``trace`` replays a failing run line by line.

Modelled (docs/simulation.md has the full list and the conformance table):

- Visibility timeouts; a new receipt handle per receive; only the newest handle counts. On a
  standard queue, deleting with an older handle "succeeds" and deletes nothing; on a FIFO queue
  a superseded or expired handle fails (``InvalidParameterValue``, "The receipt handle has
  expired", as AWS answers). ``ChangeMessageVisibility`` with a superseded handle fails
  (``InvalidParameterValue``); on a message no longer in flight it fails with
  ``AWS.SimpleQueueService.MessageNotInflight``. A handle this queue never issued:
  ``ReceiptHandleIsInvalid``.
- Total invisibility of one receipt is capped at 12 hours from the receive that issued it.
- FIFO: group locking (nothing more from a group while one of its messages is in flight), order
  by send within a group, content-based and explicit deduplication for 5 minutes, and
  ``ReceiveRequestAttemptId``: a retry with the same id within 5 minutes returns the same
  messages with the same handles and restarts their visibility timeout, unless one of them was
  deleted, had its visibility changed or was received again since; then (or after 5 minutes)
  the id counts as new.
- The in-flight limit: over it a short poll fails with ``OverLimit`` and a long poll returns
  nothing.
- Standard queues: approximate order (a seeded shuffle within a window of twice the batch),
  rare duplicate deliveries (``duplicate_probability``: a message in flight is handed out again,
  with a new handle; ``ghost_probability``: a deleted message is handed out once more within
  ``ghost_delay`` seconds of its delete, which the source's ``duplicateWindow`` must drop;
  ``ghost_at_once``: of the deleted messages not ghosted so, a copy ready for the very next
  receive, as when a receive served beside the delete returns it), and optionally short polls
  that miss messages (``short_poll_miss``). ``lapsed_delete_keeps`` (off by default): a delete
  with the newest handle after its visibility timeout lapsed "succeeds" and keeps the message,
  as when another receive was handed the message meanwhile (the AWS documentation's "the
  message might not be deleted"); the source treats such a delete as uncertain.
- Long polling reduced to "what is visible now": when nothing is, a receive with
  ``WaitTimeSeconds > 0`` advances the simulated clock to the moment something becomes visible
  (or by the whole wait) and tries once more, unless ``long_poll_advances_clock=False``, when it
  returns empty at once. Nothing can be sent during the wait: the simulation has one thread.
- Faults, before the effect (throttling, 5xx, connection refused) or after it (the effect
  happens, then the response is lost: ``ReadTimeoutError``), drawn from a separate seeded stream
  at ``FaultRates`` or scripted with :class:`Fault`.
- Redrive to a dead-letter queue (``RedrivePolicy``) when a message is received more than
  ``maxReceiveCount`` times, and the retention period.

``SimSqs`` itself never retries: a fault reaches the caller as the raw botocore exception, as
with ``total_max_attempts=1``. ``SimSqs.client(total_max_attempts=N)`` wraps it like a boto3
client with botocore's retries of throttling, 5xx and network errors (a lost response retried
repeats the effect, as on AWS).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import struct
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from sim.clock import SimClock

ATTEMPT_ID_SECONDS = 300.0
DEDUP_SECONDS = 300.0
MAX_VISIBILITY_SECONDS = 43_200
DEFAULT_INFLIGHT_LIMIT = 120_000
BATCH_LIMIT = 10
PURGE_INTERVAL = 60.0

# The data-plane operations that rate-based faults apply to (queue creation is set-up).
DATA_OPERATIONS = frozenset(
    {
        "ReceiveMessage",
        "DeleteMessage",
        "DeleteMessageBatch",
        "ChangeMessageVisibility",
        "ChangeMessageVisibilityBatch",
        "SendMessage",
        "SendMessageBatch",
        "GetQueueAttributes",
        "GetQueueUrl",
        "PurgeQueue",
    }
)
FAULT_KINDS = ("throttle", "server_error", "connection_error", "lost_response")
THROTTLE_CODES = ("RequestThrottled", "Throttling")

NON_EXISTENT_QUEUE = "AWS.SimpleQueueService.NonExistentQueue"
MESSAGE_NOT_INFLIGHT = "AWS.SimpleQueueService.MessageNotInflight"
PURGE_IN_PROGRESS = "AWS.SimpleQueueService.PurgeQueueInProgress"

_BATCH_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
# The characters SQS accepts in a message body (XML 1.0's Char production).
_INVALID_BODY = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

_QUEUE_DEFAULTS = {
    "VisibilityTimeout": "30",
    "MaximumMessageSize": "1048576",
    "MessageRetentionPeriod": "345600",
    "DelaySeconds": "0",
    "ReceiveMessageWaitTimeSeconds": "0",
}
_FIFO_DEFAULTS = {
    "ContentBasedDeduplication": "false",
    "DeduplicationScope": "queue",
    "FifoThroughputLimit": "perQueue",
}
_COUNT_ATTRIBUTES = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


# botocore (SQS is "awsQueryCompatible") reports the query error code as ``Code`` and the
# modelled exception's name as ``QueryErrorCode``.
_QUERY_ERROR_CODES = {
    NON_EXISTENT_QUEUE: "QueueDoesNotExist",
    MESSAGE_NOT_INFLIGHT: "MessageNotInflight",
    PURGE_IN_PROGRESS: "PurgeQueueInProgress",
    "ReceiptHandleIsInvalid": "ReceiptHandleIsInvalid",
    "OverLimit": "OverLimit",
    "RequestThrottled": "RequestThrottled",
    "AWS.SimpleQueueService.EmptyBatchRequest": "EmptyBatchRequest",
    "AWS.SimpleQueueService.TooManyEntriesInBatchRequest": "TooManyEntriesInBatchRequest",
    "AWS.SimpleQueueService.InvalidBatchEntryId": "InvalidBatchEntryId",
    "AWS.SimpleQueueService.BatchEntryIdsNotDistinct": "BatchEntryIdsNotDistinct",
    "AWS.SimpleQueueService.BatchRequestTooLong": "BatchRequestTooLong",
}


def client_error(operation: str, code: str, message: str, status: int = 400) -> ClientError:
    """A ClientError shaped as botocore builds it from an AWS error response."""
    error = {"Code": code, "Message": message, "Type": "Sender" if status < 500 else "Receiver"}
    if code in _QUERY_ERROR_CODES:
        error["QueryErrorCode"] = _QUERY_ERROR_CODES[code]
    return ClientError(
        {
            "Error": error,
            "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}, "RetryAttempts": 0},
        },
        operation,
    )


class _EntryError(Exception):
    """An error of one message (one batch entry): a ClientError for single calls, a ``Failed``
    entry in batches."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Fault:
    """A scripted fault: the next ``count`` calls of ``operation`` ("*" for any data-plane
    operation), on ``queue_url`` if given, fail with ``kind``.

    ``kind``: "throttle" and "server_error" and "connection_error" fail before the effect;
    "lost_response" lets the effect happen, then raises ``ReadTimeoutError``. ``code``
    overrides the error code of "throttle" (default ``RequestThrottled``) and "server_error"
    (default ``InternalError``).
    """

    operation: str
    kind: str
    queue_url: str | None = None
    count: int = 1
    code: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {FAULT_KINDS}")


@dataclass
class FaultRates:
    """Probabilities per call of each fault, drawn from the fault stream of the seed."""

    throttle: float = 0.0
    server_error: float = 0.0
    connection_error: float = 0.0
    lost_response: float = 0.0
    operations: frozenset[str] = DATA_OPERATIONS

    @property
    def any(self) -> bool:
        return (self.throttle + self.server_error + self.connection_error + self.lost_response) > 0


@dataclass
class Receipt:
    """One receive of one message: its handle and the visibility deadline it set."""

    handle: str
    message: SimMessage = field(repr=False)
    number: int  # 1 for the message's first receive, 2 for the second, ...
    issued_at: float
    deadline: float

    @property
    def max_deadline(self) -> float:
        return self.issued_at + MAX_VISIBILITY_SECONDS


@dataclass
class SimMessage:
    """A message as the simulated queue holds it. Times are ``SimClock.elapsed`` seconds.
    Read-only for callers: the inspection API hands these out for invariant checks."""

    message_id: str
    queue_name: str
    body: str
    message_attributes: dict[str, dict[str, Any]]
    sent_at: float
    sent_wall_ms: int
    available_at: float
    group_id: str | None = None
    dedup_id: str | None = None
    sequence_number: str | None = None
    order: int = 0
    receive_count: int = 0
    first_received_wall_ms: int | None = None
    visible_at: float = 0.0
    receipt: Receipt | None = field(default=None, repr=False)
    deleted_at: float | None = None
    deleted_by: str | None = None  # "delete", "purge", "redrive", "retention"
    # Bumped by every receive, delete and visibility change: a ReceiveRequestAttemptId retry
    # may return a message only if nothing touched it since.
    version: int = 0

    def state(self, now: float) -> str:
        if self.deleted_at is not None:
            return "deleted"
        if self.available_at > now:
            return "delayed"
        if self.visible_at > now:
            return "in_flight"
        return "visible"


@dataclass(frozen=True)
class Delivery:
    at: float
    message_id: str
    receipt: int
    # "receive", "duplicate" (standard queue), "ghost" (a copy after the delete; standard),
    # "replay" (ReceiveRequestAttemptId)
    kind: str


@dataclass(frozen=True)
class Deletion:
    at: float
    message_id: str
    by: str  # "delete", "purge", "redrive", "retention"


@dataclass(frozen=True)
class TraceEvent:
    index: int
    at: float
    operation: str
    queue: str
    detail: str
    outcome: str

    def __str__(self) -> str:
        return (
            f"{self.index:6d} t={self.at:11.3f} {self.operation} {self.queue} "
            f"{self.detail} -> {self.outcome}"
        )


@dataclass
class _Attempt:
    created_at: float
    entries: list[tuple[SimMessage, Receipt, int]]


class _Queue:
    def __init__(
        self, name: str, url: str, arn: str, attributes: dict[str, str], now: float, wall: int
    ) -> None:
        self.name = name
        self.url = url
        self.arn = arn
        self.fifo = name.endswith(".fifo")
        self.attributes = dict(_QUEUE_DEFAULTS)
        if self.fifo:
            self.attributes.update(_FIFO_DEFAULTS)
            self.attributes["FifoQueue"] = "true"
        self.attributes.update(attributes)
        self.created_wall = wall
        self.messages: list[SimMessage] = []  # every message ever accepted, in send order
        self.live: dict[str, SimMessage] = {}  # not deleted, in send order
        self.handles: dict[str, Receipt] = {}
        self.dedup: dict[tuple[str, str], tuple[float, SimMessage]] = {}
        self.attempts: dict[str, _Attempt] = {}
        self.deliveries: list[Delivery] = []
        self.deletions: list[Deletion] = []
        self.stale_deletes: list[tuple[float, str]] = []
        self.dedup_hits: list[tuple[float, str]] = []
        self.forced_duplicates: list[str] = []
        # Copies of deleted messages still to hand out (``ghost_probability``): (time, message).
        self.ghosts: list[tuple[float, SimMessage]] = []
        self.ghosted: set[str] = set()
        self.last_purge: float | None = None
        self.created_at = now

    def int_attr(self, name: str) -> int:
        return int(self.attributes[name])


_RECEIVE_ATTRS = (
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
)
_FIFO_RECEIVE_ATTRS = ("MessageGroupId", "MessageDeduplicationId", "SequenceNumber")


class SimSqs:
    """An in-memory SQS service with the boto3 SQS client's methods. See the module docstring."""

    def __init__(
        self,
        seed: int | str = 0,
        *,
        clock: SimClock | None = None,
        region: str = "us-east-1",
        account_id: str = "123456789012",
        inflight_limit: int = DEFAULT_INFLIGHT_LIMIT,
        duplicate_probability: float = 0.0,
        ghost_probability: float = 0.0,
        ghost_delay: float = 60.0,
        ghost_at_once: float = 0.0,
        lapsed_delete_keeps: bool = False,
        short_poll_miss: float = 0.0,
        long_poll_advances_clock: bool = True,
        fault_rates: FaultRates | None = None,
        faults: Iterable[Fault] = (),
    ) -> None:
        self.seed = seed
        self.clock = clock or SimClock()
        self.region = region
        self.account_id = account_id
        self.inflight_limit = inflight_limit
        self.duplicate_probability = duplicate_probability
        self.ghost_probability = ghost_probability
        self.ghost_delay = ghost_delay
        self._ghost_rng = random.Random(f"sqs-ghosts:{seed}")
        # A stream of its own: the ghosts drawn above stay what they were.
        self.ghost_at_once = ghost_at_once
        self._at_once_rng = random.Random(f"sqs-ghosts-at-once:{seed}")
        self.ghosts_at_once = 0  # copies made ready at their delete (``ghost_at_once``)
        # Standard queues: a delete with a lapsed (newest) handle keeps the message; no draw.
        self.lapsed_delete_keeps = lapsed_delete_keeps
        self.lapsed_kept = 0  # deletes that kept their message so
        self.short_poll_miss = short_poll_miss
        self.long_poll_advances_clock = long_poll_advances_clock
        self.fault_rates = fault_rates or FaultRates()
        self.scripted: list[Fault] = list(faults)
        # Separate streams: turning faults on must not change which messages a receive returns.
        self._rng = random.Random(f"sqs:{seed}")
        self._fault_rng = random.Random(f"sqs-faults:{seed}")
        self._queues: dict[str, _Queue] = {}
        self._lock = threading.RLock()
        self._order = 0
        self._sequence = 0
        self._requests = 0
        self.trace: list[TraceEvent] = []
        self.calls: dict[str, int] = {}
        # Receives that found the queue at its in-flight limit: "short" polls failed with
        # OverLimit, "long" polls returned nothing.
        self.over_limit: dict[str, int] = {"short": 0, "long": 0}

    # ----------------------------------------------------------------------------------------
    # boto3-shaped API

    def client(
        self, *, total_max_attempts: int = 1, sleep: Callable[[float], None] | None = None
    ) -> SimSqsClient:
        """A boto3-client-like view with botocore's retries (see :class:`SimSqsClient`)."""
        return SimSqsClient(self, total_max_attempts=total_max_attempts, sleep=sleep)

    def create_queue(
        self, QueueName: str, Attributes: dict[str, str] | None = None, **_: Any
    ) -> dict[str, Any]:
        def effect() -> tuple[dict[str, Any], str]:
            attributes = {k: str(v) for k, v in (Attributes or {}).items()}
            fifo_attr = attributes.get("FifoQueue", "false").lower() == "true"
            if fifo_attr != QueueName.endswith(".fifo"):
                raise client_error(
                    "CreateQueue",
                    "InvalidParameterValue",
                    "The name of a FIFO queue can only include alphanumeric characters, hyphens, "
                    "or underscores, must end with .fifo suffix.",
                )
            existing = self._queues.get(QueueName)
            if existing is not None:
                if any(existing.attributes.get(k) != v for k, v in attributes.items()):
                    raise client_error(
                        "CreateQueue",
                        "QueueAlreadyExists",
                        f"A queue already exists with the same name and a different value for "
                        f"attribute(s) {sorted(attributes)}",
                    )
                return {"QueueUrl": existing.url}, "exists"
            url = f"https://sqs.{self.region}.amazonaws.com/{self.account_id}/{QueueName}"
            arn = f"arn:aws:sqs:{self.region}:{self.account_id}:{QueueName}"
            self._queues[QueueName] = _Queue(
                QueueName, url, arn, attributes, self._now(), self.clock.time_millis()
            )
            return {"QueueUrl": url}, "created"

        return self._call("CreateQueue", QueueName, effect)

    def delete_queue(self, QueueUrl: str) -> dict[str, Any]:
        def effect() -> tuple[dict[str, Any], str]:
            queue = self._queue("DeleteQueue", QueueUrl)
            del self._queues[queue.name]
            return {}, "ok"

        return self._call("DeleteQueue", QueueUrl, effect)

    def set_queue_attributes(self, QueueUrl: str, Attributes: dict[str, str]) -> dict[str, Any]:
        def effect() -> tuple[dict[str, Any], str]:
            queue = self._queue("SetQueueAttributes", QueueUrl)
            queue.attributes.update({k: str(v) for k, v in Attributes.items()})
            return {}, "ok"

        return self._call("SetQueueAttributes", QueueUrl, effect)

    def get_queue_url(
        self, QueueName: str, QueueOwnerAWSAccountId: str | None = None
    ) -> dict[str, Any]:
        def effect() -> tuple[dict[str, Any], str]:
            queue = self._queues.get(QueueName)
            if queue is None or QueueOwnerAWSAccountId not in (None, self.account_id):
                raise client_error(
                    "GetQueueUrl", NON_EXISTENT_QUEUE, "The specified queue does not exist."
                )
            return {"QueueUrl": queue.url}, "ok"

        return self._call("GetQueueUrl", QueueName, effect)

    def get_queue_attributes(
        self, QueueUrl: str, AttributeNames: Sequence[str] = ()
    ) -> dict[str, Any]:
        def effect() -> tuple[dict[str, Any], str]:
            queue = self._queue("GetQueueAttributes", QueueUrl)
            every = self._attributes(queue)
            names = list(AttributeNames)
            if "All" in names:
                chosen = every
            else:
                unknown = [n for n in names if n not in every and n not in _KNOWN_ATTRIBUTES]
                if unknown:
                    raise client_error(
                        "GetQueueAttributes",
                        "InvalidAttributeName",
                        f"Unknown Attribute {unknown[0]}.",
                    )
                chosen = {n: every[n] for n in names if n in every}
            counts = ",".join(
                f"{k[len('ApproximateNumberOf') :]}={chosen[k]}"
                for k in _COUNT_ATTRIBUTES
                if k in chosen
            )
            return ({"Attributes": chosen} if chosen else {}), counts or "ok"

        return self._call("GetQueueAttributes", QueueUrl, effect)

    def purge_queue(self, QueueUrl: str) -> dict[str, Any]:
        def effect() -> tuple[dict[str, Any], str]:
            queue = self._queue("PurgeQueue", QueueUrl)
            now = self._now()
            if queue.last_purge is not None and now - queue.last_purge < PURGE_INTERVAL:
                raise client_error(
                    "PurgeQueue",
                    PURGE_IN_PROGRESS,
                    f"Only one PurgeQueue operation on {queue.name} is allowed every 60 seconds.",
                )
            queue.last_purge = now
            purged = list(queue.live.values())
            for message in purged:
                self._remove(queue, message, "purge")
            return {}, f"purged {len(purged)}"

        return self._call("PurgeQueue", QueueUrl, effect)

    def send_message(self, QueueUrl: str, MessageBody: str, **kwargs: Any) -> dict[str, Any]:
        def effect() -> tuple[dict[str, Any], str]:
            queue = self._queue("SendMessage", QueueUrl)
            try:
                result, note = self._send(queue, {"MessageBody": MessageBody, **kwargs})
            except _EntryError as err:
                raise client_error("SendMessage", err.code, err.message) from None
            return result, note

        return self._call("SendMessage", QueueUrl, effect)

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        def effect() -> tuple[dict[str, Any], str]:
            queue = self._queue("SendMessageBatch", QueueUrl)
            self._check_batch("SendMessageBatch", Entries)
            size = sum(
                _message_size(e.get("MessageBody", ""), e.get("MessageAttributes")) for e in Entries
            )
            if size > queue.int_attr("MaximumMessageSize"):
                raise client_error(
                    "SendMessageBatch",
                    "AWS.SimpleQueueService.BatchRequestTooLong",
                    f"Batch requests cannot be longer than {queue.int_attr('MaximumMessageSize')} "
                    "bytes.",
                )
            ok: list[dict[str, Any]] = []
            failed: list[dict[str, Any]] = []
            notes = []
            for entry in Entries:
                try:
                    result, note = self._send(queue, entry)
                except _EntryError as err:
                    failed.append(_failed(entry["Id"], err))
                    notes.append(f"{entry['Id']}:{err.code}")
                    continue
                ok.append({"Id": entry["Id"], **result})
                notes.append(note)
            return {"Successful": ok, "Failed": failed}, " ".join(notes)

        return self._call("SendMessageBatch", QueueUrl, effect)

    def receive_message(
        self,
        QueueUrl: str,
        MaxNumberOfMessages: int = 1,
        VisibilityTimeout: int | None = None,
        WaitTimeSeconds: int | None = None,
        ReceiveRequestAttemptId: str | None = None,
        AttributeNames: Sequence[str] = (),
        MessageSystemAttributeNames: Sequence[str] = (),
        MessageAttributeNames: Sequence[str] = (),
    ) -> dict[str, Any]:
        def effect() -> tuple[dict[str, Any], str]:
            queue = self._queue("ReceiveMessage", QueueUrl)
            _check_range("ReceiveMessage", "MaxNumberOfMessages", MaxNumberOfMessages, 1, 10)
            timeout = (
                queue.int_attr("VisibilityTimeout")
                if VisibilityTimeout is None
                else VisibilityTimeout
            )
            _check_range("ReceiveMessage", "VisibilityTimeout", timeout, 0, MAX_VISIBILITY_SECONDS)
            wait = (
                queue.int_attr("ReceiveMessageWaitTimeSeconds")
                if WaitTimeSeconds is None
                else WaitTimeSeconds
            )
            _check_range("ReceiveMessage", "WaitTimeSeconds", wait, 0, 20)
            attempt = ReceiveRequestAttemptId if queue.fifo else None
            picked = self._receive(queue, MaxNumberOfMessages, timeout, wait, attempt)
            system = {*AttributeNames, *MessageSystemAttributeNames}
            messages = [
                self._render(queue, m, r, system, MessageAttributeNames) for m, r, _ in picked
            ]
            note = ",".join(_label(m) + ("*" if kind != "receive" else "") for m, _, kind in picked)
            request = f"n={MaxNumberOfMessages} vt={timeout} wait={wait}"
            if attempt is not None:
                request += f" attempt={attempt[:8]}"
            return ({"Messages": messages} if messages else {}), f"{request} got [{note}]"

        return self._call("ReceiveMessage", QueueUrl, effect)

    def delete_message(self, QueueUrl: str, ReceiptHandle: str) -> dict[str, Any]:
        def effect() -> tuple[dict[str, Any], str]:
            queue = self._queue("DeleteMessage", QueueUrl)
            try:
                note = self._delete(queue, ReceiptHandle)
            except _EntryError as err:
                raise client_error("DeleteMessage", err.code, err.message) from None
            return {}, note

        return self._call("DeleteMessage", QueueUrl, effect)

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        def effect() -> tuple[dict[str, Any], str]:
            queue = self._queue("DeleteMessageBatch", QueueUrl)
            self._check_batch("DeleteMessageBatch", Entries)
            return self._batch(Entries, lambda e: self._delete(queue, e["ReceiptHandle"]))

        return self._call("DeleteMessageBatch", QueueUrl, effect)

    def change_message_visibility(
        self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int
    ) -> dict[str, Any]:
        def effect() -> tuple[dict[str, Any], str]:
            queue = self._queue("ChangeMessageVisibility", QueueUrl)
            try:
                note = self._change(queue, ReceiptHandle, VisibilityTimeout)
            except _EntryError as err:
                raise client_error("ChangeMessageVisibility", err.code, err.message) from None
            return {}, note

        return self._call("ChangeMessageVisibility", QueueUrl, effect)

    def change_message_visibility_batch(
        self, QueueUrl: str, Entries: list[dict[str, Any]]
    ) -> dict[str, Any]:
        def effect() -> tuple[dict[str, Any], str]:
            queue = self._queue("ChangeMessageVisibilityBatch", QueueUrl)
            self._check_batch("ChangeMessageVisibilityBatch", Entries)
            return self._batch(
                Entries,
                lambda e: self._change(queue, e["ReceiptHandle"], e.get("VisibilityTimeout", 0)),
            )

        return self._call("ChangeMessageVisibilityBatch", QueueUrl, effect)

    # ----------------------------------------------------------------------------------------
    # Scripted behaviour

    def inject(self, fault: Fault) -> None:
        """Script a fault (consumed before any rate-based draw)."""
        with self._lock:
            self.scripted.append(fault)

    def force_duplicate(self, queue_url: str, message_id: str) -> None:
        """Hand ``message_id`` out again on the next receive of a standard queue, even if it is
        in flight (a duplicate delivery, as SQS makes rarely)."""
        with self._lock:
            queue = self._lookup(queue_url)
            if queue.fifo:
                raise ValueError("FIFO queues never deliver duplicates")
            queue.forced_duplicates.append(message_id)

    # ----------------------------------------------------------------------------------------
    # Inspection (for invariant checks; no faults, no trace, no request counts)

    def queue_urls(self) -> list[str]:
        return [q.url for q in self._queues.values()]

    def messages(self, queue_url: str) -> list[SimMessage]:
        """Every message the queue ever accepted (deduplicated sends excluded), in send order."""
        return list(self._lookup(queue_url).messages)

    def message(self, queue_url: str, message_id: str) -> SimMessage:
        for m in self._lookup(queue_url).messages:
            if m.message_id == message_id:
                return m
        raise KeyError(message_id)

    def state(self, queue_url: str, message_id: str) -> str:
        """One of "visible", "in_flight", "delayed" or "deleted"."""
        return self.message(queue_url, message_id).state(self._now())

    def live(self, queue_url: str) -> list[SimMessage]:
        return list(self._lookup(queue_url).live.values())

    def in_flight(self, queue_url: str) -> list[SimMessage]:
        now = self._now()
        return [m for m in self.live(queue_url) if m.state(now) == "in_flight"]

    def visible(self, queue_url: str) -> list[SimMessage]:
        now = self._now()
        return [m for m in self.live(queue_url) if m.state(now) == "visible"]

    def deletions(self, queue_url: str) -> list[Deletion]:
        return list(self._lookup(queue_url).deletions)

    def deliveries(self, queue_url: str) -> list[Delivery]:
        return list(self._lookup(queue_url).deliveries)

    def receive_counts(self, queue_url: str) -> dict[str, int]:
        return {m.message_id: m.receive_count for m in self._lookup(queue_url).messages}

    def stale_deletes(self, queue_url: str) -> list[tuple[float, str]]:
        """(time, message id) of deletes that "succeeded" with a superseded handle."""
        return list(self._lookup(queue_url).stale_deletes)

    def dedup_hits(self, queue_url: str) -> list[tuple[float, str]]:
        """(time, message id) of FIFO sends dropped as duplicates of ``message id``."""
        return list(self._lookup(queue_url).dedup_hits)

    def format_trace(self, last: int | None = None) -> str:
        events = self.trace if last is None else self.trace[-last:]
        return "\n".join(str(e) for e in events)

    # ----------------------------------------------------------------------------------------
    # Machinery

    def _now(self) -> float:
        return self.clock.elapsed

    def _lookup(self, queue_url: str) -> _Queue:
        name = queue_url.rstrip("/").rsplit("/", 1)[-1]
        queue = self._queues.get(name)
        if queue is None:
            raise KeyError(f"no simulated queue {queue_url!r}")
        return queue

    def _queue(self, operation: str, queue_url: str) -> _Queue:
        name = queue_url.rstrip("/").rsplit("/", 1)[-1]
        queue = self._queues.get(name)
        if queue is None:
            raise client_error(operation, NON_EXISTENT_QUEUE, "The specified queue does not exist.")
        self._expire(queue)
        return queue

    def _call(
        self, operation: str, target: str, effect: Callable[[], tuple[dict[str, Any], str]]
    ) -> dict[str, Any]:
        with self._lock:
            self.calls[operation] = self.calls.get(operation, 0) + 1
            self._requests += 1
            queue = target.rstrip("/").rsplit("/", 1)[-1]
            fault = self._draw_fault(operation, target)
            if fault is not None and fault.kind != "lost_response":
                self._log(operation, queue, "", f"fault {fault.kind}")
                raise self._fault_error(operation, fault)
            try:
                result, note = effect()
            except ClientError as exc:
                self._log(operation, queue, "", f"error {exc.response['Error']['Code']}")
                raise
            if fault is not None:
                self._log(operation, queue, note, "lost response (effect applied)")
                raise self._fault_error(operation, fault)
            self._log(operation, queue, note, "ok")
            result["ResponseMetadata"] = {
                "RequestId": str(uuid.UUID(int=self._requests, version=4)),
                "HTTPStatusCode": 200,
                "HTTPHeaders": {},
                "RetryAttempts": 0,
            }
            return result

    def _log(self, operation: str, queue: str, detail: str, outcome: str) -> None:
        self.trace.append(
            TraceEvent(len(self.trace), self._now(), operation, queue, detail, outcome)
        )

    def _draw_fault(self, operation: str, target: str) -> Fault | None:
        for i, fault in enumerate(self.scripted):
            if fault.operation not in (operation, "*"):
                continue
            if fault.operation == "*" and operation not in DATA_OPERATIONS:
                continue
            if (
                fault.queue_url is not None
                and fault.queue_url.rsplit("/", 1)[-1] != target.rsplit("/", 1)[-1]
            ):
                continue
            fault.count -= 1
            if fault.count <= 0:
                del self.scripted[i]
            return fault
        rates = self.fault_rates
        if not rates.any or operation not in rates.operations:
            return None
        draw = self._fault_rng.random()
        for kind in FAULT_KINDS:
            rate = getattr(rates, kind)
            if draw < rate:
                code = self._fault_rng.choice(THROTTLE_CODES) if kind == "throttle" else None
                return Fault(operation, kind, code=code)
            draw -= rate
        return None

    def _fault_error(self, operation: str, fault: Fault) -> Exception:
        endpoint = f"https://sqs.{self.region}.amazonaws.com/"
        if fault.kind == "throttle":
            code = fault.code or "RequestThrottled"
            return client_error(operation, code, "Rate exceeded", 400)
        if fault.kind == "server_error":
            code = fault.code or "InternalError"
            return client_error(operation, code, "We encountered an internal error.", 500)
        if fault.kind == "connection_error":
            return EndpointConnectionError(endpoint_url=endpoint)
        return ReadTimeoutError(endpoint_url=endpoint)

    def _expire(self, queue: _Queue) -> None:
        retention = queue.int_attr("MessageRetentionPeriod")
        now = self._now()
        for message in [m for m in queue.live.values() if m.sent_at + retention <= now]:
            self._remove(queue, message, "retention")

    def _remove(self, queue: _Queue, message: SimMessage, by: str) -> None:
        now = self._now()
        message.deleted_at = now
        message.deleted_by = by
        message.version += 1
        queue.live.pop(message.message_id, None)
        queue.deletions.append(Deletion(now, message.message_id, by))

    def _check_batch(self, operation: str, entries: list[dict[str, Any]]) -> None:
        if not entries:
            raise client_error(
                operation,
                "AWS.SimpleQueueService.EmptyBatchRequest",
                "There should be at least one entry in the request.",
            )
        if len(entries) > BATCH_LIMIT:
            raise client_error(
                operation,
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
                f"Maximum number of entries per request are {BATCH_LIMIT}. You have sent "
                f"{len(entries)}.",
            )
        ids = [e.get("Id", "") for e in entries]
        for entry_id in ids:
            if not _BATCH_ID.match(entry_id):
                raise client_error(
                    operation,
                    "AWS.SimpleQueueService.InvalidBatchEntryId",
                    "A batch entry id can only contain alphanumeric characters, hyphens and "
                    "underscores. It can be at most 80 letters long.",
                )
        if len(set(ids)) != len(ids):
            raise client_error(
                operation,
                "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
                "Two or more batch entries in the request have the same Id.",
            )

    def _batch(
        self, entries: list[dict[str, Any]], apply: Callable[[dict[str, Any]], str]
    ) -> tuple[dict[str, Any], str]:
        ok: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        notes = []
        for entry in entries:
            try:
                notes.append(apply(entry))
            except _EntryError as err:
                failed.append(_failed(entry["Id"], err))
                notes.append(err.code)
                continue
            ok.append({"Id": entry["Id"]})
        return {"Successful": ok, "Failed": failed}, " ".join(notes)

    def _attributes(self, queue: _Queue) -> dict[str, str]:
        now = self._now()
        counts = {"visible": 0, "in_flight": 0, "delayed": 0}
        for message in queue.live.values():
            counts[message.state(now)] += 1
        out = dict(queue.attributes)
        out.update(
            {
                "QueueArn": queue.arn,
                "ApproximateNumberOfMessages": str(counts["visible"]),
                "ApproximateNumberOfMessagesNotVisible": str(counts["in_flight"]),
                "ApproximateNumberOfMessagesDelayed": str(counts["delayed"]),
                "CreatedTimestamp": str(queue.created_wall // 1000),
                "LastModifiedTimestamp": str(queue.created_wall // 1000),
                "SqsManagedSseEnabled": "true",
            }
        )
        return out

    # --- sending -----------------------------------------------------------------------------

    def _send(self, queue: _Queue, entry: dict[str, Any]) -> tuple[dict[str, Any], str]:
        body = entry.get("MessageBody")
        if not body:
            raise _EntryError(
                "MissingParameter", "The request must contain the parameter MessageBody."
            )
        if _INVALID_BODY.search(body):
            raise _EntryError(
                "InvalidMessageContents",
                "Invalid characters found. Valid unicode characters are "
                "#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
            )
        attributes = entry.get("MessageAttributes") or {}
        if len(attributes) > 10:
            raise _EntryError(
                "InvalidParameterValue",
                f"Number of message attributes [{len(attributes)}] exceeds the allowed "
                "maximum [10].",
            )
        limit = queue.int_attr("MaximumMessageSize")
        if _message_size(body, attributes) > limit:
            raise _EntryError(
                "InvalidParameterValue",
                f"One or more parameters are invalid. Reason: Message must be shorter than {limit} "
                "bytes.",
            )
        group = entry.get("MessageGroupId")
        dedup = entry.get("MessageDeduplicationId")
        delay = entry.get("DelaySeconds")
        now = self._now()
        if queue.fifo:
            if not group:
                raise _EntryError(
                    "MissingParameter", "The request must contain the parameter MessageGroupId."
                )
            if delay:
                raise _EntryError(
                    "InvalidParameterValue",
                    f"Value {delay} for parameter DelaySeconds is invalid. Reason: The request "
                    "include parameter that is not valid for this queue type.",
                )
            if not dedup:
                if queue.attributes.get("ContentBasedDeduplication", "false").lower() != "true":
                    raise _EntryError(
                        "InvalidParameterValue",
                        "The queue should either have ContentBasedDeduplication enabled or "
                        "MessageDeduplicationId provided explicitly",
                    )
                dedup = hashlib.sha256(body.encode()).hexdigest()
            scope = group if queue.attributes.get("DeduplicationScope") == "messageGroup" else ""
            key = (scope, dedup)
            seen = queue.dedup.get(key)
            if seen is not None and now - seen[0] < DEDUP_SECONDS:
                original = seen[1]
                queue.dedup_hits.append((now, original.message_id))
                result = {
                    "MessageId": original.message_id,
                    "MD5OfMessageBody": _md5(body),
                    "SequenceNumber": original.sequence_number,
                }
                if attributes:
                    result["MD5OfMessageAttributes"] = md5_of_message_attributes(attributes)
                return result, f"dedup={_label(original)}"
            delay_seconds = queue.int_attr("DelaySeconds")
        else:
            if dedup:
                raise _EntryError(
                    "InvalidParameterValue",
                    f"Value {dedup} for parameter MessageDeduplicationId is invalid. Reason: The "
                    "request includes a parameter that is not valid for this queue type.",
                )
            delay_seconds = queue.int_attr("DelaySeconds") if delay is None else int(delay)
            if not 0 <= delay_seconds <= 900:
                raise _EntryError(
                    "InvalidParameterValue",
                    f"Value {delay_seconds} for parameter DelaySeconds is invalid. Reason: must be "
                    "between 0 and 900, if provided.",
                )
        self._order += 1
        message = SimMessage(
            message_id=str(uuid.UUID(int=self._rng.getrandbits(128), version=4)),
            queue_name=queue.name,
            body=body,
            message_attributes={k: dict(v) for k, v in attributes.items()},
            sent_at=now,
            sent_wall_ms=self.clock.time_millis(),
            available_at=now + delay_seconds,
            group_id=group if queue.fifo else None,
            dedup_id=dedup if queue.fifo else None,
            order=self._order,
            visible_at=now + delay_seconds,
        )
        result = {"MessageId": message.message_id, "MD5OfMessageBody": _md5(body)}
        if attributes:
            result["MD5OfMessageAttributes"] = md5_of_message_attributes(attributes)
        if queue.fifo:
            self._sequence += 1
            message.sequence_number = str(18_000_000_000_000_000_000 + self._sequence)
            result["SequenceNumber"] = message.sequence_number
            queue.dedup[key] = (now, message)
        queue.messages.append(message)
        queue.live[message.message_id] = message
        return result, f"sent={_label(message)}"

    # --- receiving ---------------------------------------------------------------------------

    def _receive(
        self, queue: _Queue, count: int, timeout: int, wait: int, attempt: str | None
    ) -> list[tuple[SimMessage, Receipt, str]]:
        if attempt is not None:
            replay = self._replay(queue, attempt, timeout)
            if replay is not None:
                return replay
        picked = self._pick_and_deliver(queue, count, timeout, wait)
        if attempt is not None and picked:
            now = self._now()
            queue.attempts = {
                k: a for k, a in queue.attempts.items() if now - a.created_at < ATTEMPT_ID_SECONDS
            }
            queue.attempts[attempt] = _Attempt(now, [(m, r, m.version) for m, r, _ in picked])
        return picked

    def _replay(
        self, queue: _Queue, attempt: str, timeout: int
    ) -> list[tuple[SimMessage, Receipt, str]] | None:
        known = queue.attempts.get(attempt)
        now = self._now()
        if known is None or now - known.created_at >= ATTEMPT_ID_SECONDS:
            return None
        for message, receipt, version in known.entries:
            if message.version != version or message.receipt is not receipt:
                # One of them was deleted, changed or received again: the id counts as new.
                del queue.attempts[attempt]
                return None
        out = []
        for message, receipt, _ in known.entries:
            message.visible_at = receipt.deadline = now + timeout
            queue.deliveries.append(Delivery(now, message.message_id, receipt.number, "replay"))
            out.append((message, receipt, "replay"))
        return out

    def _pick_and_deliver(
        self, queue: _Queue, count: int, timeout: int, wait: int
    ) -> list[tuple[SimMessage, Receipt, str]]:
        picked = self._pick(queue, count, wait)
        if picked is None:
            # Over the in-flight limit, a long poll waits in vain.
            if self.long_poll_advances_clock:
                self.clock.advance(wait)
            return []
        if not picked and wait > 0 and self.long_poll_advances_clock:
            now = self._now()
            upcoming = [
                t for m in queue.live.values() for t in (m.available_at, m.visible_at) if t > now
            ] + [t for t, _ in queue.ghosts if t > now]
            soonest = min(upcoming, default=None)
            if soonest is not None and soonest <= now + wait:
                self.clock.advance_to(soonest)
                self._expire(queue)
                picked = self._pick(queue, count, wait) or []
            else:
                self.clock.advance(wait)
        return [self._deliver(queue, m, timeout, kind) for m, kind in picked]

    def _pick(self, queue: _Queue, count: int, wait: int) -> list[tuple[SimMessage, str]] | None:
        """The messages a receive hands out now, or None when over the in-flight limit with a
        long poll (nothing, without waiting for anything)."""
        now = self._now()
        in_flight = sum(1 for m in queue.live.values() if m.state(now) == "in_flight")
        if in_flight >= self.inflight_limit:
            self.over_limit["long" if wait > 0 else "short"] += 1
            if wait > 0:
                return None
            raise client_error(
                "ReceiveMessage",
                "OverLimit",
                f"The maximum number of in flight messages ({self.inflight_limit}) is reached.",
            )
        count = min(count, self.inflight_limit - in_flight)
        if queue.fifo:
            chosen = [(m, "receive") for m in self._pick_fifo(queue, count, now)]
        else:
            chosen = self._pick_standard(queue, count, now, wait)
        return [(m, kind) for m, kind in chosen if kind == "ghost" or not self._redrive(queue, m)]

    def _pick_standard(
        self, queue: _Queue, count: int, now: float, wait: int
    ) -> list[tuple[SimMessage, str]]:
        visible = [m for m in queue.live.values() if m.state(now) == "visible"]
        window = visible[: 2 * count]
        # SQS standard queues only try to keep order: shuffle within a window of the oldest.
        self._rng.shuffle(window)
        chosen = [(m, "receive") for m in window[:count]]
        if (
            chosen
            and wait == 0
            and self.short_poll_miss
            and self._rng.random() < self.short_poll_miss
        ):
            # A short poll samples a subset of the servers and may miss messages.
            chosen = chosen[: self._rng.randrange(len(chosen))]
        taken = {m.message_id for m, _ in chosen}
        forced = [
            queue.live[i] for i in queue.forced_duplicates if i in queue.live and i not in taken
        ]
        queue.forced_duplicates.clear()
        for message in forced[: max(0, count - len(chosen))]:
            chosen.append(
                (message, "duplicate" if message.state(now) == "in_flight" else "receive")
            )
            taken.add(message.message_id)
        ripe = [g for g in queue.ghosts if g[0] <= now]
        for ghost in ripe[: max(0, count - len(chosen))]:
            queue.ghosts.remove(ghost)
            chosen.append((ghost[1], "ghost"))
        if self.duplicate_probability and len(chosen) < count:
            if self._rng.random() < self.duplicate_probability:
                flying = [
                    m
                    for m in queue.live.values()
                    if m.state(now) == "in_flight" and m.message_id not in taken
                ]
                if flying:
                    chosen.append((self._rng.choice(flying), "duplicate"))
        return chosen

    def _pick_fifo(self, queue: _Queue, count: int, now: float) -> list[SimMessage]:
        groups: dict[str, list[SimMessage]] = {}
        for message in queue.live.values():  # send order, so each group's list is in order
            groups.setdefault(message.group_id or "", []).append(message)
        chosen: list[SimMessage] = []
        for messages in groups.values():  # groups in the order of their oldest message
            if any(m.state(now) == "in_flight" for m in messages):
                continue  # the group is locked
            for message in messages:
                if len(chosen) >= count or message.state(now) != "visible":
                    break
                chosen.append(message)
            if len(chosen) >= count:
                break
        return chosen

    def _redrive(self, queue: _Queue, message: SimMessage) -> bool:
        """Move ``message`` to the dead-letter queue if this receive would exceed
        ``maxReceiveCount``; True if it was moved."""
        policy = queue.attributes.get("RedrivePolicy")
        if not policy:
            return False
        parsed = json.loads(policy)
        if message.receive_count < int(parsed["maxReceiveCount"]):
            return False
        target = self._queues.get(str(parsed["deadLetterTargetArn"]).rsplit(":", 1)[-1])
        if target is None:
            return False
        self._remove(queue, message, "redrive")
        now = self._now()
        moved = SimMessage(
            message_id=message.message_id,
            queue_name=target.name,
            body=message.body,
            message_attributes=message.message_attributes,
            sent_at=message.sent_at,
            sent_wall_ms=message.sent_wall_ms,
            available_at=now,
            group_id=message.group_id,
            dedup_id=message.dedup_id,
            sequence_number=message.sequence_number,
            order=message.order,
            receive_count=message.receive_count,
            first_received_wall_ms=message.first_received_wall_ms,
            visible_at=now,
        )
        target.messages.append(moved)
        target.live[moved.message_id] = moved
        return True

    def _deliver(
        self, queue: _Queue, message: SimMessage, timeout: int, kind: str
    ) -> tuple[SimMessage, Receipt, str]:
        now = self._now()
        message.receive_count += 1
        message.version += 1
        if message.first_received_wall_ms is None:
            message.first_received_wall_ms = self.clock.time_millis()
        token = self._rng.getrandbits(64)
        handle = f"{queue.name}:{message.message_id}:{message.receive_count}:{token:016x}"
        receipt = Receipt(handle, message, message.receive_count, now, now + timeout)
        message.receipt = receipt
        message.visible_at = now + timeout
        queue.handles[handle] = receipt
        queue.deliveries.append(Delivery(now, message.message_id, receipt.number, kind))
        return message, receipt, kind

    def _render(
        self,
        queue: _Queue,
        message: SimMessage,
        receipt: Receipt,
        system: set[str],
        names: Sequence[str],
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "MessageId": message.message_id,
            "ReceiptHandle": receipt.handle,
            "MD5OfBody": _md5(message.body),
            "Body": message.body,
        }
        every = {
            "SenderId": "AIDASIMULATEDSENDER",
            "SentTimestamp": str(message.sent_wall_ms),
            "ApproximateReceiveCount": str(message.receive_count),
            "ApproximateFirstReceiveTimestamp": str(message.first_received_wall_ms),
        }
        if queue.fifo:
            every.update(
                {
                    "MessageGroupId": message.group_id or "",
                    "MessageDeduplicationId": message.dedup_id or "",
                    "SequenceNumber": message.sequence_number or "",
                }
            )
        if "All" in system:
            out["Attributes"] = every
        elif system:
            picked = {k: v for k, v in every.items() if k in system}
            if picked:
                out["Attributes"] = picked
        wanted = set(names)
        if wanted and message.message_attributes:
            attrs = {
                k: v
                for k, v in message.message_attributes.items()
                if "All" in wanted
                or ".*" in wanted
                or k in wanted
                or any(w.endswith(".*") and k.startswith(w[:-1]) for w in wanted)
            }
            if attrs:
                out["MessageAttributes"] = attrs
                out["MD5OfMessageAttributes"] = md5_of_message_attributes(attrs)
        return out

    # --- deleting and changing visibility ----------------------------------------------------

    def _receipt(self, queue: _Queue, handle: str) -> Receipt:
        receipt = queue.handles.get(handle)
        if receipt is None:
            raise _EntryError(
                "ReceiptHandleIsInvalid", "The input receipt handle is not a valid receipt handle."
            )
        return receipt

    def _delete(self, queue: _Queue, handle: str) -> str:
        receipt = self._receipt(queue, handle)
        message = receipt.message
        now = self._now()
        current = message.receipt is receipt
        if queue.fifo:
            live_and_expired = message.deleted_at is None and message.visible_at <= now
            deleted_and_expired = message.deleted_at is not None and receipt.deadline <= now
            if not current or live_and_expired or deleted_and_expired:
                raise _EntryError(
                    "InvalidParameterValue",
                    "Value for parameter ReceiptHandle is invalid. Reason: The receipt handle "
                    "has expired.",
                )
        if message.deleted_at is not None:
            return f"del={_label(message)}(again)"
        if not current:
            # Standard queues: "succeeds", but only the newest handle deletes.
            queue.stale_deletes.append((now, message.message_id))
            return f"del={_label(message)}(stale,kept)"
        if self.lapsed_delete_keeps and message.visible_at <= now:
            # Its visibility timeout lapsed: another receive may hold the message by now.
            queue.stale_deletes.append((now, message.message_id))
            self.lapsed_kept += 1
            return f"del={_label(message)}(lapsed,kept)"
        self._remove(queue, message, "delete")
        if (
            not queue.fifo
            and self.ghost_probability
            and message.message_id not in queue.ghosted
            and self._ghost_rng.random() < self.ghost_probability
        ):
            # A copy on another server outlives the delete and is handed out later, once.
            queue.ghosted.add(message.message_id)
            # Half of them at once: the receivers still receiving beside the deleting one.
            delay = self._ghost_rng.uniform(0, min(1.0, self.ghost_delay))
            if self._ghost_rng.random() < 0.5:
                delay = self._ghost_rng.uniform(0, self.ghost_delay)
            queue.ghosts.append((now + delay, message))
        elif (
            not queue.fifo
            and self.ghost_at_once
            and message.message_id not in queue.ghosted
            and self._at_once_rng.random() < self.ghost_at_once
        ):
            # A receive served beside the delete returns a copy the delete has not reached yet:
            # the copy is there for the very next receive, once.
            queue.ghosted.add(message.message_id)
            queue.ghosts.append((now, message))
            self.ghosts_at_once += 1
        return f"del={_label(message)}"

    def _change(self, queue: _Queue, handle: str, timeout: int) -> str:
        if not isinstance(timeout, int) or not 0 <= timeout <= MAX_VISIBILITY_SECONDS:
            raise _EntryError(
                "InvalidParameterValue",
                f"Value {timeout} for parameter VisibilityTimeout is invalid. Reason: Must be "
                f"between 0 and {MAX_VISIBILITY_SECONDS}.",
            )
        receipt = self._receipt(queue, handle)
        message = receipt.message
        now = self._now()
        if message.deleted_at is not None or message.receipt is not receipt:
            raise _EntryError(
                "InvalidParameterValue",
                "Value for parameter ReceiptHandle is invalid. Reason: Message does not exist or "
                "is not available for visibility timeout change.",
            )
        if message.visible_at <= now:
            raise _EntryError(MESSAGE_NOT_INFLIGHT, "Message not inflight.")
        if now + timeout > receipt.max_deadline:
            raise _EntryError(
                "InvalidParameterValue",
                f"Value {timeout} for parameter VisibilityTimeout is invalid. Reason: Total "
                f"VisibilityTimeout for the message is beyond the limit [{MAX_VISIBILITY_SECONDS} "
                "seconds].",
            )
        message.visible_at = receipt.deadline = now + timeout
        message.version += 1
        return f"vis={_label(message)}+{timeout}"


class SimSqsClient:
    """A boto3-client-like view of a :class:`SimSqs` with botocore's retry loop.

    Throttling, 5xx and network errors are retried up to ``total_max_attempts`` calls in all, as
    botocore does; a lost response that is retried repeats the effect (a second receive hands
    out other messages, unless a FIFO ``ReceiveRequestAttemptId`` brings back the same ones).
    ``sleep`` (e.g. ``SimClock.sleep``) receives each backoff; without it retries are
    immediate.
    """

    RETRIABLE_CODES = frozenset(
        {
            "Throttling",
            "ThrottlingException",
            "RequestThrottled",
            "RequestThrottledException",
            "InternalError",
            "InternalFailure",
            "ServiceUnavailable",
        }
    )

    def __init__(
        self,
        service: SimSqs,
        *,
        total_max_attempts: int = 1,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.service = service
        self.total_max_attempts = total_max_attempts
        self._sleep = sleep
        self._rng = random.Random(f"client-backoff:{service.seed}")

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.service, name)
        if name.startswith("_") or name not in _API_METHODS:
            return target

        def call(**kwargs: Any) -> Any:
            attempt = 0
            while True:
                attempt += 1
                try:
                    result = target(**kwargs)
                except Exception as exc:
                    if attempt >= self.total_max_attempts or not self.retriable(exc):
                        raise
                    if self._sleep is not None:
                        # botocore's standard mode: full jitter, base 1 s doubling, cap 20 s.
                        self._sleep(self._rng.random() * min(20.0, 2.0 ** (attempt - 1)))
                    continue
                result["ResponseMetadata"]["RetryAttempts"] = attempt - 1
                return result

        return call

    @classmethod
    def retriable(cls, exc: BaseException) -> bool:
        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            return code in cls.RETRIABLE_CODES or status >= 500
        return isinstance(exc, (ReadTimeoutError, EndpointConnectionError))


_API_METHODS = frozenset(
    {
        "create_queue",
        "delete_queue",
        "set_queue_attributes",
        "get_queue_url",
        "get_queue_attributes",
        "purge_queue",
        "send_message",
        "send_message_batch",
        "receive_message",
        "delete_message",
        "delete_message_batch",
        "change_message_visibility",
        "change_message_visibility_batch",
    }
)

_KNOWN_ATTRIBUTES = frozenset(
    {
        *_QUEUE_DEFAULTS,
        *_FIFO_DEFAULTS,
        *_COUNT_ATTRIBUTES,
        "FifoQueue",
        "QueueArn",
        "CreatedTimestamp",
        "LastModifiedTimestamp",
        "Policy",
        "RedrivePolicy",
        "RedriveAllowPolicy",
        "KmsMasterKeyId",
        "KmsDataKeyReusePeriodSeconds",
        "SqsManagedSseEnabled",
    }
)


def _check_range(operation: str, name: str, value: Any, low: int, high: int) -> None:
    if not isinstance(value, int) or not low <= value <= high:
        raise client_error(
            operation,
            "InvalidParameterValue",
            f"Value {value} for parameter {name} is invalid. Reason: Must be between {low} and "
            f"{high}, if provided.",
        )


def _failed(entry_id: str, err: _EntryError) -> dict[str, Any]:
    return {"Id": entry_id, "SenderFault": True, "Code": err.code, "Message": err.message}


def _label(message: SimMessage) -> str:
    return message.message_id[:8]


def _md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()  # noqa: S324 - SQS's own checksum


def _message_size(body: str, attributes: dict[str, dict[str, Any]] | None) -> int:
    size = len(body.encode("utf-8"))
    for name, value in (attributes or {}).items():
        size += len(name.encode()) + len(str(value.get("DataType", "")).encode())
        if "BinaryValue" in value:
            size += len(value["BinaryValue"])
        else:
            size += len(str(value.get("StringValue", "")).encode())
    return size


def md5_of_message_attributes(attributes: dict[str, dict[str, Any]]) -> str:
    """SQS's MD5OfMessageAttributes: names sorted, each as length-prefixed name, data type,
    a transport byte (1 string/number, 2 binary) and the length-prefixed value."""
    digest = hashlib.md5()  # noqa: S324 - SQS's own checksum
    for name in sorted(attributes):
        value = attributes[name]
        data_type = str(value["DataType"])
        for part in (name.encode(), data_type.encode()):
            digest.update(struct.pack(">I", len(part)) + part)
        if "BinaryValue" in value:
            raw = value["BinaryValue"]
            raw = raw if isinstance(raw, bytes) else bytes(raw)
            digest.update(b"\x02" + struct.pack(">I", len(raw)) + raw)
        else:
            raw = str(value["StringValue"]).encode()
            digest.update(b"\x01" + struct.pack(">I", len(raw)) + raw)
    return digest.hexdigest()
