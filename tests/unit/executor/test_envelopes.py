"""envelopes: SNS unwrapping, SQS Extended Client payloads, the receiver's hook, and deleting
payloads after acknowledgement. S3 objects are written by the amazon-sqs-extended-client
package itself, against moto in process."""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pytest
from moto import mock_aws

from spark_sqs.driver.planning import ReceiverPartition
from spark_sqs.errors import ExtendedPayloadError, InvalidEnvelopeError, TransientSqsError
from spark_sqs.executor.envelopes import (
    EXTENDED_PAYLOADS,
    POINTER_KEY,
    S3Pointer,
    declared_payload_size,
    delete_payloads,
    fetch_payloads,
    merged_metadata,
    message_bytes,
    prepare,
    read_payload_pointers,
    transform,
)
from spark_sqs.executor.receiver import read_partition
from spark_sqs.journal import BatchPlan, Journal, ReceiverPlan
from spark_sqs.lag import LAG, read_lag
from spark_sqs.schema import SNS_KEY, arrow_output_schema, messages_to_table, output_batches
from tests.factories import QUEUE_URL, SENT_MS, make_options, partition, sqs_message
from tests.fakes import FakeSqs
from tests.helpers import extended_sqs_client

TOPIC = "arn:aws:sns:us-east-1:123456789012:orders"
SNS = make_options(messageFormat="sns")
SNS_KEEP = make_options(messageFormat="sns", invalidEnvelope="keep")
EXTENDED = make_options(extendedPayloads="true")
BUCKET = "payloads"


def envelope(message: str = '{"order": 1}', **extra: Any) -> str:
    doc = {
        "Type": "Notification",
        "MessageId": "5b7c1a52-sns-0001",
        "TopicArn": TOPIC,
        "Subject": "new order",
        "Message": message,
        "Timestamp": "2024-05-01T12:34:56.789Z",
        "SignatureVersion": "1",
        "Signature": "c2lnbmF0dXJl",
        "SigningCertURL": "https://sns.us-east-1.amazonaws.com/cert.pem",
        "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
    }
    doc.update(extra)
    return json.dumps({k: v for k, v in doc.items() if v is not ...})


# -- SNS ------------------------------------------------------------------------------------------


def test_an_sns_notification_is_unwrapped_with_its_attributes() -> None:
    attributes = {
        "tenant": {"Type": "String", "Value": "acme"},
        "total": {"Type": "Number", "Value": "42.5"},
        "tags": {"Type": "String.Array", "Value": '["a", "b"]'},
        "thumb": {"Type": "Binary", "Value": base64.b64encode(b"\x89PNG\x00").decode()},
    }
    message = sqs_message(1, body=envelope(MessageAttributes=attributes))

    kept, rejected = transform([message], SNS)

    assert rejected == []
    (out,) = kept
    assert out["Body"] == '{"order": 1}'
    assert out[SNS_KEY] == {
        "TopicArn": TOPIC,
        "MessageId": "5b7c1a52-sns-0001",
        "Subject": "new order",
        "Timestamp": datetime(2024, 5, 1, 12, 34, 56, 789000, tzinfo=timezone.utc),
    }
    assert out["MessageAttributes"] == {
        "tenant": {"DataType": "String", "StringValue": "acme"},
        "total": {"DataType": "Number", "StringValue": "42.5"},
        "tags": {"DataType": "String.Array", "StringValue": '["a", "b"]'},
        "thumb": {"DataType": "Binary", "BinaryValue": b"\x89PNG\x00"},
    }
    # The SQS identity of the message is untouched.
    assert out["MessageId"] == message["MessageId"]
    assert out["ReceiptHandle"] == message["ReceiptHandle"]
    assert out["Attributes"] == message["Attributes"]
    assert message["Body"] == envelope(MessageAttributes=attributes), "input not mutated"


