"""What a receiver does to messages between receiving and journaling them: SNS envelopes and
SQS Extended Client payloads. Runs on: executors (``prepare``, ``transform``, ``fetch_payloads``)
and the driver (``delete_payloads``, called by the acknowledgement).

``transform`` is pure: it takes the ``ReceiveMessage`` message dicts and the options and returns
the messages to journal, rewritten, and the messages that must not be journaled, each with a
reason. ``prepare`` is the receiver's single call: transform, fetch offloaded payloads from S3
in parallel, and, if anything was rejected, hand every message of the call back to SQS
(visibility 0) and fail the task with an error naming the messages.

Why visibility 0 and not "leave it invisible": a rejected message must count receives so the
queue's redrive policy can move it to the dead-letter queue, and the query should stop on it
now rather than at some later batch. Made visible at once, the task's retries and every restart
receive it again straight away, each receive counts towards ``maxReceiveCount``, and the query
fails with the same error until the message is redriven, removed, or the options keep it.
Left invisible, the retry would succeed without it and the message would come back in a later
batch every visibility timeout, failing one task each time without ever stopping the query.

SNS: with ``messageFormat=sns`` each body must be an SNS notification (a subscription without
raw message delivery); the body becomes its ``Message``, its topic, id, subject and timestamp
go to the SNS columns, and its message attributes join the SQS ones with the same struct.
A subscription *with* raw message delivery sends the published message itself: read it with
``messageFormat=raw`` (its SNS attributes arrive as SQS attributes).

Extended Client: a message carrying the reserved ``ExtendedPayloadSize`` attribute (older Java
clients: ``SQSLargePayloadSize``) has as body a JSON pointer
``["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": b, "s3Key": k}]``
(older: class ``com.amazon.sqs.javamessaging.MessageS3Pointer``). The receiver replaces the body
with the S3 object's text and drops the reserved attribute. The pointers are recorded in the
journal entry's schema metadata (``EXTENDED_PAYLOADS``), so that ``delete_payloads`` can remove
the objects once the messages are deleted from the queue (``deleteExtendedPayloads``).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from botocore.config import Config
from botocore.exceptions import ClientError

from ..errors import (
    ExtendedPayloadError,
    InvalidEnvelopeError,
    SqsAccessError,
    SqsSourceError,
    TransientSqsError,
)
from ..journal.entries import EntryReceipts
from ..journal.stores import S3Client
from ..lag import entry_lag_metadata, merged_lag_metadata
from ..options import EXTENDED_RESERVED, SqsOptions
from ..per_process import PerProcess
from ..schema import SNS_KEY
from ..sqs.client import USER_AGENT, error_code, make_session

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)

# Key of a message dict holding its S3 pointer (bucket, key) once recognised; not a boto3 key.
POINTER_KEY = "spark_sqs.extendedPayload"
# Schema metadata key of a journal entry: JSON list of [messageId, bucket, key] of the entry's
# messages whose payloads came from S3.
EXTENDED_PAYLOADS = b"spark_sqs.extendedPayloads"
POINTER_CLASSES = (
    "software.amazon.payloadoffloading.PayloadS3Pointer",
    "com.amazon.sqs.javamessaging.MessageS3Pointer",
)
# Concurrent GetObject calls of one receiver; also the size of its S3 connection pool.
FETCH_THREADS = 16
# Rejected message ids named in an error (the log has them all).
_NAMED = 5


@dataclass(frozen=True)
class S3Pointer:
    bucket: str
    key: str


@dataclass(frozen=True)
class Rejected:
    message: Mapping[str, Any] = field(repr=False)
    reason: str

    @property
    def message_id(self) -> str:
        return str(self.message["MessageId"])


@dataclass
class Prepared:
    """Messages ready to journal and the schema metadata their journal entry carries."""

    messages: list[dict[str, Any]]
    metadata: dict[bytes, bytes]


# -- SNS -------------------------------------------------------------------------------------------


def sns_attributes(raw: Any) -> dict[str, dict[str, Any]]:
    """SNS ``MessageAttributes`` (``{"Type", "Value"}``) in SQS's ``MessageAttributes`` form.

    String, Number and String.Array values are ``StringValue`` (an array stays its JSON text);
    Binary values, base64 in the envelope, become ``BinaryValue`` bytes.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError("MessageAttributes is not an object")
    out: dict[str, dict[str, Any]] = {}
    for name, attribute in raw.items():
        if not isinstance(attribute, Mapping) or not isinstance(attribute.get("Type"), str):
            raise ValueError(f"message attribute {name!r} has no Type")
        data_type, value = attribute["Type"], attribute.get("Value")
        if value is not None and not isinstance(value, str):
            raise ValueError(f"message attribute {name!r} has a non-string Value")
        if data_type.split(".", 1)[0] == "Binary":
            try:
                decoded = base64.b64decode(value or "", validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"binary message attribute {name!r} is not base64") from None
            out[name] = {"DataType": data_type, "BinaryValue": decoded}
        else:
            out[name] = {"DataType": data_type, "StringValue": value}
    return out


