"""The driver's planning of a batch that is replayed after a crash (``Coordinator.plan`` of
spark_sqs/driver/coordinator.py), on a real journal and a fake SQS client; test_coordinator.py
drives the coordinator through Spark's call orders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_sqs.driver.coordinator import Coordinator
from spark_sqs.driver.state import StateMarkers
from spark_sqs.executor.receiver import read_partition
from spark_sqs.journal import BatchPlan, Journal, ReceiverPlan
from spark_sqs.schema import messages_to_table
from tests.factories import QUEUE_URL, make_options, sqs_message
from tests.fakes import FakeSqs


@pytest.fixture
def driver(tmp_path: Path) -> Any:
    options = make_options(str(tmp_path / "journal"), numPartitions="2", deleteAfterJournal="true")
    journal = Journal(options.journal_location, options)
    state = Coordinator(options, FakeSqs(), QUEUE_URL, journal)
    yield state, journal
    state.close()


def test_a_replay_drops_what_an_attempt_killed_mid_loop_journaled_in_parts(driver: Any) -> None:
    state, journal = driver
    StateMarkers(journal).advance(planned=1)
    # The killed run planned batch 1 with receivers 0, 1 and 3 (numPartitions was 4 then);
    # receivers 1 and 3 journaled receive calls as parts (maybe not yet deleted, so SQS hands
    # them out again once their visibility times out) and died.
    journal.plans.write(BatchPlan(1, tuple(ReceiverPlan(r, 4) for r in (0, 1, 3))))
    earlier = [sqs_message(n) for n in range(4)]
    journal.entries.write_part(1, 1, 0, messages_to_table(earlier[:2], QUEUE_URL))
    journal.entries.write_part(1, 1, 1, messages_to_table(earlier[2:3], QUEUE_URL))
    journal.entries.write_part(1, 3, 0, messages_to_table(earlier[3:], QUEUE_URL))
    restarted = Coordinator(state.options, FakeSqs(), QUEUE_URL, journal)

    parts = restarted.plan({"batch": 0}, {"batch": 1})
    restarted.close()

    assert [p.receiver for p in parts] == [0, 1, 3]
    # The replay of receiver 0 gets them again from SQS: each is already in another
    # receiver's parts (read by key), and journaling it again would deliver it twice.
    again = [sqs_message(n, receive_count=2) for n in range(4)]
    rows = [
        row
        for batch in read_partition(parts[0], client_factory=lambda: FakeSqs(script=[again, []]))
        for row in batch.column("messageId").to_pylist()
    ]
    assert rows == []


def test_a_batch_logged_before_a_restart_is_planned_within_max_in_flight(tmp_path: Path) -> None:
    """Found by the simulation (docs/simulation.md, seed 170): Spark logged batch 2's end, the
    driver died before planning it, and the restart planned it with maxMessagesPerTrigger,
    though batch 1's messages were still unacknowledged."""
    options = make_options(
        str(tmp_path / "journal"),
        numPartitions="2",
        maxMessagesPerTrigger="100",
        maxInFlightMessages="5",
    )
    journal = Journal(options.journal_location, options)
    # The run's latestOffset numbered batches 1 and 2; Spark logged both.
    StateMarkers(journal).advance(planned=2)
    died = Coordinator(options, FakeSqs(), QUEUE_URL, journal)
    died.plan({"batch": 0}, {"batch": 1})
    journal.entries.write(1, 0, messages_to_table([sqs_message(n) for n in range(3)], QUEUE_URL))
    died.close()

    restarted = Coordinator(options, FakeSqs(), QUEUE_URL, journal)
    restarted.plan({"batch": 1}, {"batch": 2})
    restarted.close()

    plan = journal.plans.read(2)
    assert plan is not None
    # Batch 1's three messages stay in flight until batch 2's receivers delete them.
    assert sum(r.limit for r in plan.receivers) == 5 - 3
    assert list(plan.acknowledges) == [1]


def test_a_replay_after_a_restart_with_new_options_keeps_its_plan_s_identity(
    tmp_path: Path,
) -> None:
    """A plan's id tells a batch's own attempts from those of a plan made again by a deposed
    driver (``Batches.status`` answers REMOVED to an attempt of another plan). Spark's replay
    after a restart, with other options, must carry the stored plan's id: an attempt with a
    new id would take its own live batch for removed and journal nothing."""
    journal_dir = str(tmp_path / "journal")
    options = make_options(journal_dir, numPartitions="2")
    journal = Journal(options.journal_location, options)
    StateMarkers(journal).advance(planned=1)
    died = Coordinator(options, FakeSqs(), QUEUE_URL, journal)
    first = died.plan({"batch": 0}, {"batch": 1})
    died.close()
    stored = journal.plans.read(1)
    assert stored is not None and stored.plan_id is not None

    restarted = Coordinator(
        make_options(journal_dir, numPartitions="4"), FakeSqs(), QUEUE_URL, journal
    )
    again = restarted.plan({"batch": 0}, {"batch": 1})
    restarted.close()

    assert [p.receiver for p in again] == [p.receiver for p in first]
    assert {p.plan_id for p in again} == {stored.plan_id}
    delivered = [
        row
        for batch in read_partition(
            again[0], client_factory=lambda: FakeSqs(script=[[sqs_message(7)], []])
        )
        for row in batch.column("messageId").to_pylist()
    ]
    assert delivered == [sqs_message(7)["MessageId"]]
    assert journal.entries.read(1, again[0].receiver) is not None


def test_a_new_plan_names_the_identities_of_the_pending_batches_plans(tmp_path: Path) -> None:
    """A receiver trusts what a pending batch holds only while that batch's plan is the one its
    own plan names (executor/filtering.py): a plan made again by a deposed driver, after
    another query adopted and removed the batch, holds what nobody delivers. The driver names
    the plans it found at its start and those it planned since."""
    options = make_options(str(tmp_path / "journal"), numPartitions="2")
    journal = Journal(options.journal_location, options)
    StateMarkers(journal).advance(planned=3)
    died = Coordinator(options, FakeSqs(), QUEUE_URL, journal)
    died.plan({"batch": 0}, {"batch": 1})
    died.close()

    restarted = Coordinator(options, FakeSqs(), QUEUE_URL, journal)
    restarted.plan({"batch": 1}, {"batch": 2})
    restarted.plan({"batch": 2}, {"batch": 3})
    restarted.close()

    first, second, third = (journal.plans.read(b) for b in (1, 2, 3))
    assert first is not None and second is not None and third is not None
    assert second.pending_plans == ((1, first.plan_id),)
    assert third.pending == (1, 2, 3)
    assert third.pending_plans == ((1, first.plan_id), (2, second.plan_id))
    assert third.pending_plan(2) == second.plan_id and third.pending_plan(3) is None
    # As stored: what the receivers read.
    assert BatchPlan.from_json(third.to_json()) == third
