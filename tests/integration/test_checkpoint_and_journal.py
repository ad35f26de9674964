"""The checkpoint and the journal must describe one stream, and the store must honour
create-if-absent: through Spark on moto, with a sink that writes every batch and then skips a
batch id it already has (Iceberg's streaming write, a foreachBatch that checks the id), the
sink that loses or doubles messages when a batch number is reused."""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_sqs.sqs.client import queue_counts
from tests.helpers import (
    process_all_available,
    send_numbered,
    sqs_stream,
    start_and_fail,
    start_query,
    wait_until,
)

pytestmark = pytest.mark.integration


class WriteThenSkipSink:
    """Writes every batch it is given, then keeps it only if its batch id is new."""

    def __init__(self) -> None:
        self.committed: dict[int, list[int]] = {}
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        numbers = [json.loads(r.body)["n"] for r in df.select("body").collect()]
        with self.lock:
            self.committed.setdefault(batch_id, numbers)

    def numbers(self) -> list[int]:
        with self.lock:
            return sorted(n for rows in self.committed.values() for n in rows)


def _other_location(journal_location: str) -> str:
    """Another, empty journal location on the same store."""
    if journal_location.startswith("s3://"):
        bucket_and_prefix, query = journal_location.split("?", 1)
        return f"{bucket_and_prefix.rsplit('/', 1)[0]}/{uuid.uuid4().hex}?{query}"
    return journal_location + "-elsewhere"


def _removed(path: str) -> bool:
    shutil.rmtree(path, ignore_errors=True)
    return not Path(path).exists()


def _run(
    spark: Any, endpoint: str, sqs: Any, queue_url: str, journal: str, checkpoint: Path, sink: Any
) -> None:
    df = sqs_stream(spark, endpoint, queue_url, journal, maxMessagesPerTrigger=5, numPartitions=2)
    query = start_query(df, sink, checkpoint)
    try:
        process_all_available(query, timeout=240)
    finally:
        query.stop()


def test_a_checkpoint_run_against_a_moved_journal_is_refused_and_the_right_one_goes_on(
    spark: Any, moto_endpoint: str, sqs: Any, queue_url: str, journal_location: str, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    sink = WriteThenSkipSink()
    send_numbered(sqs, queue_url, 12)
    _run(spark, moto_endpoint, sqs, queue_url, journal_location, checkpoint, sink)
    assert sink.numbers() == list(range(12))
    send_numbered(sqs, queue_url, 4, start=12)
    before = queue_counts(sqs, queue_url)

    # The user moves journalLocation (or deletes the journal) and keeps the checkpoint.
    moved = _other_location(journal_location)
    error = start_and_fail(
        spark,
        {
            "queueUrl": queue_url,
            "endpointUrl": moto_endpoint,
            "journalLocation": moved,
            "maxMessagesPerTrigger": "5",
        },
        str(checkpoint),
    )
    assert "does not match journalLocation" in error, error[:3000]
    assert moved.split("?")[0] in error
    assert "point journalLocation back" in error and "new checkpointLocation" in error
    # Nothing was received, acknowledged or deleted.
    assert queue_counts(sqs, queue_url) == before

    # Pointed back at its journal, the query goes on: nothing lost, nothing twice.
    send_numbered(sqs, queue_url, 4, start=16)
    _run(spark, moto_endpoint, sqs, queue_url, journal_location, checkpoint, sink)
    assert sink.numbers() == list(range(20))


def _lease_released(journal: Path) -> bool:
    records = sorted((journal / "lease").glob("*.json"))
    return bool(records) and json.loads(records[-1].read_text()).get("released") is True


def test_a_deleted_journal_under_a_kept_checkpoint_is_refused(
    spark: Any, moto_endpoint: str, sqs: Any, queue_url: str, tmp_path: Path
) -> None:
    journal = str(tmp_path / "journal")
    checkpoint = tmp_path / "checkpoint"
    sink = WriteThenSkipSink()
    send_numbered(sqs, queue_url, 6)
    _run(spark, moto_endpoint, sqs, queue_url, journal, checkpoint, sink)
    # query.stop() can return before the source's own stop has released the lease: the user
    # deletes a journal whose query has stopped, not one that is still writing its last record.
    wait_until(lambda: _lease_released(Path(journal)), 60, "the stopped query's lease release")
    kept = tmp_path / "journal-copy"
    shutil.copytree(journal, kept)
    shutil.rmtree(journal)
    before = queue_counts(sqs, queue_url)

    error = start_and_fail(
        spark,
        {"queueUrl": queue_url, "endpointUrl": moto_endpoint, "journalLocation": journal},
        str(checkpoint),
    )
    assert "does not match journalLocation" in error, error[:3000]
    assert queue_counts(sqs, queue_url) == before

    # What the refused run created (its lease, for one) goes; the refused run's process may
    # still be writing its release record.
    wait_until(lambda: _removed(journal), 60, "the refused run's journal files to be removed")
    shutil.copytree(kept, journal)
    send_numbered(sqs, queue_url, 4, start=6)
    _run(spark, moto_endpoint, sqs, queue_url, journal, checkpoint, sink)
    assert sink.numbers() == list(range(10))


# -- a store that accepts If-None-Match and ignores it ---------------------------------------


@pytest.fixture(scope="module")
def lying_s3_endpoint(moto_endpoint: str) -> Iterator[str]:
    """An S3-compatible endpoint that ignores conditional writes: moto's S3 (the same in-memory
    store the test server uses) behind a middleware that drops the If-None-Match header, as
    some S3-compatible products do."""
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    app = DomainDispatcherApplication(create_backend_app)

    def ignoring_conditions(environ: dict[str, Any], start_response: Any) -> Any:
        environ.pop("HTTP_IF_NONE_MATCH", None)
        return app(environ, start_response)

    server = make_server("127.0.0.1", 0, ignoring_conditions, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_port}"
    server.shutdown()


def test_a_store_that_ignores_conditional_writes_is_refused_at_start(
    spark: Any, moto_endpoint: str, sqs: Any, s3: Any, queue_url: str, tmp_path: Path,
    lying_s3_endpoint: str,
) -> None:  # fmt: skip
    try:
        s3.create_bucket(Bucket="journals")
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    journal = f"s3://journals/{uuid.uuid4().hex}?endpoint_override={lying_s3_endpoint}&scheme=http"
    send_numbered(sqs, queue_url, 3)

    error = start_and_fail(
        spark,
        {"queueUrl": queue_url, "endpointUrl": moto_endpoint, "journalLocation": journal},
        str(tmp_path / "checkpoint"),
    )

    assert "does not honour create-if-absent" in error, error[:3000]
    assert journal.split("?")[0] in error and "AWS S3" in error
    assert queue_counts(sqs, queue_url) == (3, 0), "nothing received"
