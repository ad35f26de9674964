"""Micro-batches end once their receivers have caught up with the queue, whatever the producer's
batching: through Spark on moto, observed in the batches' contents and metrics."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from spark_sqs.journal import Journal
from tests import helpers

pytestmark = pytest.mark.integration

# What ends a receiver that has caught up (executor/receiving.py); never the time budget or the
# share of maxMessagesPerTrigger, the outer limits.
CAUGHT_UP = {"empty receive", "caught up", "long poll waited", "visible when planned"}


class BatchesSink:
    """``foreachBatch`` sink: the body numbers of each batch, by batch id."""

    def __init__(self) -> None:
        self.batches: dict[int, list[int]] = {}
        self._lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        numbers = [json.loads(r.body)["n"] for r in df.select("body").collect()]
        with self._lock:
            self.batches[batch_id] = numbers

    def with_rows(self) -> dict[int, list[int]]:
        with self._lock:
            return {b: rows for b, rows in self.batches.items() if rows}


def test_a_batching_producer_at_a_low_rate_gets_batches_that_end_once_caught_up(
    spark, sqs, queue_url, tmp_path, source
):
    """A producer sends ``SendMessageBatch`` of 10 every 0.5 s (20 msg/s), as AWS recommends.
    Each long poll that waits for the next burst gets it whole (never a short answer), so only
    the long poll's wait and the count the driver saw tell a receiver it has caught up: without
    them the receiver that is last to stop gets every burst and runs out the time budget (30 s
    with the defaults). The producer runs until the query has delivered 4 batches with rows,
    then stops: every message arrives once, in batches each of which holds fewer than what was
    sent, and no receiver stopped at the time budget or its share."""
    journal = tmp_path / "journal"
    sink = BatchesSink()
    query = helpers.start_query(source(journal=journal), sink, tmp_path / "ckpt")
    stop = threading.Event()
    sent: list[int] = []

    def produce() -> None:
        while not stop.is_set() and len(sent) < 4000:
            sent.extend(helpers.send_numbered(sqs, queue_url, 10, start=len(sent)))
            stop.wait(0.5)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        helpers.wait_until(lambda: len(sink.with_rows()) >= 4, 240, "4 batches with rows")
    finally:
        stop.set()
        producer.join(30)
    try:
        helpers.wait_until(
            lambda: sorted(n for rows in sink.with_rows().values() for n in rows) == sent,
            120,
            "every message sent",
        )
        # The last batch is acknowledged (its metrics written) by a trigger that finds the
        # queue empty.
        helpers.wait_until(
            lambda: sum(m["journaled"] for m in Journal(str(journal)).metrics.read()) == len(sent),
            120,
            "every batch acknowledged",
        )
    finally:
        query.stop()

    batches = sink.with_rows()
    numbers = [n for rows in batches.values() for n in rows]
    assert sorted(numbers) == sent and len(numbers) == len(set(numbers))
    assert all(len(rows) < len(sent) for rows in batches.values()), {
        b: len(rows) for b, rows in batches.items()
    }
    metrics = {m["batch"]: m for m in Journal(str(journal)).metrics.read()}
    stops: dict[str, int] = {}
    for m in metrics.values():
        for reason, count in m["receiveStops"].items():
            stops[reason] = stops.get(reason, 0) + count
    # Every receiver of every acknowledged batch said why it stopped: it had caught up.
    assert set(stops) <= CAUGHT_UP, stops
    assert sum(stops.values()) == sum(m["receivers"] for m in metrics.values()), metrics
