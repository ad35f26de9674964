"""``duplicateWindow``: a copy that a standard queue hands out after its message was deleted is
dropped, through real streaming queries against the moto server.

moto never delivers such a copy, so the server is made to (it runs in this process): the first
delete of each message puts a copy back, with the same MessageId and a new receipt handle, as
SQS does when a delete reached one of its servers and another server still holds a copy.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from spark_sqs.journal import Journal
from tests.helpers import body_numbers, drain_and_stop, send_numbered, sqs_stream

pytestmark = pytest.mark.integration


class GhostCopies:
    """Server side: each message deleted for the first time is handed out once more."""

    def __init__(self) -> None:
        self.ghosted: set[str] = set()
        self._lock = threading.Lock()

    def __enter__(self) -> GhostCopies:
        from moto.sqs.models import Queue

        self._original = original = Queue.delete_message
        ghosts = self

        def delete_message(queue: Any, receipt_handle: str) -> None:
            found = [m for m in queue._messages if m.receipt_handle == receipt_handle]
            original(queue, receipt_handle)
            for message in found:
                if message in queue._messages:
                    continue  # a stale handle: nothing was deleted
                with ghosts._lock:
                    if message.id in ghosts.ghosted:
                        continue
                    ghosts.ghosted.add(message.id)
                ghost = copy.copy(message)
                ghost._old_receipt_handles = []
                ghost.receipt_handle = None
                ghost.visible_at = 0.0
                queue._messages.append(ghost)

        Queue.delete_message = delete_message
        return self

    def __exit__(self, *exc: object) -> None:
        from moto.sqs.models import Queue

        Queue.delete_message = self._original

    def count(self) -> int:
        with self._lock:
            return len(self.ghosted)


@pytest.fixture
def ghosts(moto_endpoint: str) -> Iterator[GhostCopies]:
    with GhostCopies() as installed:
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
