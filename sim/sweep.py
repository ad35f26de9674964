"""Many seeds at once, over worker processes. Runs on: the simulator's processes only.

One seed runs in one process on one core (its actors take turns holding one baton), so a sweep
spreads its seeds over ``jobs`` worker processes (``SIM_JOBS``, default: the machine's cores, at
most 2). A seed's history depends on its number alone, so where it runs changes nothing; the
results come back in seed order.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from sim.spark import OPT_IN, UNKIND, Config, Result, run_seed

CHUNK = 20  # seeds per task handed to a worker: small enough to balance, large enough to be cheap
# Variant.poison_faults: the runs with faults that failures on the poison message may add, as
# many as the final drain allows for them (sim/spark.py ``_drain``).
POISON_RUNS = 40


def default_jobs() -> int:
    configured = os.environ.get("SIM_JOBS")
    if configured:
        return max(1, int(configured))
    return max(1, min(2, os.cpu_count() or 1))


@dataclass(frozen=True)
class Variant:
    """What a sweep changes in every seed's drawn Config (picklable, for the workers)."""

    fixed_delete_mode: bool = False  # restarts keep the first run's deleteAfterJournal
    queues: int = 1  # several queues in one stream; a restart may drop one
    poison: bool = False  # poisonMessagePolicy=deadLetter and a message the sink rejects
    # Dimensions of the unkind world (sim/spark.py UNKIND), drawn per seed (Config.draw_unkind).
    unkind: frozenset[str] = frozenset()
    max_bytes: bool = False  # byte limits of a few messages (maxBytesPerReceiver/-Trigger)
    # The journal store's fault rate in every seed (half before, half after the effect: an
    # unknown outcome), instead of the drawn one (none in about half the seeds).
    store_faults: float | None = None
    # Poison (implies ``poison``): each run the poison message fails adds a run with the seed's
    # faults (Config.poison_runs), so narrowing and quarantine meet them.
    poison_faults: bool = False
    # The planned markers kept (Config.markers_kept; None: the library's), so that markers go
    # within a seed's few batches.
    markers_kept: int | None = None

    def __call__(self, config: Config) -> None:
        if self.fixed_delete_mode:
            config.change_delete_after_journal = False
        config.queues = self.queues
        config.poison = self.poison or self.poison_faults
        if self.poison_faults:
            config.poison_runs = POISON_RUNS
        config.max_bytes = self.max_bytes
        if self.store_faults is not None:
            config.store_faults = self.store_faults
        if self.unkind:
            config.draw_unkind(self.unkind)
        if self.markers_kept is not None:
            config.markers_kept = self.markers_kept


def parse_unkind(text: str | None) -> frozenset[str]:
    """``--unkind``: "all", or dimension names separated by commas (sim/spark.py UNKIND), or
    both: "all,lapses" adds a dimension ``all`` leaves out (sim/spark.py OPT_IN)."""
    if not text:
        return frozenset()
    if text == "all":
        return frozenset(UNKIND)
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    if "all" in names:
        names = (names - {"all"}) | frozenset(UNKIND)
    unknown = names - set(UNKIND) - set(OPT_IN)
    if unknown:
        raise ValueError(
            f"unknown unkind dimensions {sorted(unknown)}; known: all, {UNKIND + OPT_IN}"
        )
    return names


def _run(seed: int, fifo: bool | None, variant: Variant) -> Result:
    return run_seed(seed, fifo=fifo, configure=variant)


def _run_chunk(args: tuple[list[int], bool | None, Variant]) -> list[Result]:
    seeds, fifo, variant = args
    return [_run(seed, fifo, variant) for seed in seeds]


def sweep(
    seeds: Iterable[int],
    *,
    fifo: bool | None = None,
    fixed_delete_mode: bool = False,
    queues: int = 1,
    poison: bool = False,
    unkind: frozenset[str] = frozenset(),
    jobs: int | None = None,
    max_bytes: bool = False,
    poison_faults: bool = False,
    markers_kept: int | None = None,
) -> Iterator[Result]:
    """Run ``seeds`` (without traces), yielding each result in seed order."""
    variant = Variant(
        fixed_delete_mode,
        queues,
        poison,
        frozenset(unkind),
        max_bytes,
        poison_faults=poison_faults,
        markers_kept=markers_kept,
    )
    seeds = list(seeds)
    jobs = default_jobs() if jobs is None else jobs
    if jobs <= 1 or len(seeds) <= CHUNK:
        for seed in seeds:
            yield _run(seed, fifo, variant)
        return
    chunks = [(seeds[i : i + CHUNK], fifo, variant) for i in range(0, len(seeds), CHUNK)]
    # spawn, not fork: the caller may hold threads and locks (pytest with a Spark session).
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        for results in pool.imap(_run_chunk, chunks):
            yield from results
