"""The SQS sink end to end: real batch and streaming writes on local Spark into a moto server."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from pyspark.sql import functions as F

from spark_sqs.sink.rows import DEDUPE_ATTRIBUTE
from tests.helpers import (
    process_all_available,
    queue_counts,
    send_numbered,
    sqs_stream,
    start_query,
    wait_until,
)

pytestmark = pytest.mark.integration


def _receive_all(sqs: Any, queue_url: str, expected: int, timeout: float = 120) -> list[dict]:
    """Receive and delete until ``expected`` messages arrived; then check nothing else comes."""
    got: list[dict] = []

    def more() -> bool:
        response = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        )
        messages = response.get("Messages", [])
        got.extend(messages)
        if messages:
            sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(messages)
                ],
            )
        return len(got) >= expected

    wait_until(more, timeout, f"{expected} messages in the target queue")
    assert queue_counts(sqs, queue_url) == (0, 0), "more messages than expected"
    return got


def _write(df: Any, endpoint: str, queue_url: str, **options: Any) -> None:
    writer = (
        df.write.format("sqs")
        .mode("append")
        .option("queueUrl", queue_url)
        .option("endpointUrl", endpoint)
    )
    for key, value in options.items():
        writer = writer.option(key, str(value))
    writer.save()


def _write_fails(df: Any, endpoint: str, queue_url: str, **options: Any) -> str:
    with pytest.raises(Exception) as failure:
        _write(df, endpoint, queue_url, **options)
    return str(failure.value)


def test_batch_write_round_trip(spark, moto_endpoint, sqs, queue_url, tmp_path):
    rows = [
        (json.dumps({"n": n, "text": f"m{n} \u00e9\U0001f600"}), {"n": str(n)}) for n in range(50)
    ]
    df = spark.createDataFrame(rows, "body string, messageAttributes map<string,string>")
    metrics = tmp_path / "metrics"
    _write(df, moto_endpoint, queue_url, maxInFlightCalls=3, metricsLocation=metrics)

    messages = _receive_all(sqs, queue_url, 50)
    assert sorted(json.loads(m["Body"])["n"] for m in messages) == list(range(50))
    for m in messages:
        n = json.loads(m["Body"])["n"]
        assert m["Body"] == rows[n][0]
        assert m["MessageAttributes"]["n"] == {"StringValue": str(n), "DataType": "String"}
    # Standard queue: at-least-once, with the deduplication id for consumers.
    ids = {m["MessageAttributes"][DEDUPE_ATTRIBUTE]["StringValue"] for m in messages}
    assert len(ids) == 50

    (written,) = metrics.glob("write-auto-*.json")
    counters = json.loads(written.read_text())
    assert counters["rows"] == 50 and counters["sent"] == 50 and counters["tasks"] >= 1
    assert counters["calls"] >= 5 and counters["failed"] == 0


def test_stream_from_one_queue_into_another(spark, moto_endpoint, sqs, queue_url, tmp_path):
    target = sqs.create_queue(QueueName=f"target-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    numbers = send_numbered(sqs, queue_url, 60)
    source = sqs_stream(
        spark,
        moto_endpoint,
        queue_url,
        str(tmp_path / "journal"),
        numPartitions=2,
        maxMessagesPerTrigger=25,
    )
    query = (
        source.select("messageId", "body", "messageAttributes")
        .writeStream.format("sqs")
        .option("queueUrl", target)
        .option("endpointUrl", moto_endpoint)
        .option("metricsLocation", str(tmp_path / "metrics"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        process_all_available(query, timeout=240)
        wait_until(lambda: queue_counts(sqs, queue_url) == (0, 0), 60, "source queue drained")
    finally:
        query.stop()

    messages = _receive_all(sqs, target, 60)
    assert sorted(json.loads(m["Body"])["n"] for m in messages) == numbers
    m7 = next(m for m in messages if json.loads(m["Body"])["n"] == 7)
    attrs = m7["MessageAttributes"]
    assert attrs["kind"]["StringValue"] == "test" and attrs["number"]["StringValue"] == "7"
    assert attrs["blob"]["BinaryValue"] == b"\0\0\0\7"
    sent = sum(
        json.loads(p.read_text())["sent"] for p in (tmp_path / "metrics").glob("batch-*.json")
    )
    assert sent == 60


def _fifo_rows(spark: Any, groups: int, per_group: int) -> Any:
    rows = [
        (json.dumps({"g": g, "n": n}), f"g{g}", n) for n in range(per_group) for g in range(groups)
    ]
    df = spark.createDataFrame(rows, "body string, messageGroupId string, n int")
    # Each group wholly in one partition, in its order: SQS keeps a group's order per sender.
    return df.repartition(2, "messageGroupId").sortWithinPartitions("n").drop("n")


def test_fifo_target_group_order_and_same_write_id_dedupes(
    spark, moto_endpoint, sqs, fifo_queue_url
):
    df = _fifo_rows(spark, groups=4, per_group=10)
    _write(df, moto_endpoint, fifo_queue_url, writeId="load-1")
    # The same write again (a retried job): the same deduplication ids, and SQS drops them all.
    _write(df, moto_endpoint, fifo_queue_url, writeId="load-1")
    assert queue_counts(sqs, fifo_queue_url)[0] == 40

    messages = _receive_all(sqs, fifo_queue_url, 40)
    by_group: dict[str, list[int]] = {}
    for m in messages:
        body = json.loads(m["Body"])
        assert m["Attributes"]["MessageGroupId"] == f"g{body['g']}"
        by_group.setdefault(m["Attributes"]["MessageGroupId"], []).append(body["n"])
    assert by_group == {f"g{g}": list(range(10)) for g in range(4)}, "every group in order"

    # Another writeId is another write: SQS keeps its messages (so the check above is real).
    _write(df, moto_endpoint, fifo_queue_url, writeId="load-2")
    assert len(_receive_all(sqs, fifo_queue_url, 40)) == 40


def test_fifo_batch_write_without_write_id_is_refused(spark, moto_endpoint, sqs, fifo_queue_url):
    text = _write_fails(_fifo_rows(spark, 2, 2), moto_endpoint, fifo_queue_url)
    assert "needs the 'writeId' option" in text and "Fix:" in text
    assert queue_counts(sqs, fifo_queue_url) == (0, 0)


@pytest.mark.parametrize(
    ("columns", "expected"),
    [
        ("value string", "needs a string column 'body'"),
        ("body int", "column 'body' must be a string, not int"),
        ("body string, extra string", "does not know the column(s) 'extra'"),
        ("body string, messageGroupId string", "is a standard queue, but the input has a"),
        ("body string, messageAttributes map<string,int>", "'messageAttributes' has values"),
        ("body string, delaySeconds string", "'delaySeconds' must be an integer"),
    ],
)
def test_bad_input_fails_before_sending(spark, moto_endpoint, sqs, queue_url, columns, expected):
    schema = spark.createDataFrame([], columns).schema
    df = spark.createDataFrame([tuple([None] * len(schema))], schema)
    text = _write_fails(df, moto_endpoint, queue_url)
    assert expected in text and "Fix:" in text
    assert queue_counts(sqs, queue_url) == (0, 0)


def test_extra_columns_can_be_ignored(spark, moto_endpoint, sqs, queue_url):
    df = spark.createDataFrame([("a", "x"), ("b", "y")], "body string, extra string")
    _write(df, moto_endpoint, queue_url, ignoreExtraColumns="true")
    assert sorted(m["Body"] for m in _receive_all(sqs, queue_url, 2)) == ["a", "b"]


def test_dedupe_attribute_can_be_turned_off(spark, moto_endpoint, sqs, queue_url):
    df = spark.createDataFrame([("a",), ("b",)], "body string")
    _write(df, moto_endpoint, queue_url, dedupeAttribute="false")
    messages = _receive_all(sqs, queue_url, 2)
    assert sorted(m["Body"] for m in messages) == ["a", "b"]
    assert all("MessageAttributes" not in m for m in messages)


def test_fifo_queue_without_group_column_fails(spark, moto_endpoint, sqs, fifo_queue_url):
    df = spark.createDataFrame([("a",)], "body string")
    text = _write_fails(df, moto_endpoint, fifo_queue_url, writeId="w")
    assert "is a FIFO queue" in text and "no 'messageGroupId' column" in text
    assert queue_counts(sqs, fifo_queue_url) == (0, 0)


def test_oversize_row_fails_naming_position_and_size(spark, moto_endpoint, sqs):
    small = sqs.create_queue(
        QueueName=f"small-{uuid.uuid4().hex[:8]}", Attributes={"MaximumMessageSize": "1024"}
    )["QueueUrl"]
    df = spark.createDataFrame([("x" * 2000,), ("fine",)], "body string").coalesce(1)
    text = _write_fails(df, moto_endpoint, small)
    assert "Row 0 (0-based) of partition 0" in text
    assert "larger than the queue's MaximumMessageSize of 1024 bytes" in text
    assert "oversizeDeadLetterQueueUrl" in text
    assert queue_counts(sqs, small) == (0, 0)


def test_oversize_rows_go_to_the_dead_letter_queue(spark, moto_endpoint, sqs, queue_url):
    small = sqs.create_queue(
        QueueName=f"small-{uuid.uuid4().hex[:8]}", Attributes={"MaximumMessageSize": "1024"}
    )["QueueUrl"]
    df = spark.createDataFrame([("x" * 2000,), ("fine",)], "body string")
    _write(df, moto_endpoint, small, oversizeDeadLetterQueueUrl=queue_url)
    assert [m["Body"] for m in _receive_all(sqs, small, 1)] == ["fine"]
    assert [m["Body"] for m in _receive_all(sqs, queue_url, 1)] == ["x" * 2000]


def test_streaming_bad_input_fails_at_query_start(spark, moto_endpoint, sqs, queue_url, tmp_path):
    df = spark.readStream.format("rate").load().select(F.col("value"))
    with pytest.raises(Exception) as failure:
        query = (
            df.writeStream.format("sqs")
            .option("queueUrl", queue_url)
            .option("endpointUrl", moto_endpoint)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
    assert "needs a string column 'body'" in str(failure.value)
    assert queue_counts(sqs, queue_url) == (0, 0)


@pytest.mark.parametrize("fifo", [True, False], ids=["fifo", "standard"])
def test_a_replayed_micro_batch_sends_the_same_ids(spark, moto_endpoint, sqs, tmp_path, fifo):
    """Spark re-runs a batch whose commit it did not record: the sink sends the same
    deduplication ids, so a FIFO queue drops the copies and a standard queue's copies share
    their spark_sqs.dedupeId."""
    name = f"replay-{uuid.uuid4().hex[:8]}" + (".fifo" if fifo else "")
    attributes = {"FifoQueue": "true"} if fifo else {}
    target = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    source_dir, ckpt, metrics = tmp_path / "in", tmp_path / "ckpt", tmp_path / "metrics"
    source_dir.mkdir()
    for f in range(3):
        rows = [json.dumps({"f": f, "n": n}) for n in range(10)]
        # Two identical rows per file: distinct messages all the same.
        rows.append(rows[0])
        (source_dir / f"part-{f}.json").write_text("\n".join(rows) + "\n")

    def run() -> None:
        df = (
            spark.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(str(source_dir))
            .select(F.col("value").alias("body"))
        )
        if fifo:
            df = df.withColumn("messageGroupId", F.get_json_object("body", "$.f"))
        query = (
            df.writeStream.format("sqs")
            .option("queueUrl", target)
            .option("endpointUrl", moto_endpoint)
            .option("metricsLocation", str(metrics))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(240), "the query did not finish"
        finally:
            query.stop()

    run()
    assert sorted(p.name for p in metrics.glob("batch-*.json"))[-1] == "batch-0000000002.json"
    first = json.loads((metrics / "batch-0000000002.json").read_text())["committedAt"]
    # Forget that batch 2 was committed: the restarted query runs it again, same rows.
    (ckpt / "commits" / "2").unlink()
    (ckpt / "commits" / ".2.crc").unlink(missing_ok=True)
    run()
    replay = json.loads((metrics / "batch-0000000002.json").read_text())
    assert replay["committedAt"] > first and replay["sent"] == 11, "batch 2 ran again"

    if fifo:
        messages = _receive_all(sqs, target, 33)
        bodies = [json.loads(m["Body"]) for m in messages]
        assert sorted((b["f"], b["n"]) for b in bodies) == sorted(
            [(f, n) for f in range(3) for n in range(10)] + [(f, 0) for f in range(3)]
        ), "every row once, and the identical rows twice"
        return
    messages = _receive_all(sqs, target, 44)
    ids: dict[tuple[int, int], list[str]] = {}
    for m in messages:
        body = json.loads(m["Body"])
        ids.setdefault((body["f"], body["n"]), []).append(
            m["MessageAttributes"][DEDUPE_ATTRIBUTE]["StringValue"]
        )
    # Files are picked by modification time: find the one batch 2 read, sent twice.
    (again,) = {f for (f, n), sent in ids.items() if n > 0 and len(sent) == 2}
    for f in range(3):
        copies = 2 if f == again else 1
        for n in range(1, 10):
            assert len(ids[(f, n)]) == copies and len(set(ids[(f, n)])) == 1, (f, n)
        # The two identical rows: two ids, each sent once per run of the batch.
        twins = ids[(f, 0)]
        assert len(twins) == 2 * copies and len(set(twins)) == 2, (f, twins)


def test_the_source_drops_a_rewritten_rows_copies_by_the_sinks_attribute(
    spark, moto_endpoint, sqs, queue_url, tmp_path
):
    """A sink write run twice (a retried job) leaves each row twice in a standard queue, with
    one `spark_sqs.dedupeId`; the source with duplicateAttribute delivers each row once."""
    df = spark.createDataFrame([(json.dumps({"n": n}),) for n in range(30)], ["body"])
    _write(df, moto_endpoint, queue_url, writeId="load-1")
    _write(df, moto_endpoint, queue_url, writeId="load-1")
    out = tmp_path / "out"
    stream = sqs_stream(
        spark,
        moto_endpoint,
        queue_url,
        str(tmp_path / "journal"),
        # One receiver: the second copy comes in its receive or a later batch's, after the
        # first copy's acknowledgement (two receivers of one batch cannot see each other's).
        numPartitions=1,
        maxMessagesPerTrigger=20,
        duplicateAttribute=DEDUPE_ATTRIBUTE,
    )
    query = start_query(
        stream, "parquet", tmp_path / "ckpt", trigger={"processingTime": "0 seconds"}, path=out
    )
    try:
        process_all_available(query, timeout=240)
        wait_until(lambda: queue_counts(sqs, queue_url) == (0, 0), 60, "an empty queue")
    finally:
        query.stop()
    numbers = sorted(json.loads(r.body)["n"] for r in spark.read.parquet(str(out)).collect())
    assert numbers == list(range(30)), "each row once though the queue held it twice"
