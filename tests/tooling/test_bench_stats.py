"""Pure helpers of the benchmarks: percentiles and Spark progress parsing."""

from __future__ import annotations

import math

import pytest

from bench.stats import (
    batches_from_progress,
    drain_rate,
    median,
    parse_timestamp,
    percentile,
    rate_in_window,
)


def test_percentile_interpolates_between_closest_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 50) == 2.5
    assert percentile(range(1, 101), 99) == pytest.approx(99.01)
    assert median([7.0]) == 7.0


def test_percentile_of_nothing_is_nan_and_bad_q_is_rejected() -> None:
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def _progress(batch: int, rows: int, ts: str, ms: int) -> dict:
    return {
        "batchId": batch,
        "numInputRows": rows,
        "timestamp": ts,
        "durationMs": {"triggerExecution": ms, "latestOffset": 5},
    }


def test_progress_parsing_keeps_one_entry_per_batch_and_rates() -> None:
    progress = [
        _progress(0, 100, "2026-01-01T00:00:00.000Z", 1000),
        _progress(1, 200, "2026-01-01T00:00:01.000Z", 1000),
        # An idle trigger repeats the last batch id with no rows.
        _progress(1, 0, "2026-01-01T00:00:02.500Z", 10),
        _progress(2, 300, "2026-01-01T00:00:03.000Z", 1000),
    ]
    batches = batches_from_progress(progress)
    assert [(b.batch_id, b.rows) for b in batches] == [(0, 100), (1, 200), (2, 300)]
    t0 = parse_timestamp("2026-01-01T00:00:00.000Z")
    assert batches[2].end - t0 == pytest.approx(4.0)
    assert drain_rate(batches) == (pytest.approx(150.0), 600, pytest.approx(4.0))
    # Only batches entirely inside the window count: batches 1 and 2, from 1 s to 4 s.
    rate, rows = rate_in_window(batches, t0 + 0.5, t0 + 10)
    assert (rate, rows) == (pytest.approx(500 / 3), 500)
    assert rate_in_window(batches, t0 + 100, t0 + 200) == (0.0, 0)
