"""A message that makes every attempt of its batch fail, under a query restarted in a loop the
way a Databricks job retries: poisonMessagePolicy=deadLetter quarantines it and delivers every
other message exactly once; poisonMessagePolicy=fail deletes nothing and says how to release
the batch, and `spark-sqs release` does."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections import Counter
from typing import Any

import pytest

from spark_sqs.cli import main
from tests.helpers import body_numbers, queue_counts, send_numbered, sqs_stream, wait_until

pytestmark = pytest.mark.integration

POISON = 13
BATCH = 8
MAX_ATTEMPTS = 2


class WriteThenFailSink:
    """``foreachBatch``: writes the batch's rows under its batch id (replacing what an earlier
    attempt of that id wrote, as an idempotent sink does), then raises if the marked message is
    among them."""

    def __init__(self) -> None:
        self.written: dict[int, list[int]] = {}
        self.attempts: dict[int, list[list[int]]] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        numbers = body_numbers(df.select("body").collect())
        self.written[batch_id] = numbers
        self.attempts.setdefault(batch_id, []).append(numbers)
        if POISON in numbers:
            raise RuntimeError(f"sink cannot store message {POISON} (injected by the test)")

    def delivered(self) -> Counter:
        return Counter(n for numbers in self.written.values() for n in numbers)


def _dead_letter_queue(sqs: Any, queue_url: str) -> str:
    dlq = sqs.create_queue(QueueName=f"dlq-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    policy = {"deadLetterTargetArn": arn, "maxReceiveCount": 50}
    sqs.set_queue_attributes(QueueUrl=queue_url, Attributes={"RedrivePolicy": json.dumps(policy)})
    return dlq


def _start(spark: Any, endpoint: str, queue_url: str, tmp_path: Any, sink: Any, **options: Any):
    return (
        sqs_stream(
            spark,
            endpoint,
            queue_url,
            str(tmp_path / "journal"),
            numPartitions=2,
            maxMessagesPerTrigger=BATCH,
            maxBatchAttempts=MAX_ATTEMPTS,
            **options,
        )
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )


def _run_until(query: Any, done: Any, timeout: float = 240) -> str | None:
    """Wait until ``done()`` (then stop the query; None) or the query fails (its error)."""
    try:
        wait_until(lambda: not query.isActive or done(), timeout, "the query to finish or fail")
    finally:
        failed = not query.isActive
        query.stop()
    if not failed:
        return None
    error = query.exception()
    assert error is not None, "the query stopped without an error"
    return str(error)


def test_dead_letter_quarantines_the_poison_and_delivers_every_other_message_once(
    spark, moto_endpoint, sqs, queue_url, tmp_path
):
    dlq = _dead_letter_queue(sqs, queue_url)
    send_numbered(sqs, queue_url, 24)
    sink = WriteThenFailSink()
    others = [n for n in range(24) if n != POISON]

    def done() -> bool:
        dead = int(
            sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])[
                "Attributes"
            ]["ApproximateNumberOfMessages"]
        )
        return (
            sorted(sink.delivered()) == others
            and dead >= 1
            and queue_counts(sqs, queue_url) == (0, 0)
        )

    # A failure at full size costs MAX_ATTEMPTS runs; each halving at most two more (the
    # narrowed replay, and the suspect batch that delivers the carried half when the narrowed
    # replay succeeds without the marked message).
    bound = MAX_ATTEMPTS + 2 * math.ceil(math.log2(BATCH))
    restarts = 0
    while True:
        query = _start(
            spark, moto_endpoint, queue_url, tmp_path, sink, poisonMessagePolicy="deadLetter"
        )
        error = _run_until(query, done)
        if error is None:
            break
        assert "sink cannot store message 13" in error, error
        restarts += 1
        assert restarts <= bound, f"still failing after {restarts} restarts"

    # Every other message exactly once; the marked one never reached a committed batch.
    assert sink.delivered() == Counter(others)
    # The marked message is in the dead-letter queue once, saying where it came from.
    got = sqs.receive_message(
        QueueUrl=dlq, MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=1
    )["Messages"]
    assert len(got) == 1
    assert json.loads(got[0]["Body"])["n"] == POISON
    info = json.loads(got[0]["MessageAttributes"]["SparkSqsQuarantine"]["StringValue"])
    assert info["sourceQueue"] == queue_url and info["batchAttempts"] >= MAX_ATTEMPTS
    assert got[0]["MessageAttributes"]["kind"]["StringValue"] == "test", "attributes kept"
    assert queue_counts(sqs, queue_url) == (0, 0)
    print(
        f"deadLetter: {restarts} restarts (bound {bound}), attempts by batch id: "
        f"{ {b: [len(a) for a in attempts] for b, attempts in sink.attempts.items()} }"
    )


class UdfSink:
    """``foreachBatch``: computes a UDF over the batch's rows, in the tasks that read them; the
    UDF raises on the marked message ``poison``, which fails its task (and the retries of it)
    within milliseconds of the rows being yielded. Records what it stored per batch id."""

    def __init__(self, poison: int) -> None:
        from pyspark.sql.functions import udf

        # No type hints: PySpark would try to infer a pandas UDF from them, and warn.
        @udf("int")
        def number(body):
            n = json.loads(body)["n"]
            if n == poison:
                raise ValueError(f"the UDF cannot parse message {n} (injected by the test)")
            return n

        self.number = number
        self.written: dict[int, list[int]] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        self.written[batch_id] = sorted(
            r.n for r in df.select(self.number("body").alias("n")).collect()
        )

    def delivered(self) -> Counter:
        return Counter(n for numbers in self.written.values() for n in numbers)


def _entries(journal: Any) -> dict[str, list[str]]:
    """Each journal batch's entry files (not parts), by batch directory."""
    return {
        d.name: sorted(f.name for f in d.iterdir() if re.fullmatch(r"\d{5,}\.arrow", f.name))
        for d in sorted((journal / "batches").iterdir())
        if (d / "_plan.json").exists()
    }


