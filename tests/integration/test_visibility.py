"""The heartbeat keeps a long batch invisible; redeliveries after a stop are dropped."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from tests import helpers

pytestmark = pytest.mark.integration

VISIBILITY = 4


def test_slow_sink_keeps_messages_invisible_to_other_consumers(sqs, queue_url, tmp_path, source):
    helpers.send_numbered(sqs, queue_url, 40)
    in_sink = threading.Event()
    release = threading.Event()
    written: list[list[int]] = []

    def slow_sink(df: Any, batch_id: int) -> None:
        rows = df.collect()
        if not rows:
            return
        in_sink.set()
        # The batch takes three visibility timeouts; the test thread lets it go after
        # checking, for that long, that nobody else can receive its messages.
        release.wait(120)
        written.append(sorted(json.loads(r.body)["n"] for r in rows))

    query = helpers.start_query(
        source(visibilityTimeout=VISIBILITY, maxMessagesPerTrigger=40, numPartitions=2),
        slow_sink,
        tmp_path / "ckpt",
    )
    try:
        assert in_sink.wait(180), "the first batch never reached the sink"
        stolen = []
        until = time.monotonic() + 3 * VISIBILITY
        while time.monotonic() < until:
            # A competing consumer, long-polling for 1 s at a time.
            response = sqs.receive_message(
                QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=0
            )
            stolen.extend(m["MessageId"] for m in response.get("Messages", []))
        release.set()
        helpers.process_all_available(query, timeout=120)
        helpers.wait_until(
            lambda: helpers.queue_counts(sqs, queue_url) == (0, 0), 60, "an empty queue"
        )
    finally:
        release.set()
        query.stop()
    assert stolen == [], "a message of the running batch became visible to another consumer"
    assert sorted(n for batch in written for n in batch) == list(range(40))


def test_stop_after_batch_then_restart_after_visibility_timeout_has_no_duplicates(
    spark, sqs, queue_url, tmp_path, source
):
    helpers.send_numbered(sqs, queue_url, 30)
    journal, checkpoint, out = tmp_path / "journal", tmp_path / "ckpt", tmp_path / "out"

    def start(trigger: str) -> Any:
        return (
            source(journal=journal, visibilityTimeout=VISIBILITY, maxMessagesPerTrigger=30)
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=trigger)
            .start()
        )

    # One batch takes everything; there is no next trigger, so nothing acknowledges it before
    # query.stop() (Spark does not call commit() or stop() on the source then).
    query = start(helpers.ONE_BATCH_TRIGGER)
    helpers.wait_until(
        lambda: sum(p["numInputRows"] for p in query.recentProgress) == 30,
        180,
        "the first batch to complete",
    )
    query.stop()
    assert helpers.queue_counts(sqs, queue_url) == (0, 30), "the stopped batch is still in flight"

    # The visibility timeout passes: SQS makes the messages visible again and the journaled
    # receipt handles go stale. (Made to happen at once: whether the heartbeat extended the
    # batch before the stop depends on how fast this machine ran it.)
    assert helpers.expire_visibility(queue_url) == 30
    assert helpers.queue_counts(sqs, queue_url)[0] == 30, "messages visible again"
    # Another consumer receives them meanwhile, so the old handles are stale (as in SQS, the
    # delete with them succeeds but does nothing).
    for _ in range(3):
        sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0)

    query = start("0 seconds")
    helpers.drain_and_stop(query, sqs, queue_url, timeout=180)
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(json.loads(r.body)["n"] for r in rows) == list(range(30))
    assert len({r.messageId for r in rows}) == 30
