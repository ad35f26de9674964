"""Input columns of the SQS sink, rows to SQS entries, and deduplication ids.

Runs on: driver (``Layout.of``: schema checks at query start) and executors (``RowConverter``).

Deduplication ids (docs/sink.md, "Exactly once"): a replayed micro-batch or a retried task must
send every message with the same id as its first attempt, so that SQS drops the copy. Row
positions are not stable (a shuffle may reorder a partition), so an id never depends on one:

- a row with ``messageId`` (a source row written back): the upstream id, and the row's
  occurrence number among the rows of its partition with that ``messageId`` (an ``explode``
  makes several rows of one message);
- otherwise the write's scope (query id and batch id, or the batch write's ``writeId``), the
  partition number, a digest of everything the row sends, and its occurrence number among the
  identical rows of its partition.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from .errors import OversizeRowError, SinkInputError

if TYPE_CHECKING:
    from pyspark.sql import Row

# The message attribute carrying the deduplication id on standard queues, for consumers.
DEDUPE_ATTRIBUTE = "spark_sqs.dedupeId"
MAX_ATTRIBUTES = 10
MAX_DELAY_SECONDS = 900

_INTEGER_TYPES = (ByteType, ShortType, IntegerType, LongType)
KNOWN_COLUMNS = (
    "body",
    "messageAttributes",
    "messageGroupId",
    "messageDeduplicationId",
    "delaySeconds",
    "messageId",
)


@dataclass(frozen=True)
class Layout:
    """Where each column the sink uses sits in the input rows (``None``: absent)."""

    body: int
    attributes: int | None = None
    attributes_are_strings: bool = False
    group_id: int | None = None
    dedupe_id: int | None = None
    delay: int | None = None
    message_id: int | None = None

    @classmethod
    def of(cls, schema: StructType, *, fifo: bool, ignore_extra: bool, queue: str) -> Layout:
        """Check the input against the queue; every problem is an error naming the column and
        the fix, raised before anything is sent."""
        names = schema.fieldNames()
        index = {name: i for i, name in enumerate(names)}
        if "body" not in index:
            raise SinkInputError(
                "The SQS sink needs a string column 'body' (the message body). Fix: add one, "
                "e.g. df.select(to_json(struct('*')).alias('body')) or "
                "df.withColumnRenamed('value', 'body')"
            )
        extra = [n for n in names if n not in KNOWN_COLUMNS]
        if extra and not ignore_extra:
            raise SinkInputError(
                f"The SQS sink does not know the column(s) {', '.join(map(repr, extra))}. "
                f"It writes the columns {', '.join(KNOWN_COLUMNS)}. Fix: select only those "
                "(e.g. df.select('body', ...)), or set .option('ignoreExtraColumns', 'true') to "
                "ignore the others"
            )
        types = {f.name: f.dataType for f in schema.fields}
        for name in ("body", "messageGroupId", "messageDeduplicationId", "messageId"):
            if name in types and not isinstance(types[name], StringType):
                raise SinkInputError(
                    f"The SQS sink's column '{name}' must be a string, not "
                    f"{types[name].simpleString()}. Fix: cast it, e.g. "
                    f"col('{name}').cast('string')"
                )
        if "delaySeconds" in types and not isinstance(types["delaySeconds"], _INTEGER_TYPES):
            raise SinkInputError(
                "The SQS sink's column 'delaySeconds' must be an integer (0-900), not "
                f"{types['delaySeconds'].simpleString()}. Fix: cast it, e.g. "
                "col('delaySeconds').cast('int')"
            )
        strings = False
        if "messageAttributes" in types:
            strings = _check_attributes_type(types["messageAttributes"])
        if fifo and "messageGroupId" not in index:
            raise SinkInputError(
                f"The SQS queue {queue} is a FIFO queue and every message needs a message "
                "group, but the input has no 'messageGroupId' column. Fix: add one, e.g. "
                "df.withColumn('messageGroupId', col('customerId')) (one ordered stream per "
                "value) or lit('all') for a single ordered stream"
            )
        if not fifo and "messageGroupId" in index:
            raise SinkInputError(
                f"The SQS queue {queue} is a standard queue, but the input has a "
                "'messageGroupId' column (message groups are for FIFO queues). Fix: drop it "
                "(df.drop('messageGroupId')), or write to a FIFO queue (name ending in .fifo)"
            )
        if fifo and "delaySeconds" in index:
            raise SinkInputError(
                f"The SQS queue {queue} is a FIFO queue, and FIFO queues take no per-message "
                "'delaySeconds' (only a queue-level delay). Fix: drop the column, or set "
                "DelaySeconds on the queue"
            )
        return cls(
            body=index["body"],
            attributes=index.get("messageAttributes"),
            attributes_are_strings=strings,
            group_id=index.get("messageGroupId"),
            dedupe_id=index.get("messageDeduplicationId"),
            delay=index.get("delaySeconds"),
            message_id=index.get("messageId"),
        )


def _check_attributes_type(dtype: DataType) -> bool:
    """True for map<string,string>; the source's map of structs is the other accepted type."""
    fix = (
        "Fix: use the source's type map<string, struct<dataType: string, stringValue: string, "
        "binaryValue: binary>> or map<string, string> (String attributes)"
    )
    if not isinstance(dtype, MapType) or not isinstance(dtype.keyType, StringType):
        raise SinkInputError(
            "The SQS sink's column 'messageAttributes' must be a map with string keys, not "
            f"{dtype.simpleString()}. {fix}"
        )
    value = dtype.valueType
    if isinstance(value, StringType):
        return True
    expected = {"dataType": StringType, "stringValue": StringType, "binaryValue": BinaryType}
    if isinstance(value, StructType):
        fields = {f.name: f.dataType for f in value.fields}
        if "dataType" in fields and all(
            name in expected and isinstance(t, expected[name]) for name, t in fields.items()
        ):
            return False
    raise SinkInputError(
        "The SQS sink's column 'messageAttributes' has values of type "
        f"{value.simpleString()}. {fix}"
    )


