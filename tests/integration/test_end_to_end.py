"""End to end: real streaming queries on local Spark against a moto SQS server."""

from __future__ import annotations

import json

import pytest

from tests import helpers

pytestmark = pytest.mark.integration


def test_every_message_exactly_once_with_columns(spark, sqs, queue_url, tmp_path, source):
    numbers = helpers.send_numbered(sqs, queue_url, 300)
    out, checkpoint, journal = tmp_path / "out", tmp_path / "ckpt", tmp_path / "journal"
    df = source(journal=journal, numPartitions=3, maxMessagesPerTrigger=120, waitTimeSeconds=1)
    query = helpers.start_query(
        df, "parquet", checkpoint, trigger={"processingTime": "0 seconds"}, path=str(out)
    )
    helpers.drain_and_stop(query, sqs, queue_url, timeout=240)

    rows = spark.read.parquet(str(out)).collect()
    bodies = [json.loads(r.body)["n"] for r in rows]
    assert sorted(bodies) == numbers, "every message exactly once"
    assert len({r.messageId for r in rows}) == len(rows)

    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(batches) <= 120, f"maxMessagesPerTrigger not honoured: {batches}"

    row = next(r for r in rows if json.loads(r.body)["n"] == 7)
    assert json.loads(row.body)["text"] == "message 7 \u00e9\u4e2d\U0001f600"
    assert row.queueUrl == queue_url
    assert row.md5OfBody and len(row.md5OfBody) == 32
    assert row.sentTimestamp is not None and row.approximateFirstReceiveTimestamp is not None
    assert row.approximateReceiveCount == 1
    assert row.senderId
    assert row.messageGroupId is None and row.sequenceNumber is None
    assert row.attributes["ApproximateReceiveCount"] == "1"
    attrs = row.messageAttributes
    assert attrs["kind"].dataType == "String" and attrs["kind"].stringValue == "test"
    assert attrs["number"].dataType == "Number" and attrs["number"].stringValue == "7"
    assert attrs["blob"].dataType == "Binary" and bytes(attrs["blob"].binaryValue) == b"\0\0\0\7"

    # Acknowledged batches leave nothing behind in the journal.
    assert not list((journal / "batches").glob("*/*.arrow"))


def test_empty_queue_runs_no_batches_and_new_messages_start_one(
    spark, sqs, queue_url, tmp_path, source
):
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    df = source(queuePollInterval=0.2)
    query = helpers.start_query(
        df, "parquet", checkpoint, trigger={"processingTime": "0 seconds"}, path=str(out)
    )
    try:
        # Spark always runs one (empty) first batch from the initial offset; after that an
        # idle query must only report progress, never run a batch. Idle reports come every
        # second (noDataProgressEventInterval), the queue is polled every 0.2 s.
        helpers.wait_until(lambda: len(query.recentProgress) >= 6, 120, "idle progress reports")
        progress = query.recentProgress
        assert all(p["numInputRows"] == 0 for p in progress)
        ran = [p["batchId"] for p in progress if "addBatch" in p["durationMs"]]
        assert ran == [0], f"an empty queue must not start micro-batches, ran {ran}"

        helpers.send_numbered(sqs, queue_url, 5)
        helpers.wait_until(
            lambda: sum(p["numInputRows"] for p in query.recentProgress) >= 5,
            120,
            "the new messages to be processed",
        )
        helpers.wait_until(
            lambda: helpers.queue_counts(sqs, queue_url) == (0, 0), 60, "an empty queue"
        )
    finally:
        query.stop()
    assert spark.read.parquet(str(out)).count() == 5


def test_journal_on_s3(spark, moto_endpoint, sqs, s3, queue_url, tmp_path, source):
    bucket = f"journal-{queue_url.rsplit('/', 1)[1]}"
    s3.create_bucket(Bucket=bucket)
    host_port = moto_endpoint.removeprefix("http://")
    journal = f"s3://{bucket}/queries/q1?endpoint_override={host_port}&scheme=http"
    numbers = helpers.send_numbered(sqs, queue_url, 80)
    out = tmp_path / "out"
    df = source(journal=journal, numPartitions=2, maxMessagesPerTrigger=30)
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    helpers.drain_and_stop(query, sqs, queue_url, timeout=240)
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(json.loads(r.body)["n"] for r in rows) == numbers
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    # The journal lived in S3: its metadata and state are there, acknowledged entries are gone.
    assert "queries/q1/_meta.json" in keys
    assert [k for k in keys if k.startswith("queries/q1/state/acked-")]
    assert not [k for k in keys if k.startswith("queries/q1/batches/")]


def test_a_backlog_plans_every_receiver_and_a_trickle_one(spark, sqs, queue_url, tmp_path, source):
    """A batch plans the receivers its backlog needs: the first batch of a backlog of four
    receivers' worth plans all four (numPartitions), a batch of a few messages one."""
    from spark_sqs.driver.planning import MESSAGES_PER_RECEIVER
    from spark_sqs.journal import Journal

    backlog = 4 * MESSAGES_PER_RECEIVER
    helpers.send_numbered(sqs, queue_url, backlog)
    journal = tmp_path / "journal"

    def journaled() -> int:
        return sum(m["journaled"] for m in Journal(str(journal)).metrics.read())

    query = helpers.start_query(
        source(journal=journal, numPartitions=4, waitTimeSeconds=1), "noop", tmp_path / "ckpt"
    )
    try:
        helpers.wait_until(lambda: journaled() == backlog, 240, "the backlog acknowledged")
        helpers.send_numbered(sqs, queue_url, 5, start=backlog)
        helpers.wait_until(lambda: journaled() == backlog + 5, 120, "the trickle acknowledged")
    finally:
        query.stop()
    metrics = sorted(
        (m for m in Journal(str(journal)).metrics.read() if m["journaled"]),
        key=lambda m: m["batch"],
    )
    # Each receiver that received wrote one entry; a batch's count is its receivers'.
    assert metrics[0]["receivers"] == 4, metrics
    trickle = [m for m in metrics if m["batch"] > metrics[0]["batch"] and m["journaled"] <= 5]
    assert sum(m["journaled"] for m in trickle) >= 5 and trickle[-1]["receivers"] == 1, metrics