def _sns_timestamp(text: Any) -> datetime:
    if not isinstance(text, str):
        raise ValueError("Timestamp is missing")
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"Timestamp {text!r} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def unwrap_sns(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message with its SNS envelope unwrapped; ``ValueError`` says why it is not one."""
    try:
        envelope = json.loads(message.get("Body") or "")
    except ValueError:
        raise ValueError("the body is not JSON") from None
    if not isinstance(envelope, dict):
        raise ValueError("the body is not a JSON object")
    kind = envelope.get("Type")
    if kind != "Notification":
        raise ValueError(f"Type is {kind!r}, not 'Notification'")
    for name in ("MessageId", "TopicArn", "Message"):
        if not isinstance(envelope.get(name), str):
            raise ValueError(f"{name} is missing or not a string")
    subject = envelope.get("Subject")
    if subject is not None and not isinstance(subject, str):
        raise ValueError("Subject is not a string")
    sns = {
        "TopicArn": envelope["TopicArn"],
        "MessageId": envelope["MessageId"],
        "Subject": subject,
        "Timestamp": _sns_timestamp(envelope.get("Timestamp")),
    }
    # The publisher's attributes; an SQS attribute of the same name (rare: SNS delivers none
    # without raw delivery) gives way to them.
    attributes = {
        **(message.get("MessageAttributes") or {}),
        **sns_attributes(envelope.get("MessageAttributes")),
    }
    out = {**message, "Body": envelope["Message"], SNS_KEY: sns}
    if attributes:
        out["MessageAttributes"] = attributes
    return out


# -- Extended Client pointers ----------------------------------------------------------------------


def reserved_attribute(message: Mapping[str, Any]) -> str | None:
    """The Extended Client's reserved attribute the message carries, if any."""
    attributes = message.get("MessageAttributes") or {}
    return next((name for name in EXTENDED_RESERVED if name in attributes), None)


def parse_pointer(body: Any) -> S3Pointer:
    """The S3 pointer an Extended Client wrote as the body; ``ValueError`` if it is not one."""
    try:
        doc = json.loads(body or "")
    except ValueError:
        raise ValueError("the body is not JSON") from None
    if (
        not isinstance(doc, list)
        or len(doc) != 2
        or doc[0] not in POINTER_CLASSES
        or not isinstance(doc[1], dict)
    ):
        raise ValueError("the body is not an S3 pointer [<pointer class>, {...}]")
    bucket, key = doc[1].get("s3BucketName"), doc[1].get("s3Key")
    if not isinstance(bucket, str) or not bucket or not isinstance(key, str) or not key:
        raise ValueError("the S3 pointer has no s3BucketName or s3Key")
    return S3Pointer(bucket, key)


def mark_pointer(message: Mapping[str, Any], reserved: str) -> dict[str, Any]:
    """The message with its pointer recognised (``POINTER_KEY``) and the reserved attribute
    removed; the body is replaced once the payload is fetched."""
    pointer = parse_pointer(message.get("Body"))
    attributes = {k: v for k, v in (message.get("MessageAttributes") or {}).items()}
    attributes.pop(reserved, None)
    return {**message, "MessageAttributes": attributes, POINTER_KEY: pointer}


# -- sizes ---------------------------------------------------------------------------------------


def _text_bytes(value: Any) -> int:
    if not isinstance(value, str):
        return len(value) if isinstance(value, (bytes, bytearray)) else 0
    # isascii() is O(1) on CPython's strings: a 1 MiB ASCII body is not encoded to be counted.
    return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))


