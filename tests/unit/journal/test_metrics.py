"""The journal's counters of acknowledged batches (journal/metrics.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_sqs.journal import Journal
from tests.factories import make_options


@pytest.fixture
def location(tmp_path: Path) -> str:
    # A directory that does not exist yet: the journal creates it.
    return str(tmp_path / "checkpoints" / "journal")


@pytest.fixture
def journal(location: str) -> Journal:
    return Journal(location, make_options(location))


def test_metrics_are_pruned_to_the_newest_every_few_batches(journal: Journal) -> None:
    for batch in range(1, 26):
        journal.metrics.write(batch, {"batch": batch}, keep=5, prune_every=10)
    # Pruned at batch 20 to 16-20; 21-25 are written since.
    assert [m["batch"] for m in journal.metrics.read()] == list(range(16, 26))