def test_sns_columns_reach_the_rows_with_the_sqs_attribute_struct() -> None:
    attributes = {"thumb": {"Type": "Binary", "Value": base64.b64encode(b"\x01\x02").decode()}}
    kept, _ = transform(
        [sqs_message(1, body=envelope(MessageAttributes=attributes, Subject=None))], SNS
    )
    table = messages_to_table(kept, QUEUE_URL, sns=True)
    (batch,) = output_batches(table, sns=True)

    assert batch.schema == arrow_output_schema(True)
    (row,) = batch.to_pylist()
    assert row["body"] == '{"order": 1}'
    assert row["snsTopicArn"] == TOPIC
    assert row["snsMessageId"] == "5b7c1a52-sns-0001"
    assert row["snsSubject"] is None
    assert row["snsTimestamp"] == datetime(2024, 5, 1, 12, 34, 56, 789000, tzinfo=timezone.utc)
    assert row["messageAttributes"] == [
        ("thumb", {"dataType": "Binary", "stringValue": None, "binaryValue": b"\x01\x02"})
    ]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("plain text", "the body is not JSON"),
        ('["a", "b"]', "not a JSON object"),
        (
            envelope(Type="SubscriptionConfirmation"),
            "Type is 'SubscriptionConfirmation', not 'Notification'",
        ),
        (envelope(TopicArn=...), "TopicArn is missing"),
        (envelope(Message=...), "Message is missing"),
        (envelope(Timestamp="yesterday"), "Timestamp 'yesterday' is not an ISO 8601 time"),
        (
            envelope(MessageAttributes={"b": {"Type": "Binary", "Value": "%%%"}}),
            "binary message attribute 'b' is not base64",
        ),
        (envelope(MessageAttributes={"b": {"Value": "x"}}), "message attribute 'b' has no Type"),
    ],
)
def test_a_message_that_is_no_sns_notification_is_rejected_with_the_reason(
    body: str, reason: str
) -> None:
    good, bad = sqs_message(1, body=envelope()), sqs_message(2, body=body)

    kept, rejected = transform([good, bad], SNS)

    assert [m["MessageId"] for m in kept] == [good["MessageId"]]
    assert [r.message_id for r in rejected] == [bad["MessageId"]]
    assert reason in rejected[0].reason


def test_invalid_envelope_keep_passes_the_message_through_raw() -> None:
    raw = sqs_message(2, body="plain text")
    kept, rejected = transform([sqs_message(1, body=envelope()), raw], SNS_KEEP)

    assert rejected == []
    assert kept[1] == raw
    table = messages_to_table(kept, QUEUE_URL, sns=True)
    rows = next(output_batches(table, sns=True)).to_pylist()
    assert rows[1]["body"] == "plain text"
    assert [rows[1][c] for c in ("snsTopicArn", "snsMessageId", "snsSubject", "snsTimestamp")] == [
        None
    ] * 4
    assert rows[0]["snsTopicArn"] == TOPIC


def test_raw_format_leaves_an_envelope_alone() -> None:
    message = sqs_message(1, body=envelope())
    kept, rejected = transform([message], make_options())
    assert (kept, rejected) == ([message], [])


# -- Extended Client pointers -------------------------------------------------------------------


def pointer_body(key: str, cls: str = "software.amazon.payloadoffloading.PayloadS3Pointer") -> str:
    return json.dumps([cls, {"s3BucketName": BUCKET, "s3Key": key}])


def size_attribute(name: str = "ExtendedPayloadSize", size: int = 5) -> dict[str, Any]:
    return {name: {"DataType": "Number", "StringValue": str(size)}}


