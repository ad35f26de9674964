"""``duplicateWindow``: a copy that a standard queue hands out after its message was deleted is
dropped, through real streaming queries against the moto server.

moto never delivers such a copy, so the server is made to (it runs in this process): the first
delete of each message puts a copy back, with the same MessageId and a new receipt handle, as
SQS does when a delete reached one of its servers and another server still holds a copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spark_sqs.journal import Journal
from tests.helpers import (
    CopiesAfterDelete,
    body_numbers,
    drain_and_stop,
    send_numbered,
    sqs_stream,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def ghosts(moto_endpoint: str) -> Iterator[CopiesAfterDelete]:
    with CopiesAfterDelete() as installed:
        yield installed


def _run(spark, endpoint, sqs, queue_url, tmp_path, ghosts, **options) -> tuple[list[int], Any]:
    numbers = send_numbered(sqs, queue_url, 40)
    out, checkpoint, journal = tmp_path / "out", tmp_path / "ckpt", tmp_path / "journal"
    df = sqs_stream(
        spark,
        endpoint,
        queue_url,
        str(journal),
        numPartitions=2,
        maxMessagesPerTrigger=20,
        waitTimeSeconds=1,
        queuePollInterval=0.2,
        **options,
    )
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0 seconds")
        .start()
    )
    # Every message deleted once (so every copy handed out) and the queue empty again: the
    # copies were received and deleted too.
    drain_and_stop(query, sqs, queue_url, timeout=240, until=lambda: ghosts.count() == 40)
    rows = spark.read.parquet(str(out)).collect()
    assert numbers == list(range(40))
    return body_numbers(rows), Journal(str(journal))


def test_copies_after_a_clean_acknowledgement_are_dropped(
    spark, moto_endpoint, sqs, queue_url, tmp_path, ghosts
):
    numbers, journal = _run(spark, moto_endpoint, sqs, queue_url, tmp_path, ghosts)
    assert numbers == list(range(40)), "every message exactly once, no copy"
    counted = sum(m.get("duplicateWindowDropped", 0) for m in journal.metrics.read())
    assert counted == 40, "each copy counted in the batch counters"
    # The window's segments hold digests, not ids or bodies.
    segments = journal.store.list("window")
    assert segments and all(k.endswith(".arrow") for k in segments)


def test_without_the_window_the_copies_reach_the_sink(
    spark, moto_endpoint, sqs, queue_url, tmp_path, ghosts
):
    numbers, journal = _run(
        spark, moto_endpoint, sqs, queue_url, tmp_path, ghosts, duplicateWindow=0
    )
    # What the window prevents: with it off every copy is delivered again.
    assert sorted(set(numbers)) == list(range(40))
    assert len(numbers) == 80
    assert not journal.store.list("window")