@dataclass
class Entry:
    """One message to send, and its retry state."""

    position: int
    body: str
    size: int
    group_id: str | None = None
    dedupe_id: str | None = None
    attributes: dict[str, dict[str, Any]] | None = None
    delay: int | None = None
    attempts: int = 0
    throttled: int = 0
    not_before: float = field(default=0.0, compare=False)

    def request(self, entry_id: str, *, fifo: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"Id": entry_id, "MessageBody": self.body}
        if self.attributes:
            out["MessageAttributes"] = self.attributes
        if self.delay is not None:
            out["DelaySeconds"] = self.delay
        if fifo:
            out["MessageGroupId"] = self.group_id
            if self.dedupe_id is not None:
                out["MessageDeduplicationId"] = self.dedupe_id
        return out


class DedupeIds:
    """Deterministic deduplication ids of one partition's rows (module docstring)."""

    def __init__(self, scope: str, partition: int) -> None:
        self.scope = scope
        self.partition = partition
        self._seen: dict[bytes, int] = {}

    def _occurrence(self, key: bytes) -> int:
        n = self._seen.get(key, 0)
        self._seen[key] = n + 1
        return n

    def from_message_id(self, message_id: str) -> str:
        key = b"m\0" + message_id.encode()
        digest = hashlib.sha256(key + b"\0" + str(self._occurrence(key)).encode())
        return digest.hexdigest()

    def from_content(self, content: bytes) -> str:
        # 16 bytes keep the occurrence table small; a collision only merges two counters.
        key = b"c\0" + content[:16]
        occurrence = self._occurrence(key)
        digest = hashlib.sha256(
            f"{self.scope}\0{self.partition}\0{occurrence}\0".encode() + content
        )
        return digest.hexdigest()


def content_digest(
    body: str, group_id: str | None, delay: int | None, attributes: Mapping[str, Any] | None
) -> bytes:
    h = hashlib.sha256()
    for part in (body, group_id or "", str(delay)):
        data = part.encode()
        h.update(len(data).to_bytes(8, "big") + data)
    for name in sorted(attributes or {}):
        if name == DEDUPE_ATTRIBUTE:
            continue
        value = attributes[name]  # type: ignore[index]
        for part in (name, value["DataType"]):
            data = part.encode()
            h.update(len(data).to_bytes(8, "big") + data)
        data = value["BinaryValue"] if "BinaryValue" in value else value["StringValue"].encode()
        h.update(len(data).to_bytes(8, "big") + bytes(data))
    return h.digest()


