"""The DataFrame schema and the conversion of SQS messages to Arrow. Runs on: driver and executors.

A received batch is converted once into an Arrow table with the output columns plus the receipt
handle. That table is what the journal stores and what ``read()`` yields (minus the handle), so a
replayed batch is byte-for-byte the first attempt's rows.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

MESSAGE_ATTRIBUTE_TYPE = StructType(
    [
        StructField("dataType", StringType()),
        StructField("stringValue", StringType()),
        StructField("binaryValue", BinaryType()),
    ]
)

SCHEMA = StructType(
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
        StructField("messageAttributes", MapType(StringType(), MESSAGE_ATTRIBUTE_TYPE)),
        StructField("queueUrl", StringType()),
    ]
)

COLUMNS = tuple(SCHEMA.fieldNames())
RECEIPT_HANDLE = "_receiptHandle"


@functools.cache
def arrow_output_schema() -> pa.Schema:
    """The Arrow schema PySpark expects from ``read()`` for ``SCHEMA``.

    Taken from PySpark itself so that the field names it uses inside map types, and the timestamp
    unit, always match the installed version's check.
    """
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    # Spark 4.0/4.1 take timestamp_utc=True (the default); later versions a timezone name.
    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(SCHEMA, timezone="UTC")
    return to_arrow_schema(SCHEMA)


@functools.cache
def arrow_journal_schema() -> pa.Schema:
    return arrow_output_schema().append(pa.field(RECEIPT_HANDLE, pa.string(), nullable=False))


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


def messages_to_table(messages: Iterable[Mapping[str, Any]], queue_url: str) -> pa.Table:
    """Convert ``ReceiveMessage`` results to the journal's Arrow table (output + handle)."""
    columns: dict[str, list[Any]] = {name: [] for name in (*COLUMNS, RECEIPT_HANDLE)}
    for m in messages:
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
    schema = arrow_journal_schema()
    arrays = [pa.array(columns[f.name], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def output_batches(table: pa.Table) -> list[pa.RecordBatch]:
    """The rows ``read()`` yields: the journal table without the receipt handle."""
    out = table.drop_columns([RECEIPT_HANDLE]).cast(arrow_output_schema())
    return out.combine_chunks().to_batches()
