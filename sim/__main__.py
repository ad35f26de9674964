"""``python -m sim``: run the deterministic simulation over many seeds, or replay one.

    python -m sim --seeds 300              seeds 0..299, standard and FIFO queues as each seed picks
    python -m sim --seed 17 --trace        replay seed 17 and print the ordering it took
    python -m sim --seeds 100 --fifo       every seed on a FIFO queue
    python -m sim --seeds 100 --queues 2   two queues in the stream; a restart may drop one
    python -m sim --seeds 100 --poison     poisonMessagePolicy=deadLetter; the sink rejects one
    python -m sim --seeds 100 --poison-faults  the same, and each run the poison message fails
                                           adds a run with faults (narrowing meets crashes)
    python -m sim --seeds 100 --unkind all the unkind world (skewed clocks, stalls, task waves,
                                           owner pauses, lying and lagging stores, second
                                           queries that run batches, diverged journals)
    python -m sim --seeds 100 --unkind clocks,stalls   some of its dimensions only
    python -m sim --seeds 100 --unkind lapses   a dimension not in all: the driver paused
                                           before its own deletes past visibilityTimeout, and
                                           deletes with lapsed handles that keep the message
    python -m sim --seeds 100 --unkind all,replans   all, and a driver paused at a replay's
                                           plan read while a second query takes over
    python -m sim --seeds 100 --bytes      byte limits of a few messages bind (maxBytesPer...)
    python -m sim --seeds 100 --markers-kept 4   4 planned markers kept, not 16: markers go
                                           within a seed's batches (the window's forwarding)

Exit status 1 if any seed broke an invariant; each failing seed prints the command that
replays it. Runs on: the simulator's process only.
"""

from __future__ import annotations

import argparse
import sys
import time

from sim.spark import OPT_IN, UNKIND, run_seed
from sim.sweep import Variant, default_jobs, parse_unkind, sweep


def replay_command(
    seed: int,
    fifo: bool | None,
    fixed_mode: bool = False,
    queues: int = 1,
    poison: bool = False,
    unkind: frozenset[str] = frozenset(),
    max_bytes: bool = False,
    poison_faults: bool = False,
    markers_kept: int | None = None,
) -> str:
    flag = "" if fifo is None else (" --fifo" if fifo else " --standard")
    if poison_faults:
        flag += " --poison-faults"
    elif poison:
        flag += " --poison"
    if unkind:
        if unkind >= frozenset(UNKIND):
            names = ["all", *(n for n in OPT_IN if n in unkind)]
        else:
            names = [n for n in UNKIND + OPT_IN if n in unkind]
        flag += " --unkind " + ",".join(names)
    if max_bytes:
        flag += " --bytes"
    if markers_kept is not None:
        flag += f" --markers-kept {markers_kept}"
    if fixed_mode:
        flag += " --fixed-delete-mode"
    if queues > 1:
        flag += f" --queues {queues}"
    return f"python -m sim --seed {seed}{flag} --trace"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, help="run (replay) this one seed")
    parser.add_argument("--seeds", type=int, default=200, help="run seeds FIRST..FIRST+N-1")
    parser.add_argument("--first", type=int, default=0)
    queue = parser.add_mutually_exclusive_group()
    queue.add_argument("--fifo", action="store_true", default=None, help="FIFO queues only")
    queue.add_argument("--standard", dest="fifo", action="store_false", help="standard only")
    parser.add_argument("--trace", action="store_true", help="print the ordering of each seed")
    parser.add_argument(
        "--fixed-delete-mode",
        action="store_true",
        help="restarts keep deleteAfterJournal as the seed's first run had it",
    )
    parser.add_argument(
        "--queues", type=int, default=1, help="queues in the stream (2: one may be removed)"
    )
    parser.add_argument(
        "--poison",
        action="store_true",
        help="poisonMessagePolicy=deadLetter, and one message that fails every batch holding it",
    )
    parser.add_argument(
        "--poison-faults",
        action="store_true",
        help="--poison, and each run the poison message fails adds a run with the seed's faults",
    )
    parser.add_argument(
        "--unkind",
        default=None,
        help=(
            f"dimensions of the unkind world, comma-separated, or all: {', '.join(UNKIND)}; "
            f"not in all: {', '.join(OPT_IN)} (all,{OPT_IN[0]} adds one)"
        ),
    )
    parser.add_argument(
        "--bytes",
        action="store_true",
        dest="max_bytes",
        help="maxBytesPerReceiver/maxBytesPerTrigger of a few messages, drawn per run",
    )
    parser.add_argument(
        "--markers-kept",
        type=int,
        default=None,
        help="planned markers kept (default: the library's 16; a seed numbers 3-13 batches)",
    )
    parser.add_argument("--stop", type=int, default=5, help="stop after this many failing seeds")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help=f"worker processes (default: SIM_JOBS or the cores, at most 2: {default_jobs()})",
    )
    args = parser.parse_args(argv)

    try:
        unkind = parse_unkind(args.unkind)
    except ValueError as exc:
        parser.error(str(exc))
    configure = Variant(
        args.fixed_delete_mode,
        args.queues,
        args.poison,
        unkind,
        args.max_bytes,
        poison_faults=args.poison_faults,
        markers_kept=args.markers_kept,
    )

    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    failed = 0
    started = time.perf_counter()
    runs = 0
    findings: dict[str, int] = {}
    if args.trace or args.seed is not None:
        results = (
            run_seed(seed, fifo=args.fifo, trace=args.trace, configure=configure) for seed in seeds
        )
    else:
        results = sweep(
            seeds,
            fifo=args.fifo,
            fixed_delete_mode=args.fixed_delete_mode,
            queues=args.queues,
            poison=args.poison,
            unkind=unkind,
            jobs=args.jobs,
            max_bytes=args.max_bytes,
            poison_faults=args.poison_faults,
            markers_kept=args.markers_kept,
        )
    for result in results:
        seed = result.config.seed
        runs += 1
        for finding in result.findings:
            kind = finding.split(":")[0]
            findings[kind] = findings.get(kind, 0) + 1
        if args.trace:
            print("\n".join(result.trace))
            print(f"-- seed {seed}: {result.stats}, {result.steps} steps, "
                  f"{result.sim_seconds:.0f} simulated seconds")  # fmt: skip
        if not result.ok:
            failed += 1
            print(f"seed {seed} FAILED ({result.config}):")
            for v in result.violations:
                print(f"  - {v}")
            print(
                "  replay: "
                + replay_command(
                    seed,
                    args.fifo,
                    args.fixed_delete_mode,
                    args.queues,
                    args.poison,
                    unkind,
                    args.max_bytes,
                    args.poison_faults,
                    args.markers_kept,
                )
            )
            if failed >= args.stop:
                break
    elapsed = time.perf_counter() - started
    for kind, count in sorted(findings.items()):
        print(f"bounded-size finding in {count} of {runs} seeds: {kind} left in the journal")
    print(
        f"{runs} seeds, {failed} failed, {elapsed:.1f}s ({runs / elapsed:.1f} seeds/s)",
        file=sys.stderr,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