def message_bytes(message: Mapping[str, Any], options: SqsOptions) -> int:
    """The bytes a received message holds until it is journaled and yielded: its body, its
    message and system attributes, its id and receipt handle (UTF-8, as SQS counts a body),
    and with ``extendedPayloads`` the payload its pointer names, at the size its sender
    declared (``declared_payload_size``), since the payload is fetched only after receiving.
    The receive loop's memory bound counts this (executor/receiving.py)."""
    # Every message received is counted: ASCII strings, the usual case, are measured inline.
    size = 0
    for key in _TEXT_KEYS:
        value = message.get(key)
        if value.__class__ is str and value.isascii():
            size += len(value)
        elif value is not None:
            size += _text_bytes(value)
    attributes = message.get("Attributes")
    if attributes:
        for name, value in attributes.items():
            if value.__class__ is str and value.isascii():
                size += len(name) + len(value)
            else:
                size += len(name) + _text_bytes(value)
    for name, attribute in (message.get("MessageAttributes") or _NONE).items():
        size += len(name) + sum(_text_bytes(attribute.get(k)) for k in _ATTRIBUTE_KEYS)
    if options.extended_payloads:
        size += declared_payload_size(message, options)
    return size


_TEXT_KEYS = ("MessageId", "ReceiptHandle", "Body", "MD5OfBody")
_ATTRIBUTE_KEYS = ("DataType", "StringValue", "BinaryValue")
_NONE: Mapping[str, Any] = {}


# An SNS notification that carries an Extended Client pointer is small; a larger body is not
# parsed to look for one.
_POINTER_ENVELOPE_BYTES = 64 << 10


def declared_payload_size(message: Mapping[str, Any], options: SqsOptions) -> int:
    """The size of the S3 payload an Extended Client message points to, as its reserved
    attribute declares it (0 if it has none, or it is not a whole number); with
    ``messageFormat=sns``, also read from the SNS attributes inside the envelope."""
    attributes = message.get("MessageAttributes") or {}
    reserved = reserved_attribute(message)
    if reserved is not None:
        return _whole(attributes[reserved].get("StringValue"))
    body = message.get("Body")
    if not options.sns or not isinstance(body, str) or len(body) > _POINTER_ENVELOPE_BYTES:
        return 0
    if not any(name in body for name in EXTENDED_RESERVED):
        return 0
    try:
        envelope = json.loads(body)
        inner = envelope.get("MessageAttributes") or {}
        name = next(n for n in EXTENDED_RESERVED if n in inner)
        return _whole(inner[name].get("Value"))
    except (ValueError, AttributeError, StopIteration, TypeError):
        return 0


def _whole(text: Any) -> int:
    try:
        return max(0, int(str(text)))
    except ValueError:
        return 0


# -- the pure transformation -----------------------------------------------------------------------


def transform(
    messages: Sequence[Mapping[str, Any]], options: SqsOptions
) -> tuple[list[dict[str, Any]], list[Rejected]]:
    """The messages to journal, rewritten, and the ones that must not be journaled.

    SNS envelopes are unwrapped first (an SNS Extended Client publishes the pointer as the
    notification's ``Message``, with the reserved attribute among the SNS attributes), then
    Extended Client pointers are recognised. Nothing is fetched here.
    """
    kept: list[dict[str, Any]] = []
    rejected: list[Rejected] = []
    for message in messages:
        out = dict(message)
        if options.sns:
            try:
                out = unwrap_sns(message)
            except ValueError as exc:
                if not options.keep_invalid_envelopes:
                    rejected.append(Rejected(message, f"not an SNS notification: {exc}"))
                    continue
                # Passed through raw; its SNS columns are null.
        if options.extended_payloads:
            reserved = reserved_attribute(out)
            if reserved is not None:
                try:
                    out = mark_pointer(out, reserved)
                except ValueError as exc:
                    rejected.append(
                        Rejected(message, f"carries {reserved} but {exc}: not an Extended Client")
                    )
                    continue
        kept.append(out)
    return kept, rejected


# -- S3 ------------------------------------------------------------------------------------------

_S3_CLIENTS: PerProcess[SqsOptions, S3Client] = PerProcess()


def s3_client(options: SqsOptions) -> S3Client:
    """One S3 client per options per process, with the source's connection (its credentials
    and region) and the payloads' endpoint."""

    def build() -> S3Client:
        config = Config(
            region_name=options.connection.region,
            retries={"mode": "standard", "max_attempts": 5},
            connect_timeout=10,
            read_timeout=60,
            max_pool_connections=FETCH_THREADS,
            user_agent=USER_AGENT,
            user_agent_extra="spark-sqs",
        )
        return make_session(options.connection).client(
            "s3", config=config, endpoint_url=options.s3_endpoint_url
        )

    return _S3_CLIENTS.get_or_build(options, build)


