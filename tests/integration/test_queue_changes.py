"""The queue changes under a running query: deleted (the query stops with an error naming the
queue; what was journaled survives and is settled by the next run) or purged (documented: the
query keeps running; messages sent afterwards are delivered once)."""

from __future__ import annotations

from typing import Any

import pytest

from spark_sqs.journal import Journal
from tests import helpers

pytestmark = pytest.mark.integration


def start(spark: Any, endpoint: str, queue_url: str, tmp: Any, sink: helpers.HoldingSink) -> Any:
    df = helpers.sqs_stream(spark, endpoint, queue_url, str(tmp / "journal"), numPartitions=1)
    return helpers.start_query(df, sink, tmp / "ckpt")


def start_held(spark: Any, endpoint: str, sqs: Any, queue_url: str, tmp: Any) -> Any:
    """Ten messages, and a one-receiver query whose first batch waits in its sink: returns the
    query, the sink and that batch's numbers."""
    helpers.send_numbered(sqs, queue_url, 10)
    sink = helpers.HoldingSink()
    query = start(spark, endpoint, queue_url, tmp, sink)
    if not sink.holding.wait(180):
        query.stop()
        raise AssertionError("no batch reached the sink")
    return query, sink, sink.held_numbers()


def test_queue_deleted_mid_stream_stops_the_query_and_loses_nothing_journaled(
    spark, moto_endpoint, sqs, queue_url, tmp_path
):
    query, sink, held = start_held(spark, moto_endpoint, sqs, queue_url, tmp_path)
    try:
        journal = Journal(str(tmp_path / "journal"))
        (batch,) = journal.batches.list()
        sqs.delete_queue(QueueUrl=queue_url)
        sink.release()
        # Spark commits the held batch; deleting its messages then finds no queue.
        with pytest.raises(Exception) as info:
            query.awaitTermination(180)
            pytest.fail("the query should have stopped")
    finally:
        sink.release()
        query.stop()
    message = str(info.value)
    assert f"SQS queue {queue_url} does not exist" in message, message[:2000]
    assert "Fix: check 'queueUrl'/'queueName'" in message
    # The held batch reached the sink once, and its journal entries were kept (not acknowledged).
    assert sink.numbers() == held
    assert journal.batches.list() == [batch]
    assert sum(
        r.rows
        for r in journal.entries.batch_receipts(batch, journal.batches.live_receivers(batch) or ())
    ) == len(held)

    # The queue comes back (same name, so same URL): the next run settles the journaled batch
    # without delivering it again, then reads the new messages.
    assert sqs.create_queue(QueueName=queue_url.rsplit("/", 1)[1])["QueueUrl"] == queue_url
    new = helpers.send_numbered(sqs, queue_url, 5, start=100)
    query = start(spark, moto_endpoint, queue_url, tmp_path, sink)
    try:
        helpers.process_all_available(query, timeout=180)
        helpers.wait_until(
            lambda: helpers.queue_counts(sqs, queue_url) == (0, 0), 60, "an empty queue"
        )
        helpers.wait_until(lambda: not journal.batches.list(), 60, "the journal to be settled")
    finally:
        query.stop()
    assert sink.numbers() == held + new, "each received message exactly once"


def test_queue_purged_mid_stream_keeps_running_and_delivers_later_messages_once(
    spark, moto_endpoint, sqs, queue_url, tmp_path
):
    query, sink, held = start_held(spark, moto_endpoint, sqs, queue_url, tmp_path)
    try:
        # Removes every message, also the held batch's (in flight): their deletes then fail
        # with invalid receipt handles, which the source records and moves past.
        sqs.purge_queue(QueueUrl=queue_url)
        sink.release()
        new = helpers.send_numbered(sqs, queue_url, 10, start=100)
        helpers.wait_until(lambda: set(new) <= set(sink.numbers()), 180, "the messages sent after")
        helpers.wait_until(
            lambda: helpers.queue_counts(sqs, queue_url) == (0, 0), 60, "an empty queue"
        )
        helpers.wait_until(
            lambda: not Journal(str(tmp_path / "journal")).batches.list(), 60, "a settled journal"
        )
        assert query.isActive and query.exception() is None
    finally:
        sink.release()
        query.stop()
    # Messages still queued at the purge are gone (that is what a purge does); everything
    # received is delivered exactly once.
    assert sink.numbers() == held + new
