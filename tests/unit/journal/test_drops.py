"""The journal's drop sets (journal/drops.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_sqs.errors import JournalError
from spark_sqs.journal import Journal
from tests.factories import make_options


@pytest.fixture
def location(tmp_path: Path) -> str:
    # A directory that does not exist yet: the journal creates it.
    return str(tmp_path / "checkpoints" / "journal")


@pytest.fixture
def journal(location: str) -> Journal:
    return Journal(location, make_options(location))


def test_drop_sets_of_batches_before_the_oldest_pending_one_are_collected(
    journal: Journal,
) -> None:
    from spark_sqs.driver.planning import new_plan
    from spark_sqs.journal import drops

    done = journal.drops.write(frozenset({"a", "b"}), 1)
    replayed = journal.drops.write(frozenset({"c"}), 2)  # a replay's, named by no plan
    pending = journal.drops.write(frozenset({"a", "b"}), 3)  # same ids, its own object
    # Drop sets an earlier version wrote (no batch in the name): one a pending plan names.
    legacy_named = journal.drops.write(frozenset({"d"}))
    legacy_unnamed = journal.drops.write(frozenset({"e"}))
    journal.plans.write(new_plan(4, 10, 1, drops=legacy_named))
    assert pending != done and done is not None and done.startswith("000000000001-")

    assert journal.drops.collect(oldest_pending=3) == 3

    assert journal.store.list("drops") == sorted(
        [f"drops/{pending}.arrow", f"drops/{legacy_named}.arrow"]
    )
    drops._DROPS_CACHE.clear()
    assert journal.drops.read(pending) == {"a", "b"}
    assert journal.drops.read(legacy_named) == {"d"}
    for gone in (done, replayed, legacy_unnamed):
        with pytest.raises(JournalError, match="missing"):
            journal.drops.read(gone)
    assert journal.drops.collect(oldest_pending=3) == 0


def test_the_drop_set_cache_keeps_the_newest_sets_only(journal: Journal) -> None:
    from spark_sqs.journal import drops

    drops._DROPS_CACHE.clear()
    digests = [
        journal.drops.write(frozenset({f"m{batch}-{i}" for i in range(50)}), batch)
        for batch in range(1, 201)
    ]
    # A driver writes one per batch: 200 batches, the newest 8 kept.
    assert len(drops._DROPS_CACHE) == drops._DROPS_CACHE.max_sets
    assert journal.drops.read(digests[-1]) == {f"m200-{i}" for i in range(50)}
    # An older one is read from the journal again (and cached in place of the oldest).
    assert journal.drops.read(digests[0]) == {f"m1-{i}" for i in range(50)}
    assert len(drops._DROPS_CACHE) == drops._DROPS_CACHE.max_sets

    bounded = drops._DropsCache(sets=8, ids=120)
    for n in range(10):
        bounded.put(f"d{n}", frozenset(f"{n}-{i}" for i in range(50)))
    assert (len(bounded), bounded.ids) == (2, 100)
    bounded.put("huge", frozenset(str(i) for i in range(500)))
    assert (len(bounded), bounded.ids) == (1, 500)  # the newest set is always kept
    assert bounded.get("huge") is not None and bounded.get("d9") is None
