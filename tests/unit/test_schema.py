"""Converting ReceiveMessage results into the journal table and the rows read() yields."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pytest

from spark_sqs.schema import (
    COLUMNS,
    RECEIPT_HANDLE,
    SCHEMA,
    arrow_journal_schema,
    arrow_output_schema,
    messages_to_table,
    output_batches,
)
from tests.factories import FIFO_QUEUE_URL, QUEUE_URL, SENT_MS, sqs_message

UTC = timezone.utc
SENT = datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)

ATTRIBUTES: dict[str, Any] = {
    "tenant": {"DataType": "String", "StringValue": "acme"},
    "total": {"DataType": "Number", "StringValue": "42"},
    "ratio": {"DataType": "Number.float", "StringValue": "3.14"},
    "payload": {"DataType": "String.json", "StringValue": '{"k": [1, 2]}'},
    "thumbnail": {"DataType": "Binary", "BinaryValue": b"\x89PNG\x00\xff"},
    "sig": {"DataType": "Binary.sha256", "BinaryValue": bytes(range(32))},
}


def rows(messages: list[dict[str, Any]], queue_url: str = QUEUE_URL) -> list[dict[str, Any]]:
    batches = output_batches(messages_to_table(messages, queue_url))
    out: list[dict[str, Any]] = []
    for batch in batches:
        out.extend(batch.to_pylist())
    return out


def test_output_has_exactly_the_output_schema() -> None:
    messages = [
        sqs_message(0, attributes=ATTRIBUTES),
        sqs_message(1, fifo=True),
        {"MessageId": "bare", "ReceiptHandle": "h"},
    ]
    batches = list(output_batches(messages_to_table(messages, QUEUE_URL)))

    assert batches, "rows expected"
    for batch in batches:
        assert batch.schema == arrow_output_schema()
    assert sum(b.num_rows for b in batches) == 3
    assert arrow_output_schema().names == list(COLUMNS) == SCHEMA.fieldNames()


def test_journal_table_is_the_output_plus_the_receipt_handle() -> None:
    table = messages_to_table([sqs_message(0), sqs_message(1)], QUEUE_URL)
    assert table.schema == arrow_journal_schema()
    assert table.schema.names == [*COLUMNS, RECEIPT_HANDLE]
    assert table.column(RECEIPT_HANDLE).to_pylist() == ["AQEB-receipt-0-1", "AQEB-receipt-1-1"]


def test_standard_queue_message_columns() -> None:
    (row,) = rows([sqs_message(0, receive_count=3, attributes=ATTRIBUTES)])

    assert row["messageId"] == "00000000-0000-4000-8000-000000000000"
    assert row["body"] == '{"n": 0}'
    assert row["md5OfBody"] == hashlib.md5(b'{"n": 0}').hexdigest()
    assert row["sentTimestamp"] == SENT
    assert row["approximateFirstReceiveTimestamp"] == SENT + timedelta(seconds=1)
    assert row["approximateReceiveCount"] == 3
    assert isinstance(row["approximateReceiveCount"], int)
    assert row["senderId"] == "AIDAEXAMPLESENDER"
    assert row["messageGroupId"] is None
    assert row["messageDeduplicationId"] is None
    assert row["sequenceNumber"] is None
    assert row["queueUrl"] == QUEUE_URL
    assert dict(row["attributes"]) == {
        "SenderId": "AIDAEXAMPLESENDER",
        "ApproximateFirstReceiveTimestamp": str(SENT_MS + 1000),
        "ApproximateReceiveCount": "3",
        "SentTimestamp": str(SENT_MS),
    }


def test_fifo_message_columns() -> None:
    (row,) = rows([sqs_message(5, fifo=True)], FIFO_QUEUE_URL)

    assert row["messageGroupId"] == "group-1"
    assert row["messageDeduplicationId"] == "dedup-5"
    assert row["sequenceNumber"] == "18620000000000000005"
    assert row["queueUrl"] == FIFO_QUEUE_URL
    attributes = dict(row["attributes"])
    assert attributes["MessageGroupId"] == "group-1"
    assert attributes["SequenceNumber"] == "18620000000000000005"


def test_message_attributes_of_every_data_type() -> None:
    (row,) = rows([sqs_message(0, attributes=ATTRIBUTES)])
    attrs = dict(row["messageAttributes"])

    assert set(attrs) == set(ATTRIBUTES)
    assert attrs["tenant"] == {"dataType": "String", "stringValue": "acme", "binaryValue": None}
    assert attrs["total"] == {"dataType": "Number", "stringValue": "42", "binaryValue": None}
    # Custom type suffixes are kept, so consumers can tell a float or JSON from a plain value.
    assert attrs["ratio"] == {
        "dataType": "Number.float",
        "stringValue": "3.14",
        "binaryValue": None,
    }
    assert attrs["payload"]["dataType"] == "String.json"
    assert attrs["payload"]["stringValue"] == '{"k": [1, 2]}'
    assert attrs["thumbnail"] == {
        "dataType": "Binary",
        "stringValue": None,
        "binaryValue": b"\x89PNG\x00\xff",
    }
    assert attrs["sig"]["dataType"] == "Binary.sha256"
    assert attrs["sig"]["binaryValue"] == bytes(range(32))


@pytest.mark.parametrize(
    "body",
    [
        "héllo wörld",
        "中文消息",
        "emoji \U0001f600\U0001f680",
        "tab\tnewline\nnul\x00end",
        "",
        "x" * 262_144,
    ],
    ids=["latin", "cjk", "emoji", "control", "empty", "256KiB"],
)
def test_bodies_are_kept_exactly(body: str) -> None:
    (row,) = rows([sqs_message(0, body=body)])
    assert row["body"] == body


def test_missing_optional_fields_become_nulls_and_empty_maps() -> None:
    (row,) = rows([{"MessageId": "m-1", "ReceiptHandle": "h-1"}])

    assert row["messageId"] == "m-1"
    for column in (
        "body",
        "md5OfBody",
        "sentTimestamp",
        "approximateReceiveCount",
        "approximateFirstReceiveTimestamp",
        "senderId",
        "messageGroupId",
        "messageDeduplicationId",
        "sequenceNumber",
    ):
        assert row[column] is None, column
    assert row["attributes"] == []
    assert row["messageAttributes"] == []
    assert row["queueUrl"] == QUEUE_URL


def test_only_some_system_attributes() -> None:
    message = {
        "MessageId": "m-2",
        "ReceiptHandle": "h-2",
        "Body": "b",
        "Attributes": {"SentTimestamp": str(SENT_MS)},
        "MessageAttributes": {},
    }
    (row,) = rows([message])
    assert row["sentTimestamp"] == SENT
    assert row["approximateReceiveCount"] is None
    assert row["approximateFirstReceiveTimestamp"] is None
    assert dict(row["attributes"]) == {"SentTimestamp": str(SENT_MS)}
    assert row["messageAttributes"] == []


def test_timestamps_are_exact_milliseconds() -> None:
    # Every millisecond of a second, and dates far from the epoch, survive the conversion.
    base = 4_102_444_800_000  # 2100-01-01T00:00:00Z
    values = [SENT_MS + i for i in range(1000)] + [0, 1, 999, base + 1, base + 999]
    messages = [
        {"MessageId": f"m{i}", "ReceiptHandle": "h", "Attributes": {"SentTimestamp": str(v)}}
        for i, v in enumerate(values)
    ]
    got = [row["sentTimestamp"] for row in rows(messages)]
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert got == [epoch + timedelta(milliseconds=v) for v in values]


def test_receipt_handles_are_not_in_the_output() -> None:
    handle = "AQEBzQ-DISTINCTIVE-RECEIPT-HANDLE-7f00"
    messages = [sqs_message(0, handle=handle, attributes=ATTRIBUTES)]
    batches = output_batches(messages_to_table(messages, QUEUE_URL))

    for batch in batches:
        assert RECEIPT_HANDLE not in batch.schema.names
        assert handle not in repr(batch.to_pylist())


def test_row_order_and_count_are_preserved() -> None:
    messages = [sqs_message(n) for n in (3, 1, 2)]
    assert [row["body"] for row in rows(messages)] == ['{"n": 3}', '{"n": 1}', '{"n": 2}']


def test_no_messages_yields_no_rows() -> None:
    table = messages_to_table([], QUEUE_URL)
    assert table.num_rows == 0
    assert table.schema == arrow_journal_schema()
    assert sum(b.num_rows for b in output_batches(table)) == 0


def test_output_batches_of_a_chunked_table_are_combined() -> None:
    # A table read back from the journal may have several chunks.
    first = messages_to_table([sqs_message(0)], QUEUE_URL)
    second = messages_to_table([sqs_message(1), sqs_message(2)], QUEUE_URL)
    table = pa.concat_tables([first, second])
    batches = list(output_batches(table))
    assert len(batches) == 1
    assert batches[0].num_rows == 3
    assert batches[0].schema == arrow_output_schema()


# -- messageFormat=sns ----------------------------------------------------------------------------


def test_the_default_schema_is_unchanged_by_the_sns_columns() -> None:
    from spark_sqs.schema import spark_schema

    assert spark_schema() is SCHEMA
    assert spark_schema(False).json() == SCHEMA.json()
    assert arrow_output_schema(False) == arrow_output_schema()
    assert arrow_journal_schema(False).names == [*COLUMNS, RECEIPT_HANDLE]


def test_sns_schema_appends_the_four_sns_columns() -> None:
    from spark_sqs.schema import SNS_COLUMNS, spark_schema

    sns = spark_schema(True)
    assert sns.fieldNames() == [
        *COLUMNS,
        "snsTopicArn",
        "snsMessageId",
        "snsSubject",
        "snsTimestamp",
    ]
    assert [f.dataType.simpleString() for f in sns.fields[-4:]] == [
        "string",
        "string",
        "string",
        "timestamp",
    ]
    assert arrow_output_schema(True).names == [*COLUMNS, *SNS_COLUMNS]
    assert arrow_journal_schema(True).names[-1] == RECEIPT_HANDLE


def test_an_entry_journaled_in_the_other_format_still_yields_the_query_schema() -> None:
    raw = messages_to_table([sqs_message(0)], QUEUE_URL)
    (as_sns,) = output_batches(raw, sns=True)
    assert as_sns.schema == arrow_output_schema(True)
    assert as_sns.column("snsTopicArn").to_pylist() == [None]

    sns = messages_to_table([sqs_message(0)], QUEUE_URL, sns=True)
    (as_raw,) = output_batches(sns, sns=False)
    assert as_raw.schema == arrow_output_schema()


def test_large_bodies_convert_exactly_once_with_nulls_and_any_text() -> None:
    # Over a MiB of bodies are copied into one buffer of their size (the memory bound): the
    # same array pa.array makes, whatever the text.
    bodies = ["\u00e9\u4e2d\U0001f600" * 50_000, None, "plain " * 100_000, "", None, "x"]
    messages = [
        {**sqs_message(n), "Body": body}
        if body is not None
        else {"MessageId": f"m{n}", "ReceiptHandle": "h"}
        for n, body in enumerate(bodies)
    ]
    table = messages_to_table(messages, QUEUE_URL)
    assert table.column("body").to_pylist() == bodies
    assert table.column("body").chunk(0).equals(pa.array(bodies, pa.string()))
    assert table.column("body").null_count == 2