def test_dead_letter_quarantines_a_message_failing_its_task_before_its_siblings_journal(
    spark, moto_endpoint, sqs, fifo_queue_url, tmp_path
):
    """A UDF fails on the marked message (the first of the queue's one message group) in the
    task that reads it, within milliseconds of every replay. The batch's other receiver is
    long-polling meanwhile (the group is held by the first, so SQS gives it nothing), and Spark
    cancels it before it journals, in every run: no run hands the whole batch to the sink. A
    quarantine that waited for every receiver to journal would wait for ever; the source waits
    maxBatchAttempts more failed attempts, then quarantines, and every other message is
    delivered once."""
    dlq = sqs.create_queue(
        QueueName=f"dlq-{uuid.uuid4().hex[:12]}.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    # Over 100 visible: the first batch plans two receivers (driver/planning.py).
    total = 101
    send_numbered(sqs, fifo_queue_url, total, MessageGroupId="one")
    poison = 0
    sink = UdfSink(poison)
    others = list(range(1, total))

    def done() -> bool:
        return sorted(sink.delivered()) == others and queue_counts(sqs, fifo_queue_url) == (0, 0)

    # Full size costs MAX_ATTEMPTS runs, each halving at most two more, and a receiver that
    # never journals MAX_ATTEMPTS more (docs/operations.md, poison messages).
    bound = 2 * MAX_ATTEMPTS + 2 * math.ceil(math.log2(BATCH))
    restarts = 0
    while True:
        query = _start(
            spark,
            moto_endpoint,
            fifo_queue_url,
            tmp_path,
            sink,
            poisonMessagePolicy="deadLetter",
            deadLetterQueueUrl=dlq,
            waitTimeSeconds=20,
        )
        error = _run_until(query, done)
        if error is None:
            break
        assert "the UDF cannot parse message 0" in error, error
        restarts += 1
        if restarts == 1:
            # What makes this case: the batch has two receivers, only one journaled.
            [(batch, files)] = [(b, f) for b, f in _entries(tmp_path / "journal").items() if f]
            plan = json.loads((tmp_path / "journal" / "batches" / batch / "_plan.json").read_text())
            assert len(plan["receivers"]) == 2 and len(files) == 1, (plan, files)
        assert restarts <= bound, f"still failing after {restarts} restarts (a wedge)"

    assert sink.delivered() == Counter(others)
    got = sqs.receive_message(
        QueueUrl=dlq, MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=1
    )["Messages"]
    assert [json.loads(m["Body"])["n"] for m in got] == [poison]
    print(f"UDF poison, siblings cancelled: {restarts} restarts (bound {bound})")


def test_fail_deletes_nothing_and_names_the_release_command_which_works(
    spark, moto_endpoint, sqs, queue_url, tmp_path
):
    # One batch can hold every message (10-17, the marked 13 among them).
    send_numbered(sqs, queue_url, BATCH, start=10)
    sink = WriteThenFailSink()
    journal = str(tmp_path / "journal")
    errors = []
    for _ in range(MAX_ATTEMPTS + 1):
        query = _start(spark, moto_endpoint, queue_url, tmp_path, sink)
        error = _run_until(query, lambda: False)
        assert error is not None
        errors.append(error)
        # Only batches the sink committed (without the marked message) were deleted.
        committed = {
            n for numbers in sink.written.values() if POISON not in numbers for n in numbers
        }
        assert sum(queue_counts(sqs, queue_url)) == BATCH - len(committed), "nothing deleted"
    assert all("sink cannot store message 13" in e for e in errors[:MAX_ATTEMPTS])
    # The next attempt is refused by the receiver, with what to do.
    last = errors[-1]
    read_by = re.search(r"has been read by (\d+) attempts and none completed", last)
    # Spark retries the refused task (spark.task.maxFailures), and each retry is an attempt.
    assert read_by and int(read_by.group(1)) >= MAX_ATTEMPTS + 1, last
    assert "nothing was deleted" in last
    match = re.search(rf"spark-sqs release --journal {re.escape(journal)} --batch (\d+)", last)
    assert match, last
    batch = int(match.group(1))

    assert (
        main(
            [
                "release",
                "--journal",
                journal,
                "--batch",
                str(batch),
                "--yes",
                "--endpoint-url",
                moto_endpoint,
            ]
        )
        == 0
    )
    held = BATCH - len({n for ns in sink.written.values() if POISON not in ns for n in ns})
    wait_until(lambda: queue_counts(sqs, queue_url)[0] == held, 30, "released messages")

    # The replay of the released batch delivers nothing; the messages come in later batches.
    sink_ok = WriteThenFailSink()
    sink_ok_call = sink_ok.__call__

    def tolerant(df: Any, batch_id: int) -> None:
        try:
            sink_ok_call(df, batch_id)
        except RuntimeError:
            pass  # this run's sink stores the marked message as well

    query = _start(spark, moto_endpoint, queue_url, tmp_path, tolerant)
    stuck = max(sink.attempts)  # the Spark batch id of the stuck batch
    expected = sorted(sink.attempts[stuck][0])
    assert POISON in expected
    assert (
        _run_until(
            query,
            lambda: (
                sorted(sink_ok.delivered()) == expected and queue_counts(sqs, queue_url) == (0, 0)
            ),
        )
        is None
    )
    assert sink_ok.written.get(stuck) == [], "Spark's replay of the released batch is empty"
    assert sink_ok.delivered() == Counter(expected)
