"""The DataFrame schema and the conversion of SQS messages to Arrow. Runs on: driver and executors.

A received batch is converted once into an Arrow table with the output columns plus the receipt
handle. That table is what the journal stores and what ``read()`` yields (minus the handle), so a
replayed batch is byte-for-byte the first attempt's rows.
"""

from __future__ import annotations

import array
import functools
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

COLUMNS = (
    "messageId",
    "body",
    "md5OfBody",
    "sentTimestamp",
    "approximateReceiveCount",
    "approximateFirstReceiveTimestamp",
    "senderId",
    "messageGroupId",
    "messageDeduplicationId",
    "sequenceNumber",
    "attributes",
    "messageAttributes",
    "queueUrl",
)
RECEIPT_HANDLE = "_receiptHandle"

# Columns added with messageFormat=sns, after the default ones (so the default schema is
# unchanged). Null for a message kept raw with invalidEnvelope=keep.
SNS_COLUMNS = ("snsTopicArn", "snsMessageId", "snsSubject", "snsTimestamp")
# Their keys in a message's ``SNS_KEY`` dict (``executor/envelopes.py``).
_SNS_KEYS = ("TopicArn", "MessageId", "Subject", "Timestamp")


@functools.cache
def _spark_types() -> dict[str, Any]:
    """The Spark types of the columns, built on first use: the ``spark-sqs`` command and the
    journal's readers import this module on machines without PySpark."""
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    attribute = StructType(
        [
            StructField("dataType", StringType()),
            StructField("stringValue", StringType()),
            StructField("binaryValue", BinaryType()),
        ]
    )
    schema = StructType(
        [
            StructField("messageId", StringType(), nullable=False),
            StructField("body", StringType()),
            StructField("md5OfBody", StringType()),
            StructField("sentTimestamp", TimestampType()),
            StructField("approximateReceiveCount", IntegerType()),
            StructField("approximateFirstReceiveTimestamp", TimestampType()),
            StructField("senderId", StringType()),
            StructField("messageGroupId", StringType()),
            StructField("messageDeduplicationId", StringType()),
            StructField("sequenceNumber", StringType()),
            StructField("attributes", MapType(StringType(), StringType())),
            StructField("messageAttributes", MapType(StringType(), attribute)),
            StructField("queueUrl", StringType()),
        ]
    )
    sns = (
        StructField("snsTopicArn", StringType()),
        StructField("snsMessageId", StringType()),
        StructField("snsSubject", StringType()),
        StructField("snsTimestamp", TimestampType()),
    )
    return {"MESSAGE_ATTRIBUTE_TYPE": attribute, "SCHEMA": schema, "SNS_FIELDS": sns}


def __getattr__(name: str) -> Any:
    """``SCHEMA``, ``MESSAGE_ATTRIBUTE_TYPE`` and ``SNS_FIELDS``: the Spark types, on first use."""
    if name in ("MESSAGE_ATTRIBUTE_TYPE", "SCHEMA", "SNS_FIELDS"):
        return _spark_types()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Key of the unwrapped SNS fields in a message dict (set by ``envelopes``; not a boto3 key).
SNS_KEY = "spark_sqs.sns"


def spark_schema(sns: bool = False) -> StructType:
    """The DataFrame's schema: ``SCHEMA``, plus the SNS columns with ``messageFormat=sns``."""
    types = _spark_types()
    if not sns:
        return types["SCHEMA"]
    from pyspark.sql.types import StructType

    return StructType([*types["SCHEMA"].fields, *types["SNS_FIELDS"]])


@functools.cache
def arrow_output_schema(sns: bool = False) -> pa.Schema:
    """The Arrow schema PySpark expects from ``read()`` for ``spark_schema(sns)``.

    Taken from PySpark itself so that the field names it uses inside map types, and the timestamp
    unit, always match the installed version's check.
    """
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    schema = spark_schema(sns)
    # Spark 4.0/4.1 take timestamp_utc=True (the default); later versions a timezone name.
    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)


@functools.cache
def arrow_journal_schema(sns: bool = False) -> pa.Schema:
    return arrow_output_schema(sns).append(pa.field(RECEIPT_HANDLE, pa.string(), nullable=False))


