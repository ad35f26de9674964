"""Deletion only after commit, and exact replay from the journal after a failure."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests import helpers

pytestmark = pytest.mark.integration


def _receive_all(sqs: Any, queue_url: str, expected: int, timeout: float) -> list[int]:
    got: dict[str, int] = {}

    def poll() -> bool:
        response = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=300
        )
        for m in response.get("Messages", []):
            got[m["MessageId"]] = json.loads(m["Body"])["n"]
        return len(got) >= expected

    helpers.wait_until(poll, timeout, f"{expected} messages to be receivable again", interval=0)
    return sorted(got.values())


def test_failed_batch_leaves_its_messages_in_the_queue(sqs, queue_url, tmp_path, source):
    helpers.send_numbered(sqs, queue_url, 60)
    seen: dict[int, list[int]] = {}

    def sink(df: Any, batch_id: int) -> None:
        rows = df.collect()
        seen[batch_id] = helpers.body_numbers(rows)
        if rows and len([b for b in seen.values() if b]) == 2:
            raise RuntimeError("sink failure injected by the test")

    query = helpers.start_query(
        source(numPartitions=2, maxMessagesPerTrigger=20, visibilityTimeout=4),
        sink,
        tmp_path / "ckpt",
    )
    with pytest.raises(Exception, match="sink failure injected"):
        query.awaitTermination(240)
    nonempty = [n for n in seen.values() if n]
    assert len(nonempty) == 2
    first, failed = nonempty
    assert len(first) == 20 and len(failed) == 20

    # The committed batch was deleted; the failed batch's messages were not. Once their
    # visibility runs out they can be received again, with everything never read. (Made to run
    # out now: after a batch slower than a third of the timeout, receivers extend what they
    # journal by 15 minutes, so waiting would depend on this machine's speed.)
    helpers.expire_visibility(queue_url)
    remaining = _receive_all(sqs, queue_url, 40, timeout=120)
    assert remaining == sorted(set(range(60)) - set(first))
    assert set(failed) <= set(remaining)


def test_restart_replays_the_same_messages_and_sink_gets_each_once(
    spark, sqs, queue_url, tmp_path, source
):
    helpers.send_numbered(sqs, queue_url, 90)
    journal, checkpoint, out = tmp_path / "journal", tmp_path / "ckpt", tmp_path / "out"
    attempts: dict[int, list[list[int]]] = {}

    def write(df: Any, batch_id: int, fail_on_second: bool) -> None:
        rows = df.collect()
        numbers = helpers.body_numbers(rows)
        attempts.setdefault(batch_id, []).append(numbers)
        if fail_on_second and numbers and sum(1 for a in attempts.values() if a[0]) == 2:
            raise RuntimeError("sink failure injected by the test")
        # An idempotent sink: one directory per Spark batch id, overwritten on replay.
        df.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    def run(fail: bool) -> Any:
        return (
            source(
                journal=journal, numPartitions=3, maxMessagesPerTrigger=30, visibilityTimeout=120
            )
            .writeStream.foreachBatch(lambda df, bid: write(df, bid, fail))
            .option("checkpointLocation", str(checkpoint))
            .start()
        )

    query = run(fail=True)
    with pytest.raises(Exception, match="sink failure injected"):
        query.awaitTermination(240)
    failed_batch = max(attempts)
    failed_numbers = attempts[failed_batch][0]
    assert len(failed_numbers) == 30
    # Journaled but not acknowledged: still in flight in SQS, still in the journal.
    assert list((journal / "batches").glob("*/*.arrow"))

    query = run(fail=False)
    helpers.drain_and_stop(query, sqs, queue_url, timeout=240)

    # The replayed batch is exactly what the failed attempt saw.
    assert attempts[failed_batch][1] == failed_numbers
    rows = spark.read.parquet(str(out)).collect()
    assert helpers.body_numbers(rows) == list(range(90))
    assert len({r.messageId for r in rows}) == 90


def test_delete_on_commit_false_never_deletes(spark, sqs, queue_url, tmp_path, source):
    helpers.send_numbered(sqs, queue_url, 15)
    out = tmp_path / "out"
    query = helpers.start_query(
        source(deleteOnCommit="false", visibilityTimeout=300),
        "parquet",
        tmp_path / "ckpt",
        path=str(out),
    )
    try:
        helpers.process_all_available(query, timeout=240)
    finally:
        query.stop()
    assert helpers.body_numbers(spark.read.parquet(str(out)).collect()) == list(range(15))
    # Read, committed and acknowledged, but still in the queue (in flight until the timeout).
    assert helpers.queue_counts(sqs, queue_url) == (0, 15)
    assert not list((tmp_path / "journal" / "batches").glob("*/*.arrow"))


@pytest.mark.parametrize("delete_after_journal", ["false", "true"])
def test_new_checkpoint_with_a_used_journal_delivers_its_uncommitted_messages(
    spark, sqs, queue_url, tmp_path, delete_after_journal, source
):
    """The checkpoint is deleted while a journaled batch was never committed: a query on a new
    checkpoint with the same journal delivers those messages too, once (with
    deleteAfterJournal they exist nowhere but in the journal)."""
    helpers.send_numbered(sqs, queue_url, 40)
    journal, out = tmp_path / "journal", tmp_path / "out"

    def failing(df: Any, batch_id: int) -> None:
        if df.count():
            raise RuntimeError("sink failure injected by the test")

    first = helpers.start_query(
        source(journal=journal, maxMessagesPerTrigger=25, deleteAfterJournal=delete_after_journal),
        failing,
        tmp_path / "ckpt-old",
    )
    with pytest.raises(Exception, match="sink failure injected"):
        first.awaitTermination(240)
    assert list((journal / "batches").glob("*/*.arrow"))

    second = source(journal=journal, maxMessagesPerTrigger=25)
    helpers.drain_to_parquet(second, out, tmp_path / "ckpt-new", sqs, queue_url, timeout=240)
    assert helpers.body_numbers(spark.read.parquet(str(out)).collect()) == list(range(40))
