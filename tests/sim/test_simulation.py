"""The deterministic simulation (sim/spark.py) over many seeds: the real driver, receivers,
acknowledger, heartbeat, lease and journal, played by a seeded Spark against the simulated SQS
and journal store. A failing seed prints the one command that replays it.

Two faults of the protocol that the simulation found are still open (docs/simulation.md,
"What the simulation found"): a message journaled twice within one batch (a replayed receiver
that receives anew does not drop what its sibling receivers of the batch journaled; FIFO twins
under deleteAfterJournal whose loser releases the winner's messages), and the loss when a
restart turns deleteAfterJournal off before a replay. The sweep tolerates only the first kind,
by its signature; ``test_the_open_faults_are_still_found`` fails once they are fixed, so that
this file is updated then.
"""

from __future__ import annotations

import pytest

from sim.__main__ import replay_command
from sim.spark import Config, run_seed

# About 12 seeds/s on standard queues and 9 on FIFO on the 2-core machine: ~70 s in all.
SEEDS = 400
KNOWN = "DUPLICATED within one batch"


def _fixed_mode(config: Config) -> None:
    config.change_delete_after_journal = False


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_every_seed_delivers_each_message_exactly_once(fifo: bool) -> None:
    failures, known = [], []
    for seed in range(SEEDS):
        result = run_seed(seed, fifo=fifo, configure=_fixed_mode)
        if result.ok:
            continue
        headline = [v for v in result.violations if not v.startswith("m")]
        if all(v.startswith(KNOWN) for v in headline):
            known.append(seed)
            continue
        failures.append(
            f"seed {seed}: "
            + " | ".join(result.violations[:4])
            + f"\n  replay: {replay_command(seed, fifo, fixed_mode=True)}"
        )
    assert not failures, "\n".join(failures)
    # The open fault shows up now and then, not everywhere: the sweep still means something.
    assert len(known) < SEEDS // 10, known


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
def test_the_open_faults_are_still_found(
    seed: int, fifo: bool | None, fixed: bool, signature: str
) -> None:
    result = run_seed(seed, fifo=fifo, configure=_fixed_mode if fixed else None)
    assert any(v.startswith(signature) for v in result.violations), (
        f"seed {seed} no longer shows {signature!r}: if the fault was fixed, update this test "
        f"and docs/simulation.md; violations now: {result.violations}"
    )