class RowConverter:
    """Rows of one partition to ``Entry`` objects, in order, with sizes and dedupe ids."""

    def __init__(
        self,
        layout: Layout,
        *,
        fifo: bool,
        dedupe: DedupeIds,
        max_message_size: int,
        oversize_allowed: bool,
        where: str,
        dedupe_attribute: bool = True,
    ) -> None:
        self.layout = layout
        self.fifo = fifo
        # Standard queues only: FIFO queues deduplicate by MessageDeduplicationId themselves.
        self.dedupe_attribute = dedupe_attribute and not fifo
        self.dedupe = dedupe
        self.max_message_size = max_message_size
        self.oversize_allowed = oversize_allowed
        self.where = where
        self.dedupe_attribute_skipped = 0

    def convert(self, position: int, row: Row) -> Entry:
        lay = self.layout
        body = row[lay.body]
        if body is None or body == "":
            raise SinkInputError(
                f"Row {position} (0-based) of {self.where} has an empty or null 'body'; SQS "
                "needs at least one character. Fix: filter such rows out, e.g. "
                "df.where(col('body') != '')"
            )
        attributes = self._attributes(position, row[lay.attributes]) if lay.attributes else None
        group = row[lay.group_id] if lay.group_id is not None else None
        if self.fifo and not group:
            raise SinkInputError(
                f"Row {position} (0-based) of {self.where} has a null or empty "
                "'messageGroupId'; every message of a FIFO queue needs one. Fix: fill it, e.g. "
                "coalesce(col('messageGroupId'), lit('default'))"
            )
        delay = row[lay.delay] if lay.delay is not None else None
        if delay is not None and not 0 <= delay <= MAX_DELAY_SECONDS:
            raise SinkInputError(
                f"Row {position} (0-based) of {self.where} has delaySeconds={delay}; SQS "
                "allows 0-900. Fix: clamp or filter the column"
            )
        dedupe_id = row[lay.dedupe_id] if lay.dedupe_id is not None else None
        if not dedupe_id:
            message_id = row[lay.message_id] if lay.message_id is not None else None
            if message_id:
                dedupe_id = self.dedupe.from_message_id(message_id)
            else:
                dedupe_id = self.dedupe.from_content(content_digest(body, group, delay, attributes))
        if self.dedupe_attribute:
            # Standard queues take no deduplication id: consumers get it as an attribute.
            attributes = dict(attributes or {})
            if DEDUPE_ATTRIBUTE in attributes or len(attributes) < MAX_ATTRIBUTES:
                attributes[DEDUPE_ATTRIBUTE] = {"DataType": "String", "StringValue": dedupe_id}
            else:
                self.dedupe_attribute_skipped += 1
        size = message_size(body, attributes)
        if size > self.max_message_size and not self.oversize_allowed:
            raise OversizeRowError(
                f"Row {position} (0-based) of {self.where} is {size} bytes (body and message "
                f"attributes), larger than the queue's MaximumMessageSize of "
                f"{self.max_message_size} bytes. Fix: shorten or split it (or store the "
                "payload in S3 and send a reference), raise the queue's MaximumMessageSize "
                "(at most 1 MiB), or set 'oversizeDeadLetterQueueUrl' to route such rows "
                "to another queue"
            )
        return Entry(
            position=position,
            body=body,
            size=size,
            group_id=group,
            dedupe_id=dedupe_id,
            attributes=attributes or None,
            delay=delay,
        )

    def _attributes(self, position: int, value: Any) -> dict[str, dict[str, Any]] | None:
        if not value:
            return None
        out: dict[str, dict[str, Any]] = {}
        for name, attr in value.items():
            if self.layout.attributes_are_strings:
                if attr is None:
                    continue
                out[name] = {"DataType": "String", "StringValue": attr}
                continue
            if attr is None:
                continue
            # A Row's `in` tests its values, not its field names: go through a dict.
            fields = attr.asDict() if hasattr(attr, "asDict") else dict(attr)
            data_type = fields.get("dataType")
            binary = fields.get("binaryValue")
            string = fields.get("stringValue")
            if not data_type:
                data_type = "Binary" if binary is not None else "String"
            if data_type.startswith("Binary"):
                if binary is None:
                    raise self._bad_attribute(position, name, "a Binary type without binaryValue")
                out[name] = {"DataType": data_type, "BinaryValue": bytes(binary)}
            else:
                if string is None:
                    raise self._bad_attribute(position, name, f"type {data_type} without a value")
                out[name] = {"DataType": data_type, "StringValue": string}
        if len(out) > MAX_ATTRIBUTES:
            raise SinkInputError(
                f"Row {position} (0-based) of {self.where} has {len(out)} message attributes; SQS "
                f"allows {MAX_ATTRIBUTES}. Fix: move some into the body"
            )
        return out

    def _bad_attribute(self, position: int, name: str, problem: str) -> SinkInputError:
        return SinkInputError(
            f"Row {position} (0-based) of {self.where}: message attribute {name!r} has "
            f"{problem}. Fix: set stringValue for String/Number attributes and binaryValue "
            "for Binary ones"
        )


def message_size(body: str, attributes: Mapping[str, Mapping[str, Any]] | None) -> int:
    """The size SQS counts against MaximumMessageSize: body plus each attribute's name, type
    and value."""
    size = len(body.encode())
    for name, value in (attributes or {}).items():
        size += len(name.encode()) + len(value["DataType"].encode())
        if "BinaryValue" in value:
            size += len(value["BinaryValue"])
        else:
            size += len(value["StringValue"].encode())
    return size
