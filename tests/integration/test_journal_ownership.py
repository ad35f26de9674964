"""A journal belongs to one query at a time: a second live query on it stops at start with an
error naming ``journalLocation``; a stopped query's journal is taken over at once."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests import helpers

pytestmark = pytest.mark.integration


def test_a_second_query_on_a_journal_in_use_fails_naming_it(
    spark: Any, moto_endpoint: str, sqs: Any, queue_url: str, tmp_path: Path, source: Any
) -> None:
    journal = str(tmp_path / "journal")
    # Heartbeats (and lease renewals) every second: the second query knows within 2 s.
    options = {"visibilityTimeout": "10", "heartbeatInterval": "1"}
    helpers.send_numbered(sqs, queue_url, 10)
    name = f"owner_{uuid.uuid4().hex}"
    first = helpers.start_query(
        source(journal=journal, **options),
        "memory",
        tmp_path / "ckpt-1",
        queryName=name,
    )
    try:
        helpers.process_all_available(first, timeout=180)

        failure = helpers.start_and_fail(
            spark,
            {
                "queueUrl": queue_url,
                "endpointUrl": moto_endpoint,
                "journalLocation": journal,
                **options,
            },
            str(tmp_path / "ckpt-2"),
        )
        assert f"journalLocation {journal}" in failure
        assert "Fix: stop the other query" in failure
        # The first query was not disturbed.
        helpers.send_numbered(sqs, queue_url, 5, start=10)
        helpers.process_all_available(first, timeout=180)
        assert first.isActive
    finally:
        helpers.drain_and_stop(first, sqs, queue_url, timeout=180)
    assert spark.table(name).count() == 15

    # Stopped (SIGTERM releases the lease): the next query on the journal starts at once.
    helpers.send_numbered(sqs, queue_url, 3, start=15)
    again = (
        source(journal=journal, **options)
        .writeStream.format("memory")
        .queryName(f"{name}_again")
        # The memory sink cannot restart from a checkpoint: a new one, on the same journal.
        .option("checkpointLocation", str(tmp_path / "ckpt-3"))
        .start()
    )
    helpers.drain_and_stop(again, sqs, queue_url, timeout=180)
    assert spark.table(f"{name}_again").count() == 3
