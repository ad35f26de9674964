"""bench/receiver_memory.py's pure helpers: the runs, the bound, the fit and the report."""

from __future__ import annotations

from bench.receiver_memory import CALL, MIB, bound, byte_size, markdown, runs, slope_and_intercept


def test_runs_cover_each_limit_delete_after_journal_and_an_unbounded_baseline() -> None:
    planned = runs([16 * MIB, 64 * MIB], baseline=True)
    assert [(r.cap, r.delete_after_journal) for r in planned[:3]] == [
        (16 * MIB, False),
        (64 * MIB, False),
        (64 * MIB, True),
    ]
    assert [(r.cap, r.per_receiver) for r in planned[3:]] == [(None, 64), (None, 128)]
    assert all(r.cap is not None for r in runs([16 * MIB], baseline=False))


def test_the_bound_is_twice_the_limit_and_a_fixed_overhead() -> None:
    assert bound(64 * MIB, 200 * MIB) == 128 * MIB + 200 * MIB + 5 * CALL
    assert byte_size("64m") == 64 * MIB


def result(cap: int, peak: int, daj: bool = False) -> dict:
    return {
        "name": f"{cap}",
        "cap_bytes": cap,
        "delete_after_journal": daj,
        "messages": 10,
        "rows_per_batch": [5, 5],
        "worker_overhead_bytes": 200 * MIB,
        "worker_peak_bytes": peak,
        "worker_peak_above_overhead_bytes": peak - 200 * MIB,
        "bound_bytes": bound(cap, 200 * MIB),
        "within_bound": peak <= bound(cap, 200 * MIB),
        "above_overhead_per_cap": 2.0,
    }


def test_the_fit_recovers_slope_and_intercept_and_skips_other_modes() -> None:
    caps = [16 * MIB, 64 * MIB, 128 * MIB]
    results = [result(c, 2 * (c + CALL) + 190 * MIB) for c in caps]
    results.append(result(128 * MIB, 10 * MIB, daj=True))  # not on the line: left out
    assert slope_and_intercept(results) == {"slope": 2.0, "intercept_mib": 190}
    assert slope_and_intercept(results[:1]) is None


def test_the_report_has_a_row_per_run_and_the_fit() -> None:
    text = markdown(
        {
            "when": "2026-11-25",
            "machine": "2 cores",
            "parameters": {"receivers": 2, "batches": 2, "load_average": 1.0, "seconds": 60},
            "runs": [result(16 * MIB, 250 * MIB)],
            "fit": {"slope": 2.0, "intercept_mib": 190},
        }
    )
    assert "| 16777216 | 10 | 5, 5 | 200 | 250 | 50 | 282 | yes | 2.0 |" in text
    assert "2.0 bytes of RSS per byte held, plus 190 MiB fixed" in text
