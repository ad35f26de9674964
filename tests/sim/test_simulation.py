"""The deterministic simulation (sim/spark.py) over many seeds: the real driver, receivers,
acknowledger, heartbeat, lease and journal, played by a seeded Spark against the simulated SQS
and journal store. A failing seed prints the one command that replays it.

The faults the simulation found (docs/simulation.md, "What the simulation found") are fixed,
and ``test_the_faults_it_found_stay_fixed`` replays their seeds. One finding is open: in about
one seed in 400, a second query takes the journal over while the owner's heartbeat runs (a
lease finding, no message lost or duplicated); the sweep tolerates only that, by its signature.
"""

from __future__ import annotations

import pytest

from sim.__main__ import replay_command
from sim.spark import Config, run_seed

# About 6-12 seeds/s on the 2-core machine: well under two minutes in all.
SEEDS = 400
KNOWN = "a second query took the journal over"


def _fixed_mode(config: Config) -> None:
    config.change_delete_after_journal = False


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_every_seed_delivers_each_message_exactly_once(fifo: bool) -> None:
    failures, known = [], []
    for seed in range(SEEDS):
        # Restarts may also switch deleteAfterJournal (a stored plan keeps a batch's mode).
        result = run_seed(seed, fifo=fifo)
        if result.ok:
            continue
        headline = [v for v in result.violations if not v.startswith("m")]
        if all(v.startswith(KNOWN) for v in headline):
            known.append(seed)
            continue
        failures.append(
            f"seed {seed}: "
            + " | ".join(result.violations[:4])
            + f"\n  replay: {replay_command(seed, fifo, fixed_mode=False)}"
        )
    assert not failures, "\n".join(failures)
    # The open finding shows up now and then, not everywhere: the sweep still means something.
    assert len(known) < SEEDS // 40, known


def _two_queues(config: Config) -> None:
    config.queues = 2


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_two_queues_with_one_removed_and_added_back_between_runs(fifo: bool) -> None:
    """Messages go to either of two queues; a restart may name one of them only. Besides the
    usual checks, a receipt handle sent to another queue than its own is a violation."""
    failures, known, without = [], [], 0
    for seed in range(SEEDS // 4):
        result = run_seed(seed, fifo=fifo, configure=_two_queues)
        without += result.stats.get("runs_without_a_queue", 0)
        if result.ok:
            continue
        headline = [v for v in result.violations if not v.startswith("m")]
        if all(v.startswith(KNOWN) for v in headline):
            known.append(seed)
            continue
        failures.append(
            f"seed {seed}: "
            + " | ".join(result.violations[:4])
            + f"\n  replay: {replay_command(seed, fifo, queues=2)}"
        )
    assert not failures, "\n".join(failures)
    assert without > SEEDS // 8, "runs that removed a queue are part of the sweep"


def test_a_seed_replays_exactly() -> None:
    first = run_seed(198, trace=True)
    again = run_seed(198, trace=True)
    assert first.trace == again.trace
    assert first.violations == again.violations
    assert first.steps > 100


@pytest.mark.parametrize(
    ("seed", "fifo", "fixed", "signature"),
    [
        # A replayed receiver received anew what a sibling receiver of the batch had journaled.
        (392, False, True, "DUPLICATED within one batch"),
        # FIFO twins, deleteAfterJournal: the loser of part 0 released the winner's messages.
        (198, None, True, "DUPLICATED within one batch"),
        # A restart turned deleteAfterJournal off; the replay ignored the journaled parts.
        (66, None, False, "LOST"),
    ],
)
def test_the_faults_it_found_stay_fixed(
    seed: int, fifo: bool | None, fixed: bool, signature: str
) -> None:
    result = run_seed(seed, fifo=fifo, configure=_fixed_mode if fixed else None)
    assert not any(v.startswith(signature) for v in result.violations), result.violations