_EMPTY: Mapping[str, Any] = {}


def _millis(values: list[str | None], type_: pa.DataType) -> pa.Array:
    """SQS's epoch-millisecond attributes as timestamps of ``type_`` (exact: no float)."""
    millis = _array([None if v is None else int(v) for v in values], pa.int64())
    return millis.view(pa.timestamp("ms", tz="UTC")).cast(type_)


def _string_map(rows: list[Mapping[str, str]]) -> pa.Array:
    """``map<string, string>`` of one dict a row (an empty map for an empty dict), its keys
    and values flattened once instead of converted row by row."""
    offsets = [0]
    keys: list[str] = []
    values: list[str] = []
    for row in rows:
        keys.extend(row)
        values.extend(row.values())
        offsets.append(len(keys))
    return pa.MapArray.from_arrays(
        _array(offsets, pa.int32()), _array(keys, pa.string()), _array(values, pa.string())
    )


def _attribute_map(rows: list[Mapping[str, Any]], type_: pa.DataType) -> pa.Array:
    """The ``messageAttributes`` map of one ``MessageAttributes`` dict a row (empty if none)."""
    offsets = [0]
    keys: list[str] = []
    values: list[Mapping[str, Any]] = []
    for row in rows:
        keys.extend(row)
        values.extend(row.values())
        offsets.append(len(keys))
    items = pa.StructArray.from_arrays(
        [
            _array([v.get("DataType") for v in values], pa.string()),
            _array([v.get("StringValue") for v in values], pa.string()),
            _array([v.get("BinaryValue") for v in values], pa.binary()),
        ],
        fields=list(type_.item_type),
    )
    return pa.MapArray.from_arrays(_array(offsets, pa.int32()), _array(keys, pa.string()), items)


