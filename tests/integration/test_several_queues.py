"""Several queues in one stream (queueUrl with a comma-separated list), end to end on the moto
server: every message of every queue exactly once with its queue in the queueUrl column, and
a restart that drops a queue from the options while a batch holding its messages is logged
but not committed."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_sqs.journal import Journal
from tests import helpers

pytestmark = pytest.mark.integration


@pytest.fixture
def second_queue_url(sqs: Any) -> Iterator[str]:
    yield from helpers.temporary_queue(sqs)


def _by_queue(rows: list[Any]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for row in rows:
        out.setdefault(row.queueUrl, []).append(json.loads(row.body)["n"])
    return {q: sorted(ns) for q, ns in out.items()}


def test_two_queues_every_message_exactly_once_with_its_queue(
    spark, sqs, queue_url, second_queue_url, tmp_path, source
):
    first = helpers.send_numbered(sqs, queue_url, 150)
    second = helpers.send_numbered(sqs, second_queue_url, 60, start=1000)
    out = tmp_path / "out"
    df = source(
        queue=f"{queue_url},{second_queue_url}",
        numPartitions=3,
        maxMessagesPerTrigger=80,
        waitTimeSeconds=1,
    )
    query = helpers.start_query(
        df, "parquet", tmp_path / "ckpt", trigger={"processingTime": "0 seconds"}, path=str(out)
    )
    # The last batch is acknowledged by the next latestOffset: both queues end empty.
    helpers.drain_and_stop(
        query,
        sqs,
        queue_url,
        timeout=300,
        until=lambda: helpers.queue_counts(sqs, second_queue_url) == (0, 0),
    )
    progress = [p for p in query.recentProgress if p["numInputRows"]]

    rows = spark.read.parquet(str(out)).collect()
    assert _by_queue(rows) == {queue_url: first, second_queue_url: second}
    assert len({r.messageId for r in rows}) == len(rows) == 210
    # The backlog in progress is per queue and summed.
    latest = progress[0]["sources"][0]["latestOffset"]
    latest = json.loads(latest) if isinstance(latest, str) else latest
    assert set(latest["queues"]) == {queue_url, second_queue_url}
    assert latest["visibleMessages"] == sum(q["visibleMessages"] for q in latest["queues"].values())


class FailingOnceSink:
    """``foreachBatch`` sink keeping each batch's rows by batch id (a replay replaces the first
    attempt, as an idempotent sink does). The first batch holding a row of ``fail_on`` is
    collected (so its rows are journaled) and then fails the query before Spark commits it."""

    def __init__(self, fail_on: str) -> None:
        self.fail_on = fail_on
        self.failed_batch: int | None = None
        self.batches: dict[int, list[tuple[str, int]]] = {}
        self._lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [(r.queueUrl, json.loads(r.body)["n"]) for r in df.collect()]
        with self._lock:
            if self.failed_batch is None and any(q == self.fail_on for q, _ in rows):
                self.failed_batch = batch_id
                raise RuntimeError(f"sink failure in batch {batch_id} (test)")
            self.batches[batch_id] = rows

    def by_queue(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        with self._lock:
            for rows in self.batches.values():
                for queue, n in rows:
                    out.setdefault(queue, []).append(n)
        return {q: sorted(ns) for q, ns in out.items()}


def test_a_logged_batch_replays_and_acknowledges_a_queue_removed_from_the_options(
    sqs, queue_url, second_queue_url, tmp_path, source
):
    """Run 1 reads two queues; the batch holding the second queue's messages is journaled and
    in Spark's offset log, but its sink fails before the commit. Run 2 names only the first
    queue: the replay of that batch still runs its stored plan (receivers of the removed queue
    replay their entries), and its messages are deleted from the removed queue."""
    first = helpers.send_numbered(sqs, queue_url, 40)
    second = helpers.send_numbered(sqs, second_queue_url, 6, start=1000)
    journal = str(tmp_path / "journal")
    checkpoint = str(tmp_path / "ckpt")
    common = {
        "numPartitions": 4,
        "maxMessagesPerTrigger": 100,
        "waitTimeSeconds": 1,
        "visibilityTimeout": 30,
    }
    sink = FailingOnceSink(fail_on=second_queue_url)

    def start(queues: str) -> Any:
        df = source(queue=queues, journal=journal, **common)
        return helpers.start_query(df, sink, checkpoint, trigger={"processingTime": "0 seconds"})

    run1 = start(f"{queue_url},{second_queue_url}")
    try:
        with pytest.raises(Exception, match="sink failure"):
            run1.awaitTermination(300)
    finally:
        run1.stop()
    failed = sink.failed_batch
    assert failed is not None
    # The batch is logged, not committed; its plan recorded the removed queue's receivers.
    assert (Path(checkpoint) / "offsets" / str(failed)).exists()
    assert not (Path(checkpoint) / "commits" / str(failed)).exists()
    plan_batches = Journal(journal).batches.list()
    plans = [Journal(journal).plans.read(b) for b in plan_batches]
    assert any(r.queue == second_queue_url for p in plans if p for r in p.receivers)

    # The removed queue is acknowledged from the replayed batch's entries.
    helpers.drain_and_stop(
        start(queue_url),
        sqs,
        queue_url,
        timeout=300,
        until=lambda: helpers.queue_counts(sqs, second_queue_url) == (0, 0),
    )

    assert sink.by_queue() == {queue_url: first, second_queue_url: second}
    assert failed in sink.batches, "the failed batch was replayed"