def _fetch_one(s3: S3Client, message: Mapping[str, Any]) -> str:
    pointer: S3Pointer = message[POINTER_KEY]
    where = f"s3://{pointer.bucket}/{pointer.key}"
    try:
        data = s3.get_object(Bucket=pointer.bucket, Key=pointer.key)["Body"].read()
    except Exception as exc:
        code = error_code(exc)
        if code in ("NoSuchKey", "NoSuchBucket", "404"):
            raise ExtendedPayloadError(
                f"the S3 payload of message {message['MessageId']} is missing: {where} "
                f"[{code}]. It was deleted (by an Extended Client consumer, a lifecycle rule, "
                "or deleteExtendedPayloads of another query on this queue) before this query "
                "received the message. Fix: remove the message from the queue (or let its "
                "redrive policy move it to the dead-letter queue); the message is visible "
                "again and not journaled"
            ) from None
        raise _s3_error(exc, f"message {message['MessageId']}: S3 GetObject on {where}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ExtendedPayloadError(
            f"the S3 payload of message {message['MessageId']} ({where}) is not UTF-8 text; "
            "the Extended Clients store text bodies as UTF-8. Fix: remove the message from the "
            "queue"
        ) from None


def _s3_error(exc: BaseException, what: str) -> SqsSourceError:
    code = error_code(exc)
    status = (
        exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if isinstance(exc, ClientError)
        else 0
    )
    if code in ("AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId") or status == 403:
        return SqsAccessError(
            f"{what} was denied [{code}]. Fix: allow 's3:GetObject' on the payload bucket "
            "(and 's3:ListBucket', without which S3 answers a missing object with 403), and "
            "'kms:Decrypt' if the bucket is encrypted with a KMS key"
        )
    if isinstance(exc, ClientError) and not (
        code in ("SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable")
        or (isinstance(status, int) and status >= 500)
    ):
        return ExtendedPayloadError(f"{what} failed [{code}]")
    # Throttling, 5xx, network errors: the task's retry may succeed.
    return TransientSqsError(f"{what} failed transiently [{code}]")


def fetch_payloads(
    messages: list[dict[str, Any]], s3: S3Client, *, threads: int = FETCH_THREADS
) -> list[dict[str, Any]]:
    """The messages with every recognised pointer's body replaced by its S3 object's text,
    fetched in parallel. Raises the first failure (``ExtendedPayloadError`` for a missing
    object, naming the message and the key)."""
    todo = [i for i, m in enumerate(messages) if POINTER_KEY in m]
    if not todo:
        return messages
    out = list(messages)
    if len(todo) == 1 or threads <= 1:
        bodies = [_fetch_one(s3, messages[i]) for i in todo]
    else:
        with ThreadPoolExecutor(max_workers=min(threads, len(todo))) as pool:
            bodies = list(pool.map(lambda i: _fetch_one(s3, messages[i]), todo))
    for i, body in zip(todo, bodies, strict=True):
        out[i] = {**messages[i], "Body": body}
    return out


def payload_metadata(messages: Iterable[Mapping[str, Any]]) -> dict[bytes, bytes]:
    """The ``EXTENDED_PAYLOADS`` metadata of a journal entry holding ``messages``."""
    pointers = [
        [m["MessageId"], m[POINTER_KEY].bucket, m[POINTER_KEY].key]
        for m in messages
        if POINTER_KEY in m
    ]
    return {EXTENDED_PAYLOADS: json.dumps(pointers).encode()} if pointers else {}


def read_payload_pointers(metadata: Mapping[bytes, bytes] | None) -> list[tuple[str, S3Pointer]]:
    """(message id, pointer) of each offloaded message of a journal entry, from its metadata."""
    raw = (metadata or {}).get(EXTENDED_PAYLOADS)
    if raw is None:
        return []
    return [(i, S3Pointer(b, k)) for i, b, k in json.loads(raw)]


# -- the receiver's hook ---------------------------------------------------------------------------


def prepare(
    messages: list[dict[str, Any]],
    options: SqsOptions,
    *,
    now: float,
    release: Callable[[list[dict[str, Any]]], object],
    where: str,
    s3: S3Client | None = None,
) -> Prepared:
    """Everything between receiving and journaling: unwrap, fetch, and the entry's metadata.

    ``release(messages)`` hands messages back to SQS (visibility 0); it is called with every
    message of ``messages`` when the call fails, since none of them is journaled. ``where``
    names the batch and receiver in errors. ``now`` is when the messages were received.
    """
    if options.sns or options.extended_payloads:
        kept, rejected = transform(messages, options)
        try:
            if rejected:
                raise _rejection_error(rejected, options, where)
            if options.extended_payloads:
                kept = fetch_payloads(kept, s3 if s3 is not None else s3_client(options))
        except SqsSourceError:
            release(messages)
            raise
    else:
        kept = messages
    return Prepared(kept, {**entry_lag_metadata(kept, now), **payload_metadata(kept)})


