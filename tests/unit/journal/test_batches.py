"""A batch's life in the journal: live, retired, removed (journal/batches.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_sqs.journal import (
    LIVE,
    REMOVED,
    RETIRED_STATUS,
    BatchPlan,
    Journal,
    LocalStore,
    ReceiverPlan,
)
from tests.factories import make_options, pairs, table_of
from tests.fakes import HookedStore


@pytest.fixture
def location(tmp_path: Path) -> str:
    # A directory that does not exist yet: the journal creates it.
    return str(tmp_path / "checkpoints" / "journal")


@pytest.fixture
def journal(location: str) -> Journal:
    return Journal(location, make_options(location))


def test_remove_batch(journal: Journal) -> None:
    journal.entries.write(1, 0, table_of(0))
    journal.entries.write(1, 1, table_of(1))
    journal.entries.write(2, 0, table_of(2))

    journal.batches.remove(1)

    assert journal.batches.list() == [2]
    assert not journal.entries.has_journaled(1, 0) and not journal.entries.has_journaled(1, 1)
    assert journal.entries.read(1, 0) is None
    assert pairs(journal.entries.batch_receipts(1, [0, 1])) == []
    assert journal.entries.read(2, 0) is not None
    # Removing again (a repeated acknowledgement) is harmless.
    journal.batches.remove(1)
    journal.batches.remove(99)
    assert journal.batches.list() == [2]


def test_batch_status_live_retired_removed(journal: Journal) -> None:
    from spark_sqs.driver.planning import new_plan

    assert journal.batches.status(4) == REMOVED, "never planned"
    # Files without a plan (a removal a crash cut short) make no batch live.
    journal.entries.write(4, 0, table_of(0))
    assert journal.batches.status(4) == REMOVED and journal.batches.is_finished(4)
    assert journal.batches.live_receivers(4) is None

    journal.plans.write(new_plan(4, 10, 2))
    assert journal.batches.status(4) == LIVE and not journal.batches.is_finished(4)
    assert journal.batches.live_receivers(4) == (0, 1)

    journal.batches.retire(4)
    journal.batches.retire(4)  # a retried adoption: harmless
    assert journal.batches.status(4) == RETIRED_STATUS and journal.batches.is_finished(4)
    # Retired, it stays live until the batch that adopts it has its copies.
    assert journal.batches.live_receivers(4) == (0, 1)

    journal.batches.remove(4)
    assert journal.batches.status(4) == REMOVED and journal.batches.is_finished(4)
    assert journal.batches.live_receivers(4) is None


def test_a_batch_of_carried_messages_is_live_by_its_carry_record(journal: Journal) -> None:
    from spark_sqs.journal.poison import CARRY

    doc = {"from": 3, "step": 1, "receivers": [0, 2]}
    journal.store.create(f"batches/000000000009/{CARRY}", json.dumps(doc).encode())
    assert journal.batches.live_receivers(9) == (0, 2)
    journal.batches.remove(9)
    assert journal.batches.live_receivers(9) is None


def test_remove_batch_deletes_the_plan_before_anything_else(location: str) -> None:
    """A batch is live while its plan (or carry or release record) exists: removal deletes
    those first, so a removal cut short leaves garbage, never a batch that looks live with
    part of its entries gone."""
    from spark_sqs.driver.planning import new_plan
    from spark_sqs.journal.poison import CARRY, RELEASED

    store = HookedStore(LocalStore(location))
    journal = Journal(location, make_options(location), store=store)
    journal.plans.write(new_plan(3, 10, 2))
    journal.entries.write(3, 0, table_of(0))
    journal.entries.write_part(3, 1, 0, table_of(1))
    journal.entries.write_extension(3, 0, 1_700_000_900)
    journal.batches.retire(3)
    for name in (CARRY, RELEASED):
        journal.store.create(f"batches/000000000003/{name}", b"{}")
    files = journal.store.list("batches/000000000003")
    store.calls.clear()

    journal.batches.remove(3)

    deleted = [k for m, k in store.calls if m == "delete"]
    liveness = {f"batches/000000000003/{n}" for n in ("_plan.json", CARRY, RELEASED)}
    assert deleted[0] == "batches/000000000003/_plan.json"
    assert set(deleted[:3]) == liveness
    assert set(deleted[3:]) == set(files) - liveness
    assert journal.store.list("batches") == []


def test_a_removal_cut_short_after_the_plan_leaves_a_batch_that_is_not_live(
    location: str,
) -> None:
    from spark_sqs.driver.planning import new_plan

    def die_at_entries(method: str, key: str) -> None:
        if method == "delete" and key.endswith(".arrow"):
            raise OSError("the driver died (injected)")

    journal = Journal(location, make_options(location))
    journal.plans.write(new_plan(5, 10, 2))
    journal.entries.write(5, 0, table_of(0))
    journal.entries.write(5, 1, table_of(1))
    dying = Journal(location, store=HookedStore(LocalStore(location), before=die_at_entries))
    with pytest.raises(OSError, match="injected"):
        dying.batches.remove(5)

    assert journal.batches.status(5) == REMOVED
    assert journal.batches.live_receivers(5) is None
    assert journal.batches.list() == [5], "garbage, for the next start to remove"
    journal.batches.remove(5)
    assert journal.batches.list() == []


def test_a_batch_retired_and_removed_between_the_status_reads_is_never_live(
    journal_location: str,
) -> None:
    """Found by the simulation (seed 2214 --unkind all): a deleteAfterJournal receiver checked
    its batch's status after journaling a part, stalled inside the check while another query
    retired, adopted (without that part) and removed the batch, and read "live" from a plan
    read before the removal and a retirement marker read after it: it deleted a message
    nobody delivered. A batch retired and removed right after the first status read is not
    live (the retirement marker is read first)."""
    options = make_options(journal_location, region="us-east-1")
    journal = Journal(journal_location, options)
    journal.plans.write(BatchPlan(2, (ReceiverPlan(0, 5),)))
    done: list[bool] = []

    def retire_and_remove(method: str, key: str) -> None:
        if method == "read" and not done:
            done.append(True)
            journal.batches.retire(2)
            journal.batches.remove(2)

    stalled = Journal(
        journal_location, options, store=HookedStore(journal.store, after=retire_and_remove)
    )
    assert stalled.batches.status(2) != "live"
    assert done, "the removal ran between the reads"
