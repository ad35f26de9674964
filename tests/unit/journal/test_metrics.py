"""The journal's counters of acknowledged batches (journal/metrics.py): held by the acknowledged
markers (journal/state.py), and an earlier version's ``metrics/`` files, on both stores."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spark_sqs.errors import JournalOutcomeUnknown
from spark_sqs.journal import Journal, JournalState
from spark_sqs.journal.state import ACKED_MARKERS_KEPT


def _acknowledge(journal: Journal, batch: int, known: int, **counters: Any) -> None:
    journal.state.write(
        JournalState(0, batch),
        known=JournalState(0, known),
        metrics={"batch": batch, **counters},
    )


def test_the_counters_are_in_the_acknowledged_markers_and_the_newest_are_kept(
    journal_location: str,
) -> None:
    journal = Journal(journal_location)
    journal.state.read()
    total = ACKED_MARKERS_KEPT + 5
    for batch in range(1, total + 1):
        _acknowledge(journal, batch, batch - 1, deleted=batch * 2)

    metrics = journal.metrics.read()
    assert [m["batch"] for m in metrics] == list(range(6, total + 1))
    assert metrics[-1]["deleted"] == total * 2
    # Older markers went by key as newer ones were written: no metrics/ objects, no LIST.
    acked = [k for k in journal.store.list("state") if k.startswith("state/acked-")]
    assert len(acked) == ACKED_MARKERS_KEPT
    assert journal.store.list("metrics") == []
    # The newest marker is still the state, and names the dedupe records as before.
    assert journal.state.read().acked_batch == total
    body = json.loads(journal.store.read(f"state/acked-{total:012d}") or b"{}")
    assert body["dedupe"] == [] and body["metrics"]["batch"] == total


def test_a_retried_marker_create_keeps_the_first_counters(journal_location: str) -> None:
    """The create of an acknowledged marker whose answer was lost (it landed), retried with
    other counters: the first marker stands, its counters with it."""
    journal = Journal(journal_location)
    journal.state.read()
    create = journal.store.create

    def lost_answer(key: str, data: bytes) -> bool:
        create(key, data)
        raise JournalOutcomeUnknown(f"lost answer for {key}")

    journal.store.create = lost_answer  # type: ignore[method-assign]
    with pytest.raises(JournalOutcomeUnknown):
        _acknowledge(journal, 1, 0, deleted=5)
    journal.store.create = create  # type: ignore[method-assign]
    _acknowledge(journal, 1, 0, deleted=7)

    assert [m["deleted"] for m in journal.metrics.read()] == [5]
    assert Journal(journal_location).state.read().acked_batch == 1


def test_an_earlier_version_s_metrics_files_are_read_and_then_removed(
    journal_location: str,
) -> None:
    """Upgrade: the previous version wrote ``metrics/<N>.json`` and kept one empty-bodied or
    dedupe-only marker; its counters are read beside the new markers' until the kept markers
    are all newer, then the sweep removes them by one LIST."""
    journal = Journal(journal_location)
    for batch in (1, 2, 3):
        journal.store.put(f"metrics/{batch:012d}.json", json.dumps({"batch": batch}).encode())
    journal.store.create("state/acked-000000000003", json.dumps({"dedupe": []}).encode())
    assert journal.state.read().acked_batch == 3

    _acknowledge(journal, 4, 3, deleted=1)
    assert [m["batch"] for m in journal.metrics.read()] == [1, 2, 3, 4]
    # Nothing is old enough yet: the files stay, and the next sweep lists again.
    assert journal.metrics.collect_legacy(4) is True
    assert len(journal.store.list("metrics")) == 3

    for batch in range(5, ACKED_MARKERS_KEPT + 3):
        _acknowledge(journal, batch, batch - 1)
    assert journal.metrics.collect_legacy(ACKED_MARKERS_KEPT + 2) is True
    assert journal.store.list("metrics") == ["metrics/000000000003.json"]
    kept = journal.metrics.read()
    assert [m["batch"] for m in kept][:2] == [3, 4] and len(kept) == ACKED_MARKERS_KEPT
    # The earlier version's marker of batch 3 holds no counters: its file is what is read.
    assert kept[0] == {"batch": 3}
    _acknowledge(journal, ACKED_MARKERS_KEPT + 3, ACKED_MARKERS_KEPT + 2)
    assert journal.metrics.collect_legacy(ACKED_MARKERS_KEPT + 3) is False
    assert journal.store.list("metrics") == []


def test_markers_a_crash_left_below_the_kept_ones_go_with_the_next_marker(
    journal_location: str,
) -> None:
    """A driver that died between a marker's create and its predecessor's delete: the next
    start lists the markers anyway (``State.read``) and the next acknowledged marker removes
    the stale ones by key."""
    journal = Journal(journal_location)
    journal.store.create("state/acked-000000000001", b"{}")
    journal.store.create(f"state/acked-{ACKED_MARKERS_KEPT + 1:012d}", b"{}")
    restarted = Journal(journal_location)
    assert restarted.state.read().acked_batch == ACKED_MARKERS_KEPT + 1
    _acknowledge(restarted, ACKED_MARKERS_KEPT + 2, ACKED_MARKERS_KEPT + 1)
    assert [int(k.rsplit("-", 1)[1]) for k in journal.store.list("state")] == [
        ACKED_MARKERS_KEPT + 1,
        ACKED_MARKERS_KEPT + 2,
    ]