@pytest.mark.parametrize(
    ("cls", "attribute"),
    [
        ("software.amazon.payloadoffloading.PayloadS3Pointer", "ExtendedPayloadSize"),
        ("com.amazon.sqs.javamessaging.MessageS3Pointer", "SQSLargePayloadSize"),
    ],
)
def test_an_extended_client_pointer_is_recognised_and_its_attribute_removed(
    cls: str, attribute: str
) -> None:
    attributes = {**size_attribute(attribute), "tenant": {"DataType": "String", "StringValue": "a"}}
    message = sqs_message(1, body=pointer_body("k-1", cls), attributes=attributes)

    (out,), rejected = transform([message], EXTENDED)

    assert rejected == []
    assert out[POINTER_KEY] == S3Pointer(BUCKET, "k-1")
    assert out["MessageAttributes"] == {"tenant": {"DataType": "String", "StringValue": "a"}}


def test_a_pointer_without_the_reserved_attribute_is_an_ordinary_body() -> None:
    message = sqs_message(1, body=pointer_body("k-1"))
    assert transform([message], EXTENDED) == ([message], [])


def test_extended_payloads_off_leaves_pointers_alone() -> None:
    message = sqs_message(1, body=pointer_body("k-1"), attributes=size_attribute())
    assert transform([message], make_options()) == ([message], [])


@pytest.mark.parametrize(
    "body",
    ["not json", '["other.Class", {"s3BucketName": "b", "s3Key": "k"}]', pointer_body("")],
)
def test_the_reserved_attribute_with_a_body_that_is_no_pointer_is_rejected(body: str) -> None:
    message = sqs_message(1, body=body, attributes=size_attribute())
    kept, rejected = transform([message], EXTENDED)
    assert kept == []
    assert "carries ExtendedPayloadSize" in rejected[0].reason


def test_an_sns_extended_client_pointer_inside_an_envelope_is_recognised() -> None:
    # The SNS Extended Client publishes the pointer as the Message, the size as an SNS attribute.
    body = envelope(
        pointer_body("k-9"),
        MessageAttributes={"ExtendedPayloadSize": {"Type": "Number", "Value": "9"}},
    )
    options = make_options(messageFormat="sns", extendedPayloads="true")
    (out,), _ = transform([sqs_message(1, body=body)], options)
    assert out[POINTER_KEY] == S3Pointer(BUCKET, "k-9")
    assert out[SNS_KEY]["TopicArn"] == TOPIC
    assert "ExtendedPayloadSize" not in out["MessageAttributes"]


# -- fetching from S3, with objects the extended client library wrote -----------------------------


@pytest.fixture
def aws() -> Iterator[tuple[Any, Any, str]]:
    """(extended-client SQS, S3, queue URL) on moto in process."""
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        producer = extended_sqs_client(None, BUCKET)
        plain = boto3.client("sqs", region_name="us-east-1")
        url = plain.create_queue(QueueName="offloaded")["QueueUrl"]
        yield producer, s3, url


def receive_all(url: str, count: int) -> list[dict[str, Any]]:
    """Raw ReceiveMessage results, as the source's receivers get them."""
    sqs = boto3.client("sqs", region_name="us-east-1")
    out: list[dict[str, Any]] = []
    while len(out) < count:
        response = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        out.extend(response.get("Messages", []))
    return out


def test_payloads_written_by_the_extended_client_are_fetched_in_parallel(
    aws: tuple[Any, Any, str],
) -> None:
    producer, s3, url = aws
    payloads = {f"payload {n} " + "\u00e9\u4e2d" * (n + 1) for n in range(23)}
    for payload in sorted(payloads):
        producer.send_message(
            QueueUrl=url,
            MessageBody=payload,
            MessageAttributes={"tenant": {"DataType": "String", "StringValue": "acme"}},
        )
    received = receive_all(url, len(payloads))
    assert all("ExtendedPayloadSize" in m["MessageAttributes"] for m in received)

    kept, rejected = transform(received, EXTENDED)
    out = fetch_payloads(kept, s3, threads=8)

    assert rejected == []
    assert {m["Body"] for m in out} == payloads
    assert all(set(m["MessageAttributes"]) == {"tenant"} for m in out)
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert {m[POINTER_KEY].key for m in out} == keys