def messages_to_table(
    messages: Iterable[Mapping[str, Any]], queue_url: str, *, sns: bool = False
) -> pa.Table:
    """Convert ``ReceiveMessage`` results to the journal's Arrow table (output + handle).

    With ``sns``, the SNS columns come from each message's ``SNS_KEY`` (set by
    ``envelopes.transform``), null where it has none.

    Built column by column (a receiver converts every message it journals: per-message Python
    work is what this avoids), each column's values gathered in one pass.
    """
    ms = messages if isinstance(messages, list) else list(messages)
    attrs: list[Mapping[str, str]] = [m.get("Attributes") or _EMPTY for m in ms]
    schema = arrow_journal_schema(sns)
    string = pa.string()
    timestamp = schema.field("sentTimestamp").type

    def attribute(name: str) -> pa.Array:
        return _array([a.get(name) for a in attrs], string)

    counts = [a.get("ApproximateReceiveCount") for a in attrs]
    columns: dict[str, pa.Array] = {
        "messageId": _array([m["MessageId"] for m in ms], string),
        "body": _string_array([m.get("Body") for m in ms]),
        "md5OfBody": _array([m.get("MD5OfBody") for m in ms], string),
        "sentTimestamp": _millis([a.get("SentTimestamp") for a in attrs], timestamp),
        "approximateReceiveCount": _array(
            [None if c is None else int(c) for c in counts], pa.int32()
        ),
        "approximateFirstReceiveTimestamp": _millis(
            [a.get("ApproximateFirstReceiveTimestamp") for a in attrs], timestamp
        ),
        "senderId": attribute("SenderId"),
        "messageGroupId": attribute("MessageGroupId"),
        "messageDeduplicationId": attribute("MessageDeduplicationId"),
        "sequenceNumber": attribute("SequenceNumber"),
        "attributes": _string_map(attrs),
        "messageAttributes": _attribute_map(
            [m.get("MessageAttributes") or _EMPTY for m in ms],
            schema.field("messageAttributes").type,
        ),
        "queueUrl": _array([queue_url] * len(ms), string),
        RECEIPT_HANDLE: _array([m["ReceiptHandle"] for m in ms], string),
    }
    if sns:
        envelopes: list[Mapping[str, Any]] = [m.get(SNS_KEY) or _EMPTY for m in ms]
        for column, key in zip(SNS_COLUMNS, _SNS_KEYS, strict=True):
            type_ = schema.field(column).type
            columns[column] = _array([e.get(key) for e in envelopes], type_)
    arrays = [columns[f.name] for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


# The receivers' memory bound (maxBytesPerReceiver) rests on converting messages to Arrow at
# about the cost of one copy. pa.array grows its buffers by doubling, and Arrow's default pool
# (mimalloc) keeps what it freed: 40 MiB of bodies cost about 150 MiB of RSS. The bodies are
# copied once into a buffer of their exact size instead, the other columns are built with the
# system allocator, whose large reallocations move pages rather than copy and keep nothing.
_SMALL_COLUMN = 1 << 20


def _array(values: list[Any], type_: pa.DataType) -> pa.Array:
    return pa.array(values, type=type_, memory_pool=pa.system_memory_pool())


def _string_array(values: list[str | None]) -> pa.Array:
    """``values`` as an Arrow string array, its data copied once into a buffer of its size."""
    sizes = [0 if v is None else (len(v) if v.isascii() else len(v.encode())) for v in values]
    total = sum(sizes)
    if total < _SMALL_COLUMN or total >= 2**31:
        # Small, or too large for one array's 32-bit offsets (pa.array splits it).
        return _array(values, pa.string())
    data = bytearray(total)
    offsets = array.array("i", [0])
    position = 0
    for value, size in zip(values, sizes, strict=True):
        if size:
            data[position : position + size] = value.encode()  # type: ignore[union-attr]
            position += size
        offsets.append(position)
    nulls = [v is None for v in values]
    validity = pa.array([not n for n in nulls], pa.bool_()).buffers()[1] if any(nulls) else None
    return pa.StringArray.from_buffers(
        len(values), pa.py_buffer(offsets), pa.py_buffer(data), validity, sum(nulls)
    )


# Rows are handed to Spark in record batches of about this size: a large entry is sliced (no
# copy), so that what Spark's worker does per batch is bounded; an entry read back in many
# small ones (deleteAfterJournal writes one per receive call) is combined up to it, one group
# at a time (combining all of them at once would copy the whole entry).
OUTPUT_BATCH_BYTES = 8 << 20


def output_batches(table: pa.Table, sns: bool = False) -> Iterator[pa.RecordBatch]:
    """The rows ``read()`` yields: the journal table without the receipt handle.

    ``sns`` is the current query's ``messageFormat=sns``; an entry journaled under the other
    format (a batch replayed after the option changed) gets null SNS columns, or loses them.
    Batches of about ``OUTPUT_BATCH_BYTES``: a large chunk is sliced, small ones are combined.
    """
    out = table.drop_columns([c for c in table.column_names if c.startswith("_")])
    if sns:
        for field in _spark_types()["SNS_FIELDS"]:
            if field.name not in out.column_names:
                target = arrow_output_schema(True).field(field.name)
                out = out.append_column(target, pa.nulls(out.num_rows, target.type))
    else:
        out = out.drop_columns([c for c in SNS_COLUMNS if c in out.column_names])
    out = out.cast(arrow_output_schema(sns))
    group: list[pa.RecordBatch] = []
    size = 0
    for batch in out.to_batches():
        if batch.nbytes >= OUTPUT_BATCH_BYTES // 2:
            # Large enough alone: never combined (a copy), sliced if larger than the size.
            yield from _combined(group)
            group, size = [], 0
            yield from _slices(batch)
            continue
        group.append(batch)
        size += batch.nbytes
        if size >= OUTPUT_BATCH_BYTES:
            yield from _combined(group)
            group, size = [], 0
    yield from _combined(group)


def _slices(batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """``batch`` in zero-copy slices of about ``OUTPUT_BATCH_BYTES`` (rows evenly sized)."""
    if batch.nbytes <= OUTPUT_BATCH_BYTES or batch.num_rows <= 1:
        return [batch]
    rows = max(1, batch.num_rows * OUTPUT_BATCH_BYTES // batch.nbytes)
    return [batch.slice(start, rows) for start in range(0, batch.num_rows, rows)]


def _combined(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    if len(batches) <= 1:
        return batches
    return pa.Table.from_batches(batches).combine_chunks().to_batches()
