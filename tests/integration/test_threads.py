"""A batch ``df.write.format("sqs")`` from a Python thread other than the one that registered
the source: classic PySpark looks the source up through the thread's active JVM session, which
a new thread lacks, so the write fails with DATA_SOURCE_NOT_FOUND (this test fails, and the
docs must change, once PySpark no longer does that); ``spark_sqs.register(spark)`` in the
thread makes the write work."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import spark_sqs
from spark_sqs.sqs.client import queue_counts

pytestmark = pytest.mark.integration


def _in_a_thread(work: Any) -> BaseException | None:
    failures: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(300)
    assert not thread.is_alive()
    return failures[0] if failures else None


def test_a_batch_write_from_another_thread_needs_register(spark, moto_endpoint, sqs, queue_url):
    df = spark.createDataFrame([(f"message {n}",) for n in range(5)], "body string")

    def write() -> None:
        (
            df.write.format("sqs")
            .option("queueUrl", queue_url)
            .option("endpointUrl", moto_endpoint)
            .mode("append")
            .save()
        )

    failure = _in_a_thread(write)
    assert failure is not None and "DATA_SOURCE_NOT_FOUND" in str(failure), failure
    assert queue_counts(sqs, queue_url) == (0, 0)

    def register_then_write() -> None:
        spark_sqs.register(spark)
        write()

    assert _in_a_thread(register_then_write) is None
    assert queue_counts(sqs, queue_url) == (5, 0)
    # The main thread still writes as before.
    write()
    assert queue_counts(sqs, queue_url) == (10, 0)
