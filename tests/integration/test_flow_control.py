"""Admission control, Trigger.AvailableNow, backlog in progress, min/max trigger delay, counters."""

from __future__ import annotations

import json
import time
from typing import Any

import pyspark
import pytest

from spark_sqs.journal import Journal
from tests import helpers

pytestmark = pytest.mark.integration

SPARK_4_2 = tuple(int(p) for p in pyspark.__version__.split(".")[:2]) >= (4, 2)
needs_4_2 = pytest.mark.skipif(
    not SPARK_4_2, reason="read limits, AvailableNow and reportLatestOffset need Spark 4.2+"
)


def test_max_messages_per_trigger_bounds_every_batch_and_counters_are_recorded(
    spark, sqs, queue_url, tmp_path, source
):
    helpers.send_numbered(sqs, queue_url, 1000)
    out, journal = tmp_path / "out", tmp_path / "journal"
    df = source(journal=journal, maxMessagesPerTrigger=100)
    query = helpers.drain_to_parquet(df, out, tmp_path / "ckpt", sqs, queue_url, timeout=300)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 1000 and max(sizes) <= 100, sizes
    assert helpers.body_numbers(spark.read.parquet(str(out)).collect()) == list(range(1000))

    # Per-batch counters, readable by a program from the journal.
    metrics = Journal(str(journal)).metrics.read()
    assert sum(m["journaled"] for m in metrics) == 1000
    assert sum(m["deleted"] for m in metrics) == 1000
    assert all(m["deleteFailures"] == 0 and m["duplicatesDropped"] == 0 for m in metrics)
    assert all(m["received"] == m["journaled"] for m in metrics)


def test_batches_that_fill_max_in_flight_are_deleted_by_acknowledge_only_batches(
    spark, sqs, queue_url, tmp_path, source
):
    """maxInFlightMessages = maxMessagesPerTrigger: a full batch leaves no room for the next
    to receive. The next batch's tasks delete it and receive nothing (an empty micro-batch),
    and the batch after it receives again: the driver deletes only the last one."""
    helpers.send_numbered(sqs, queue_url, 300)
    out, journal = tmp_path / "out", tmp_path / "journal"
    df = source(journal=journal, maxMessagesPerTrigger=100, maxInFlightMessages=100)
    query = helpers.drain_to_parquet(df, out, tmp_path / "ckpt", sqs, queue_url, timeout=300)
    assert helpers.body_numbers(spark.read.parquet(str(out)).collect()) == list(range(300))
    rows = [p["numInputRows"] for p in query.recentProgress]
    assert max(rows) <= 100, rows
    metrics = {m["batch"]: m for m in Journal(str(journal)).metrics.read()}
    full = sorted(b for b, m in metrics.items() if m["journaled"])
    assert sum(metrics[b]["journaled"] for b in full) == 300
    assert sum(m["deleted"] for m in metrics.values()) == 300
    # Every full batch but the last was deleted by the receivers of the empty batch after it.
    for batch in full[:-1]:
        assert metrics[batch].get("acknowledgedBy") == batch + 1, metrics[batch]
        assert metrics[batch + 1]["journaled"] == 0, metrics[batch + 1]


def test_delete_after_journal_batches_that_fill_max_in_flight_are_followed_by_full_batches(
    spark, sqs, queue_url, tmp_path, source
):
    """deleteAfterJournal, maxInFlightMessages = maxMessagesPerTrigger: a committed batch's
    messages were deleted as they were journaled, so it does not hold the next batch back. No
    empty (acknowledge-only) batch comes between the batches that carry messages."""
    helpers.send_numbered(sqs, queue_url, 300)
    out, journal = tmp_path / "out", tmp_path / "journal"
    df = source(
        journal=journal,
        maxMessagesPerTrigger=100,
        maxInFlightMessages=100,
        deleteAfterJournal="true",
    )
    query = helpers.drain_to_parquet(df, out, tmp_path / "ckpt", sqs, queue_url, timeout=300)
    assert helpers.body_numbers(spark.read.parquet(str(out)).collect()) == list(range(300))
    assert max(p["numInputRows"] for p in query.recentProgress) <= 100
    metrics = {m["batch"]: m for m in Journal(str(journal)).metrics.read()}
    full = sorted(b for b, m in metrics.items() if m["journaled"])
    assert sum(metrics[b]["journaled"] for b in full) == 300
    empty = [b for b, m in metrics.items() if not m["journaled"] and full[0] < b < full[-1]]
    assert empty == [], metrics


@needs_4_2
def test_available_now_drains_what_is_there_acknowledges_and_terminates(
    spark, sqs, queue_url, tmp_path, source
):
    helpers.send_numbered(sqs, queue_url, 2000)
    out = tmp_path / "out"
    query = (
        source(maxMessagesPerTrigger=500)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300), "an AvailableNow query must terminate by itself"
    assert query.exception() is None
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 500, sizes
    assert helpers.body_numbers(spark.read.parquet(str(out)).collect()) == list(range(2000))
    # The last batch was acknowledged before the query ended.
    assert helpers.queue_counts(sqs, queue_url) == (0, 0)


@needs_4_2
def test_backlog_appears_in_last_progress(sqs, queue_url, tmp_path, source):
    helpers.send_numbered(sqs, queue_url, 50)
    query = (
        source(maxMessagesPerTrigger=10, numPartitions=1)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        progress = helpers.wait_until(
            lambda: next(
                (
                    p
                    for p in query.recentProgress
                    if p["numInputRows"] and p["sources"][0].get("latestOffset")
                ),
                None,
            ),
            180,
            "a progress report with the backlog",
        )
    finally:
        query.stop()
    latest = json.loads(progress["sources"][0]["latestOffset"])
    assert set(latest) >= {"batch", "visibleMessages", "inFlightMessages", "delayedMessages"}
    assert 0 < latest["visibleMessages"] + latest["inFlightMessages"] <= 50


def test_min_messages_waits_for_more_but_not_longer_than_max_trigger_delay(
    sqs, queue_url, tmp_path, source
):
    delay = 15.0
    seen: list[tuple[float, int]] = []

    def sink(df: Any, batch_id: int) -> None:
        count = df.count()
        if count:
            seen.append((time.monotonic(), count))

    started = time.monotonic()
    query = helpers.start_query(
        source(minMessagesPerTrigger=30, maxTriggerDelay=delay, queuePollInterval=0.2),
        sink,
        tmp_path / "ckpt",
    )
    try:
        helpers.send_numbered(sqs, queue_url, 5)
        helpers.wait_until(lambda: seen, 120, "the small batch after maxTriggerDelay")
        # Fewer than minMessagesPerTrigger: held back until maxTriggerDelay since the source
        # started (no batch ran before).
        assert seen[0][1] == 5
        assert seen[0][0] - started >= delay

        # Enough messages: the next batch does not wait for the delay.
        helpers.send_numbered(sqs, queue_url, 40, start=5)
        helpers.wait_until(lambda: len(seen) >= 2, 120, "the next batch")
        assert seen[1][0] - seen[0][0] < delay
        helpers.wait_until(lambda: sum(c for _, c in seen) == 45, 120, "every message")
    finally:
        query.stop()