def test_a_missing_payload_names_the_message_and_the_key(aws: tuple[Any, Any, str]) -> None:
    producer, s3, url = aws
    producer.send_message(QueueUrl=url, MessageBody="gone soon")
    (message,) = receive_all(url, 1)
    key = json.loads(message["Body"])[1]["s3Key"]
    s3.delete_object(Bucket=BUCKET, Key=key)

    kept, _ = transform([message], EXTENDED)
    with pytest.raises(ExtendedPayloadError) as caught:
        fetch_payloads(kept, s3)

    assert message["MessageId"] in str(caught.value)
    assert f"s3://{BUCKET}/{key}" in str(caught.value)
    assert not caught.value.retriable


def test_an_s3_outage_is_retriable() -> None:
    class Down:
        def get_object(self, **_: Any) -> Any:
            from botocore.exceptions import ClientError

            raise ClientError(
                {"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503}},
                "GetObject",
            )

    message = {**sqs_message(1), POINTER_KEY: S3Pointer(BUCKET, "k")}
    with pytest.raises(TransientSqsError) as caught:
        fetch_payloads([message], Down())
    assert caught.value.retriable and message["MessageId"] in str(caught.value)


# -- the receiver's hook ---------------------------------------------------------------------------


def test_prepare_releases_every_message_and_names_the_rejected_ones() -> None:
    good, bad = sqs_message(1, body=envelope()), sqs_message(2, body="plain text")
    released: list[list[dict[str, Any]]] = []

    with pytest.raises(InvalidEnvelopeError) as caught:
        prepare([good, bad], SNS, now=0.0, release=released.append, where="batch 3 receiver 1")

    text = str(caught.value)
    assert bad["MessageId"] in text and good["MessageId"] not in text
    assert "batch 3 receiver 1" in text
    assert "invalidEnvelope" in text and "keep" in text
    assert released == [[good, bad]]
    # Crosses the executor/driver boundary inside a task failure.
    assert str(pickle.loads(pickle.dumps(caught.value))) == text


def test_prepare_records_lag_and_payload_pointers(aws: tuple[Any, Any, str]) -> None:
    producer, s3, url = aws
    producer.send_message(QueueUrl=url, MessageBody="big")
    received = receive_all(url, 1)
    now = int(received[0]["Attributes"]["SentTimestamp"]) / 1000 + 7.5

    prepared = prepare(received, EXTENDED, now=now, release=pytest.fail, where="w", s3=s3)

    assert [m["Body"] for m in prepared.messages] == ["big"]
    assert read_lag(prepared.metadata) == {"messages": 1, "oldestAgeMs": 7500, "medianAgeMs": 7500}
    ((message_id, pointer),) = read_payload_pointers(prepared.metadata)
    assert message_id == received[0]["MessageId"]
    assert pointer.bucket == BUCKET


def test_prepare_in_raw_format_only_records_lag() -> None:
    messages = [sqs_message(n) for n in range(3)]
    prepared = prepare(
        messages, make_options(), now=SENT_MS / 1000 + 1, release=pytest.fail, where="w"
    )
    assert prepared.messages is messages
    assert set(prepared.metadata) == {LAG}


def test_a_receiver_journals_nothing_and_releases_on_an_invalid_envelope(tmp_path: Path) -> None:
    journal = str(tmp_path / "journal")
    messages = [sqs_message(1, body=envelope()), sqs_message(2, body="plain")]
    sqs = FakeSqs(script=[messages, []])
    part = partition(10, journal=journal, messageFormat="sns")

    with pytest.raises(InvalidEnvelopeError, match=messages[1]["MessageId"]):
        list(read_partition(part, client_factory=lambda: sqs))

    assert Journal(journal).entries.read(part.batch, part.receiver) is None
    ((action, entries),) = sqs.batch_calls
    assert action == "visibility"
    assert [e["ReceiptHandle"] for e in entries] == [m["ReceiptHandle"] for m in messages]
    assert all(e["VisibilityTimeout"] == 0 for e in entries)


def test_a_receiver_journals_unwrapped_messages_and_replays_them(tmp_path: Path) -> None:
    journal = str(tmp_path / "journal")
    sqs = FakeSqs(script=[[sqs_message(n, body=envelope(f"m{n}")) for n in range(3)], []])
    part = partition(10, journal=journal, messageFormat="sns")

    first = pa.Table.from_batches(list(read_partition(part, client_factory=lambda: sqs)))
    replay = pa.Table.from_batches(list(read_partition(part, client_factory=lambda: None)))

    assert first.schema == arrow_output_schema(True)
    assert first.column("body").to_pylist() == ["m0", "m1", "m2"]
    assert first.column("snsTopicArn").to_pylist() == [TOPIC] * 3
    assert replay.equals(first)
    receipts = Journal(journal).entries.read_receipts(1, 0)
    assert receipts is not None and read_lag(receipts.metadata)["messages"] == 3


def test_delete_after_journal_keeps_lag_and_pointers_of_every_part(tmp_path: Path) -> None:
    journal = str(tmp_path / "journal")
    sqs = FakeSqs(script=[[sqs_message(n) for n in range(10)], [sqs_message(10)], []])
    part = partition(20, journal=journal, deleteAfterJournal="true")

    list(read_partition(part, client_factory=lambda: sqs))

    receipts = Journal(journal).entries.read_receipts(1, 0)
    assert receipts is not None and read_lag(receipts.metadata)["messages"] == 11


def test_merged_metadata_combines_parts() -> None:
    parts = [
        {
            LAG: b'{"messages": 2, "oldestAgeMs": 50, "medianAgeMs": 10}',
            EXTENDED_PAYLOADS: b'[["a", "b1", "k1"]]',
        },
        {LAG: b'{"messages": 1, "oldestAgeMs": 5, "medianAgeMs": 5}'},
        None,
    ]
    merged = merged_metadata(parts)
    assert read_lag(merged) == {"messages": 3, "oldestAgeMs": 50, "medianAgeMs": 10}
    assert read_payload_pointers(merged) == [("a", S3Pointer("b1", "k1"))]


# -- deleting payloads after acknowledgement ------------------------------------------------------


def test_delete_payloads_removes_the_acknowledged_objects_but_not_uncertain_ones(
    aws: tuple[Any, Any, str], tmp_path: Path
) -> None:
    producer, s3, url = aws
    for n in range(5):
        producer.send_message(QueueUrl=url, MessageBody=f"payload {n}")
    received = receive_all(url, 5)
    journal = Journal(str(tmp_path / "journal"))
    # Two receivers of batch 4 journal what they got, as read_partition does.
    for receiver, chunk in enumerate((received[:3], received[3:])):
        prepared = prepare(chunk, EXTENDED, now=0.0, release=pytest.fail, where="w", s3=s3)
        table = messages_to_table(prepared.messages, url).replace_schema_metadata(prepared.metadata)
        journal.entries.write(4, receiver, table)
    uncertain = received[1]["MessageId"]
    kept_key = json.loads(received[1]["Body"])[1]["s3Key"]

    result = delete_payloads(journal.entries.batch_receipts(4, [0, 1]), s3, exclude={uncertain})

    assert (result.deleted, result.kept, result.failed) == (4, 1, {})
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]] == [kept_key]
    # Idempotent: a second call (the acknowledger retried) deletes nothing new and fails nothing.
    again = delete_payloads(journal.entries.batch_receipts(4, [0, 1]), s3, exclude={uncertain})
    assert again.failed == {}