def _rejection_error(rejected: list[Rejected], options: SqsOptions, where: str) -> SqsSourceError:
    for r in rejected:
        logger.error("%s: message %s not journaled: %s", where, r.message_id, r.reason)
    ids = ", ".join(r.message_id for r in rejected[:_NAMED])
    more = f" and {len(rejected) - _NAMED} more" if len(rejected) > _NAMED else ""
    first = rejected[0].reason
    if options.sns and first.startswith("not an SNS notification"):
        return InvalidEnvelopeError(
            f"{where}: message {ids}{more} is {first} (messageFormat=sns). It was not journaled "
            "and is visible in the queue again, so its receives count towards the queue's "
            "redrive policy. Fix: .option('invalidEnvelope', 'keep') passes such messages "
            "through raw with null SNS columns; or remove the message, or give the queue a "
            "dead-letter queue; a subscription with raw message delivery needs "
            "messageFormat=raw"
        )
    return ExtendedPayloadError(
        f"{where}: message {ids}{more} {first} pointer. It was not journaled and is visible in "
        "the queue again. Fix: remove the message from the queue (or let its redrive policy "
        "move it to the dead-letter queue), or set extendedPayloads=false to read such bodies "
        "as they are"
    )


def merged_metadata(metadatas: Iterable[Mapping[bytes, bytes] | None]) -> dict[bytes, bytes]:
    """Lag and payload metadata of an entry combined from parts (``deleteAfterJournal``)."""
    metadatas = list(metadatas)
    pointers = [p for m in metadatas for p in json.loads((m or {}).get(EXTENDED_PAYLOADS, b"[]"))]
    out = merged_lag_metadata(metadatas)
    if pointers:
        out[EXTENDED_PAYLOADS] = json.dumps(pointers).encode()
    return out


# -- deleting payloads after acknowledgement (driver) ----------------------------------------------


@dataclass
class PayloadDeletion:
    deleted: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # "s3://bucket/key" -> error code
    kept: int = 0  # pointers of excluded messages, left in S3


# deleteExtendedPayloads: called by whoever deleted messages, with their entries and the ids
# whose deletion may not have taken effect.
PayloadDeleter = Callable[[Sequence[EntryReceipts], set[str]], None]


def delete_payloads(
    entries: Iterable[EntryReceipts | pa.Table],
    s3: S3Client,
    *,
    exclude: Iterable[str] = (),
) -> PayloadDeletion:
    """Delete the S3 payloads recorded in acknowledged journal entries.

    ``entries`` are journal entries of a batch whose messages were deleted from SQS: anything
    with a ``metadata`` attribute (the entry's schema metadata, e.g. ``EntryReceipts``) or an
    Arrow table/schema. ``exclude`` are message ids whose deletion may not have taken effect
    (the acknowledger's uncertain ones): their payloads stay, since SQS may deliver them again.
    Never raises: a payload left behind costs storage, not correctness; failures are logged
    and returned.
    """
    skip = set(exclude)
    result = PayloadDeletion()
    by_bucket: dict[str, list[str]] = {}
    for entry in entries:
        metadata = getattr(entry, "metadata", None)
        if metadata is None and hasattr(entry, "schema"):
            metadata = entry.schema.metadata
        for message_id, pointer in read_payload_pointers(metadata):
            if message_id in skip:
                result.kept += 1
                continue
            by_bucket.setdefault(pointer.bucket, []).append(pointer.key)
    for bucket, keys in by_bucket.items():
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1,000 keys
            chunk = keys[start : start + 1000]
            try:
                response = s3.delete_objects(
                    Bucket=bucket,
                    Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
                )
            except Exception as exc:
                code = error_code(exc)
                result.failed.update({f"s3://{bucket}/{k}": code for k in chunk})
                continue
            errors = {e["Key"]: e.get("Code", "") for e in response.get("Errors", [])}
            result.failed.update({f"s3://{bucket}/{k}": c for k, c in errors.items()})
            result.deleted += len(chunk) - len(errors)
    if result.failed:
        logger.warning(
            "could not delete %d extended payloads from S3 (%s); they stay in S3",
            len(result.failed),
            sorted(set(result.failed.values())),
        )
    return result
