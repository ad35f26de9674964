"""SNS envelopes, SQS Extended Client payloads and lag counters, end to end on the moto server:
an SNS topic delivering to the queue, payloads offloaded to moto's S3 by the
amazon-sqs-extended-client package, and the metrics files of acknowledged batches."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import boto3
import pytest

from spark_sqs.journal import Journal
from spark_sqs.sqs.client import queue_counts
from tests import helpers
from tests.conftest import REGION

pytestmark = pytest.mark.integration


def options_for(endpoint: str, queue_url: str, journal: str, **extra: str) -> dict[str, str]:
    return {
        "queueUrl": queue_url,
        "endpointUrl": endpoint,
        "journalLocation": journal,
        "numPartitions": "1",
        **extra,
    }


# -- SNS -----------------------------------------------------------------------------------------


@pytest.fixture
def topic(moto_endpoint: str, sqs: Any, queue_url: str) -> str:
    """An SNS topic delivering to ``queue_url`` (without raw message delivery)."""
    sns = boto3.client("sns", region_name=REGION, endpoint_url=moto_endpoint)
    arn = sns.create_topic(Name=f"t-{uuid.uuid4().hex[:12]}")["TopicArn"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=queue_arn)
    return arn


def test_sns_notifications_are_unwrapped(moto_endpoint, sqs, queue_url, topic, deliver):
    sns = boto3.client("sns", region_name=REGION, endpoint_url=moto_endpoint)
    published = {}
    for n in range(12):
        kwargs: dict[str, Any] = {"TopicArn": topic, "Message": json.dumps({"n": n})}
        if n % 2:
            kwargs["Subject"] = f"order {n}"
        kwargs["MessageAttributes"] = {
            "tenant": {"DataType": "String", "StringValue": f"t{n % 3}"},
            "amount": {"DataType": "Number", "StringValue": f"{n}.5"},
            "raw": {"DataType": "Binary", "BinaryValue": bytes([n, 255])},
            "tags": {"DataType": "String.Array", "StringValue": f'["a", {n}]'},
        }
        published[sns.publish(**kwargs)["MessageId"]] = n
    helpers.wait_until(lambda: queue_counts(sqs, queue_url)[0] == 12, 30, "SNS deliveries")

    rows = deliver(messageFormat="sns")

    assert sorted(json.loads(r.body)["n"] for r in rows) == list(range(12))
    for row in rows:
        n = json.loads(row.body)["n"]
        assert published[row.snsMessageId] == n
        assert row.snsTopicArn == topic
        assert row.snsSubject == (f"order {n}" if n % 2 else None)
        assert row.snsTimestamp is not None
        attributes = {k: v.asDict() for k, v in row.messageAttributes.items()}
        assert attributes == {
            "tenant": {"dataType": "String", "stringValue": f"t{n % 3}", "binaryValue": None},
            "amount": {"dataType": "Number", "stringValue": f"{n}.5", "binaryValue": None},
            "raw": {"dataType": "Binary", "stringValue": None, "binaryValue": bytearray([n, 255])},
            "tags": {"dataType": "String.Array", "stringValue": f'["a", {n}]', "binaryValue": None},
        }
    assert len({r.messageId for r in rows}) == 12


def test_a_message_that_is_not_an_envelope_fails_the_query_then_is_kept_on_request(
    spark, moto_endpoint, sqs, queue_url, topic, tmp_path, deliver
):
    sns = boto3.client("sns", region_name=REGION, endpoint_url=moto_endpoint)
    sns.publish(TopicArn=topic, Message="from sns")
    stray = sqs.send_message(QueueUrl=queue_url, MessageBody="sent to the queue directly")
    helpers.wait_until(lambda: queue_counts(sqs, queue_url)[0] == 2, 30, "two messages")

    failure = helpers.start_and_fail(
        spark,
        options_for(moto_endpoint, queue_url, str(tmp_path / "j1"), messageFormat="sns"),
        str(tmp_path / "c1"),
    )

    assert stray["MessageId"] in failure
    assert "not an SNS notification" in failure
    assert "invalidEnvelope" in failure
    # Not journaled, nothing deleted: both are back in the queue for its redrive policy.
    helpers.wait_until(lambda: queue_counts(sqs, queue_url) == (2, 0), 60, "both messages visible")
    assert not list((tmp_path / "j1").glob("batches/*/*.arrow"))
    receives = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    )["Messages"]
    counts = {m["MessageId"]: int(m["Attributes"]["ApproximateReceiveCount"]) for m in receives}
    assert counts[stray["MessageId"]] >= 2  # every failed attempt counted a receive
    sqs.change_message_visibility_batch(
        QueueUrl=queue_url,
        Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
            for i, m in enumerate(receives)
        ],
    )

    rows = deliver(messageFormat="sns", invalidEnvelope="keep")

    by_body = {r.body: r for r in rows}
    assert set(by_body) == {"from sns", "sent to the queue directly"}
    assert by_body["from sns"].snsTopicArn == topic
    kept = by_body["sent to the queue directly"]
    assert kept.messageId == stray["MessageId"]
    assert (kept.snsTopicArn, kept.snsMessageId, kept.snsSubject, kept.snsTimestamp) == (
        None,
        None,
        None,
        None,
    )


# -- Extended Client payloads ----------------------------------------------------------------------


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"payloads-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.mark.parametrize("delete_payloads", [False, True])
def test_extended_payloads_are_fetched_from_s3(
    moto_endpoint, sqs, s3, queue_url, bucket, delete_payloads, deliver
):
    producer = helpers.extended_sqs_client(moto_endpoint, bucket)
    payloads = [f"{n}:" + "\u00e9x" * (n * 20_000) for n in range(1, 16)]
    for payload in payloads:
        producer.send_message(
            QueueUrl=queue_url,
            MessageBody=payload,
            MessageAttributes={"tenant": {"DataType": "String", "StringValue": "acme"}},
        )
    # Not offloaded: plain messages on the same queue pass through untouched.
    helpers.send_numbered(sqs, queue_url, 5)
    assert len(s3.list_objects_v2(Bucket=bucket)["Contents"]) == len(payloads)

    rows = deliver(
        extendedPayloads="true",
        s3EndpointUrl=moto_endpoint,
        numPartitions=2,
        deleteExtendedPayloads=str(delete_payloads).lower(),
        # Deleted once their messages are acknowledged: wait for that before stopping.
        until=(lambda: not s3.list_objects_v2(Bucket=bucket).get("Contents"))
        if delete_payloads
        else None,
    )

    bodies = [r.body for r in rows]
    assert sorted(b for b in bodies if not b.startswith("{")) == sorted(payloads)
    assert sorted(json.loads(b)["n"] for b in bodies if b.startswith("{")) == list(range(5))
    for row in rows:
        assert "ExtendedPayloadSize" not in row.messageAttributes
    offloaded = [r for r in rows if not r.body.startswith("{")]
    assert all(r.messageAttributes["tenant"].stringValue == "acme" for r in offloaded)
    left = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert len(left) == (0 if delete_payloads else len(payloads))


def test_extended_payloads_count_towards_the_receivers_byte_limit(
    moto_endpoint, sqs, s3, queue_url, bucket, deliver, tmp_path
):
    producer = helpers.extended_sqs_client(moto_endpoint, bucket)
    payloads = [f"{n:02d}:" + "p" * 200_000 for n in range(30)]
    for payload in payloads:
        producer.send_message(QueueUrl=queue_url, MessageBody=payload)

    rows = deliver(
        extendedPayloads="true",
        s3EndpointUrl=moto_endpoint,
        numPartitions=2,
        maxBytesPerReceiver="1m",
    )

    assert sorted(r.body for r in rows) == payloads
    # Each pointer counts at its declared 200 KB: a receiver stops after the call that brings
    # it to 1 MiB, so it journals at most one call (10 messages) a batch, and the 30 payloads
    # take several batches (without the limit, the first batch's share of 5,000 takes all).
    journaled = [m["journaled"] for m in Journal(str(tmp_path / "journal")).metrics.read()]
    assert sum(journaled) == 30
    assert 0 < max(journaled) <= 20


def test_a_missing_payload_fails_naming_the_message_and_the_key(
    spark, moto_endpoint, sqs, s3, queue_url, bucket, tmp_path
):
    producer = helpers.extended_sqs_client(moto_endpoint, bucket)
    sent = producer.send_message(QueueUrl=queue_url, MessageBody="soon gone")
    (key,) = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    s3.delete_object(Bucket=bucket, Key=key)

    failure = helpers.start_and_fail(
        spark,
        options_for(
            moto_endpoint,
            queue_url,
            str(tmp_path / "journal"),
            extendedPayloads="true",
            s3EndpointUrl=moto_endpoint,
        ),
        str(tmp_path / "ckpt"),
    )

    assert sent["MessageId"] in failure
    assert f"s3://{bucket}/{key}" in failure
    helpers.wait_until(
        lambda: queue_counts(sqs, queue_url) == (1, 0), 60, "the message visible again"
    )


# -- lag -------------------------------------------------------------------------------------------


def test_lag_counters_reach_the_metrics_files(sqs, queue_url, tmp_path, source):
    helpers.send_numbered(sqs, queue_url, 30)
    sent_by = time.time()
    name = f"lag_{uuid.uuid4().hex}"
    query = helpers.start_query(
        source(numPartitions=2),
        "memory",
        tmp_path / "ckpt",
        queryName=name,
    )
    # No receiver can run before the query has started.
    started = time.time()
    helpers.drain_and_stop(query, sqs, queue_url, timeout=240)
    journal = Journal(str(tmp_path / "journal"))

    metrics = helpers.wait_until(
        lambda: [m for m in journal.metrics.read() if m["journaled"]], 60, "metrics files"
    )

    assert sum(m["journaled"] for m in metrics) == 30
    for m in metrics:
        assert m["oldestMessageAgeMs"] >= m["medianMessageAgeMs"] >= 0
        assert isinstance(m["inFlightMessages"], int)
    # Every message was sent before sent_by and received after started.
    assert max(m["oldestMessageAgeMs"] for m in metrics) >= (started - sent_by) * 1000
