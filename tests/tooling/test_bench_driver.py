"""The driver benchmark's deterministic counts: tiny points through ``bench.driver``.

Each point runs the reader's driver-side calls in this process and ``read`` in worker processes,
against the stub SQS and moto's S3 in their own processes, exactly as ``make bench-driver`` does.
Only counts are asserted, never times. Two of its targets failed on the code before the
acknowledgement moved to the executors (they were ``xfail(strict=True)`` then): the pickled
partition does not grow with the drop set, and the driver reads an entry in at most 2 requests.

The visibility timeout is 12 hours, so the heartbeat (every visibilityTimeout / 5) never ticks
during a point: the driver's journal reads are then the acknowledgement's alone.
"""

from __future__ import annotations

import math
from typing import Any

import boto3
import pytest

from bench.driver import Point, Settings, run_point
from bench.driver_servers import StubSqs

RECEIVERS, MESSAGES, DROPS = 4, 200, 2000
SETTINGS = Settings(batches=2, delay=0.0, processes=2, threads=4, visibility_timeout=43200)
BATCHES = SETTINGS.batches + 1


@pytest.fixture(scope="module")
def s3_point() -> dict[str, Any]:
    return run_point(Point(RECEIVERS, MESSAGES, 0, "s3"), SETTINGS)


@pytest.fixture(scope="module")
def local_point() -> dict[str, Any]:
    return run_point(Point(RECEIVERS, MESSAGES, 0, "local"), SETTINGS)


@pytest.fixture(scope="module")
def local_point_with_drops() -> dict[str, Any]:
    return run_point(Point(RECEIVERS, MESSAGES, DROPS, "local"), SETTINGS)


def _total(counts: dict[str, int], op: str) -> int:
    return sum(v for k, v in counts.items() if k.split(":")[1:] == [op])


@pytest.mark.parametrize("name", ["s3_point", "local_point", "local_point_with_drops"])
def test_every_message_is_read_once_and_deleted(name: str, request: Any) -> None:
    point = request.getfixturevalue(name)
    assert point["messages_handed_out"] == MESSAGES * BATCHES
    assert point["rows_read"] == MESSAGES * BATCHES
    assert point["acknowledged_messages"] == MESSAGES * SETTINGS.batches
    # Whoever deletes (the driver today, receivers of the next batch later): every message once,
    # the last batch by the final latestOffset, which starts no batch on an empty queue.
    deleted = sum(
        v for k, v in point["totals"]["sqs"].items() if k.endswith(":DeleteMessageBatch:entries")
    )
    # Today's start-up permission probe deletes one handle that names no message.
    assert MESSAGES * BATCHES <= deleted <= MESSAGES * BATCHES + 1
    assert point["final_offset_moved"] is False


def test_requests_are_told_apart_by_sender(s3_point: dict[str, Any]) -> None:
    for service in ("sqs", "s3"):
        senders = {key.split(":")[0] for key in s3_point["totals"][service]}
        assert senders <= {"driver", "worker"}, senders
    sqs = s3_point["totals"]["sqs"]
    assert _total(sqs, "ReceiveMessage") == sqs.get("worker:ReceiveMessage", 0) > 0
    # The driver deletes at most once per ten messages of a batch (SQS's batch limit).
    per_batch = s3_point["sqs_calls_per_batch_by_op"].get("driver:DeleteMessageBatch", 0)
    assert per_batch <= math.ceil(MESSAGES / 10)
    # Receivers write one journal entry each per batch.
    assert s3_point["totals"]["s3"].get("worker:PUT", 0) >= RECEIVERS * BATCHES


def test_pickled_partition_is_small_without_a_drop_set(local_point: dict[str, Any]) -> None:
    assert 0 < local_point["pickled_bytes_per_partition"]["max"] < 4096


def test_pickled_partition_size_does_not_grow_with_the_drop_set(
    local_point: dict[str, Any], local_point_with_drops: dict[str, Any]
) -> None:
    without = local_point["pickled_bytes_per_partition"]["max"]
    # A reference to a drop set shipped once (a content hash, a key) may add a few bytes.
    assert local_point_with_drops["pickled_bytes_per_partition"]["max"] <= without + 512


def test_driver_reads_a_journal_entry_in_at_most_two_requests(s3_point: dict[str, Any]) -> None:
    assert s3_point["journal_reads_per_entry"]["driver_total"] <= 2


def test_the_driver_settles_acknowledgement_from_the_reports_alone(
    s3_point: dict[str, Any],
) -> None:
    # The driver settles a batch from its receivers' acknowledgement reports, read by key (one
    # GET per reporting receiver: a LIST that lags must not hide one), and reads no entry: at
    # most one read per entry acknowledged (a reporter acknowledges one entry or more).
    assert s3_point["journal_reads_per_entry"]["driver_acknowledgement"] <= 1
    assert s3_point["journal_requests_per_batch_by_kind"].get("driver:GET", 0) <= RECEIVERS + 2


def test_stub_sqs_hands_out_the_backlog_once() -> None:
    """The stub answers botocore's JSON protocol: a receive gets at most what is left."""
    from bench.driver_servers import serve_sqs

    server = serve_sqs(backlog=15, delay=0.0, body_bytes=10)
    try:
        client = boto3.client(
            "sqs",
            region_name="us-east-1",
            endpoint_url=f"http://127.0.0.1:{server.server_address[1]}",
            aws_access_key_id="t",
            aws_secret_access_key="t",
        )
        url = client.get_queue_url(QueueName="q")["QueueUrl"]
        first = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        second = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert "Messages" not in client.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
        ids = [m["MessageId"] for m in first + second]
        assert (len(first), len(second), len(set(ids))) == (10, 5, 15)
        attrs = client.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        assert attrs == {"ApproximateNumberOfMessages": "0"}
        result = client.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(first)
            ],
        )
        assert len(result["Successful"]) == 10 and not result.get("Failed")
    finally:
        server.shutdown()


def test_stub_sqs_message_ids_are_unique_and_shaped_like_sqs() -> None:
    stub = StubSqs(backlog=3, delay=0.0, body_bytes=5)
    messages = [stub.message(n, "0") for n in stub.take(10)]
    assert len({m["MessageId"] for m in messages}) == 3
    assert all(len(m["MessageId"]) == 36 for m in messages)