def test_delete_payloads_reports_failures_without_raising() -> None:
    class Denied:
        def delete_objects(self, **_: Any) -> Any:
            from botocore.exceptions import ClientError

            raise ClientError(
                {"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": 403}},
                "DeleteObjects",
            )

    schema = pa.schema([("messageId", pa.string())]).with_metadata(
        {EXTENDED_PAYLOADS: b'[["m1", "b", "k1"], ["m2", "b", "k2"]]'}
    )
    result = delete_payloads([pa.table({"messageId": ["m1", "m2"]}, schema=schema)], Denied())
    assert result.failed == {"s3://b/k1": "AccessDenied", "s3://b/k2": "AccessDenied"}
    assert result.deleted == 0


# -- sizes (the receivers' memory bound) -------------------------------------------------------


def test_a_message_s_bytes_count_its_body_attributes_id_and_handle_in_utf8() -> None:
    plain = sqs_message(1, body="a" * 1000)
    wide = sqs_message(1, body="\u00e9" * 1000)  # 2 bytes each in UTF-8
    assert message_bytes(wide, make_options()) - message_bytes(plain, make_options()) == 1000
    attrs = {"blob": {"DataType": "Binary", "BinaryValue": b"\x00" * 500}}
    with_attrs = sqs_message(1, body="a" * 1000, attributes=attrs)
    grown = message_bytes(with_attrs, make_options()) - message_bytes(plain, make_options())
    assert grown == len("blob") + len("Binary") + 500
    assert message_bytes(plain, make_options()) > 1000 + len(plain["ReceiptHandle"])


