"""The DataFrame schema and the conversion of SQS messages to Arrow. Runs on: driver and executors.

A received batch is converted once into an Arrow table with the output columns plus the receipt
handle. That table is what the journal stores and what ``read()`` yields (minus the handle), so a
replayed batch is byte-for-byte the first attempt's rows.
"""

from __future__ import annotations

import array
import functools
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
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


def _millis(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromtimestamp(int(value) / 1000.0, tz=timezone.utc)


def _int_or_none(value: str | None) -> int | None:
    return None if value is None else int(value)


def _message_attributes(raw: Mapping[str, Any] | None) -> list[tuple[str, dict[str, Any]]] | None:
    if not raw:
        return []
    out = []
    for name, value in raw.items():
        out.append(
            (
                name,
                {
                    "dataType": value.get("DataType"),
                    "stringValue": value.get("StringValue"),
                    "binaryValue": value.get("BinaryValue"),
                },
            )
        )
    return out


def messages_to_table(
    messages: Iterable[Mapping[str, Any]], queue_url: str, *, sns: bool = False
) -> pa.Table:
    """Convert ``ReceiveMessage`` results to the journal's Arrow table (output + handle).

    With ``sns``, the SNS columns come from each message's ``SNS_KEY`` (set by
    ``envelopes.transform``), null where it has none.
    """
    names = (*COLUMNS, *SNS_COLUMNS, RECEIPT_HANDLE) if sns else (*COLUMNS, RECEIPT_HANDLE)
    columns: dict[str, list[Any]] = {name: [] for name in names}
    for m in messages:
        if sns:
            envelope: Mapping[str, Any] = m.get(SNS_KEY) or {}
            columns["snsTopicArn"].append(envelope.get("TopicArn"))
            columns["snsMessageId"].append(envelope.get("MessageId"))
            columns["snsSubject"].append(envelope.get("Subject"))
            columns["snsTimestamp"].append(envelope.get("Timestamp"))
        attrs: Mapping[str, str] = m.get("Attributes") or {}
        columns["messageId"].append(m["MessageId"])
        columns["body"].append(m.get("Body"))
        columns["md5OfBody"].append(m.get("MD5OfBody"))
        columns["sentTimestamp"].append(_millis(attrs.get("SentTimestamp")))
        columns["approximateReceiveCount"].append(
            _int_or_none(attrs.get("ApproximateReceiveCount"))
        )
        columns["approximateFirstReceiveTimestamp"].append(
            _millis(attrs.get("ApproximateFirstReceiveTimestamp"))
        )
        columns["senderId"].append(attrs.get("SenderId"))
        columns["messageGroupId"].append(attrs.get("MessageGroupId"))
        columns["messageDeduplicationId"].append(attrs.get("MessageDeduplicationId"))
        columns["sequenceNumber"].append(attrs.get("SequenceNumber"))
        columns["attributes"].append(list(attrs.items()))
        columns["messageAttributes"].append(_message_attributes(m.get("MessageAttributes")))
        columns["queueUrl"].append(queue_url)
        columns[RECEIPT_HANDLE].append(m["ReceiptHandle"])
    schema = arrow_journal_schema(sns)
    arrays = [
        _string_array(columns[f.name]) if f.name == "body" else _array(columns[f.name], f.type)
        for f in schema
    ]
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
