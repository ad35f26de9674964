"""Small, pure helpers: percentiles, progress-report parsing, rates. Unit-tested."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between closest ranks (numpy's
    default). NaN for no values."""
    data = sorted(values)
    if not data:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0-100, got {q}")
    pos = (len(data) - 1) * q / 100.0
    lower = math.floor(pos)
    upper = min(lower + 1, len(data) - 1)
    return data[lower] + (data[upper] - data[lower]) * (pos - lower)


def median(values: Iterable[float]) -> float:
    return percentile(values, 50)


@dataclass(frozen=True)
class Batch:
    """One micro-batch from a StreamingQueryProgress: wall-clock start and end (epoch s)."""

    batch_id: int
    rows: int
    start: float
    end: float
    durations_ms: dict[str, int]


def parse_timestamp(text: str) -> float:
    """Spark's progress timestamp (``2026-01-02T03:04:05.678Z``) as epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def batches_from_progress(progress: Sequence[Any]) -> list[Batch]:
    """Micro-batches from ``query.recentProgress`` (objects or dicts), one per batch id."""
    out: dict[int, Batch] = {}
    for p in progress:
        get = p.get if isinstance(p, dict) else (lambda k, p=p: getattr(p, k))
        durations = dict(get("durationMs") or {})
        start = parse_timestamp(get("timestamp"))
        total = durations.get("triggerExecution", 0) / 1000.0
        rows = int(get("numInputRows"))
        batch = Batch(int(get("batchId")), rows, start, start + total, durations)
        # An idle query repeats the last batch id with 0 rows: keep the one that had rows.
        if batch.batch_id not in out or batch.rows > out[batch.batch_id].rows:
            out[batch.batch_id] = batch
    return [out[k] for k in sorted(out)]


def rate_in_window(batches: Sequence[Batch], start: float, end: float) -> tuple[float, int]:
    """Messages per second over the batches that started at or after ``start`` and ended by
    ``end``: their rows over the time from the first one's start to the last one's end."""
    inside = [b for b in batches if b.start >= start and b.end <= end and b.rows > 0]
    if not inside:
        return 0.0, 0
    rows = sum(b.rows for b in inside)
    span = inside[-1].end - inside[0].start
    return (rows / span if span > 0 else 0.0), rows


def drain_rate(batches: Sequence[Batch]) -> tuple[float, int, float]:
    """Rows per second from the start of the first batch with rows to the end of the last."""
    full = [b for b in batches if b.rows > 0]
    if not full:
        return 0.0, 0, 0.0
    rows = sum(b.rows for b in full)
    span = full[-1].end - full[0].start
    return (rows / span if span > 0 else 0.0), rows, span