def test_an_extended_client_payload_counts_at_its_declared_size(
    aws: tuple[Any, Any, str],
) -> None:
    producer, _, url = aws
    payload = "p" * 300_000
    producer.send_message(QueueUrl=url, MessageBody=payload)
    (message,) = receive_all(url, 1)
    assert len(message["Body"]) < 1000  # the pointer
    assert declared_payload_size(message, EXTENDED) == 300_000
    assert message_bytes(message, EXTENDED) > 300_000
    # Without extendedPayloads the pointer is the body the source delivers.
    assert message_bytes(message, make_options()) < 2000


def test_a_payload_size_inside_an_sns_envelope_counts_too() -> None:
    body = envelope(
        pointer_body("k-9"),
        MessageAttributes={"ExtendedPayloadSize": {"Type": "Number", "Value": "5000000"}},
    )
    both = make_options(messageFormat="sns", extendedPayloads="true")
    assert declared_payload_size(sqs_message(1, body=body), both) == 5_000_000
    assert declared_payload_size(sqs_message(1, body=body), EXTENDED) == 0
    broken = envelope(pointer_body("k-9"), MessageAttributes={"ExtendedPayloadSize": 5})
    assert declared_payload_size(sqs_message(1, body=broken), both) == 0


def test_a_receiver_stops_at_its_byte_limit_counting_the_payloads_it_will_fetch(
    aws: tuple[Any, Any, str], tmp_path: Path
) -> None:
    producer, _, url = aws
    for n in range(30):
        producer.send_message(QueueUrl=url, MessageBody=f"{n:03d}" + "q" * 200_000)
    location = str(tmp_path / "journal")
    options = make_options(location, extendedPayloads="true", waitTimeSeconds="0")
    journal = Journal(location, options)
    journal.plans.write(BatchPlan(1, (ReceiverPlan(0, 100, max_bytes=1_000_000),)))
    sqs = boto3.client("sqs", region_name="us-east-1")

    rows = pa.Table.from_batches(
        list(read_partition(ReceiverPartition(1, 0, 100, url, options), client_factory=lambda: sqs))
    )

    # Each call's 200 KB payloads are counted before they are fetched: the receiver stops at
    # the first call that leaves it at 1,000,000 bytes or more (a call returns 1-10 messages).
    assert 5 <= rows.num_rows < 15
    assert sum(len(b) for b in rows.column("body").to_pylist()) < 1_000_000 + 10 * 200_200
    assert all(len(b) == 200_003 for b in rows.column("body").to_pylist())
