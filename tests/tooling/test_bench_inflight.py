"""The in-flight benchmark's pure helpers: the rate bound and the hold statistics."""

from __future__ import annotations

import math

import pytest

from bench.inflight import (
    IN_FLIGHT_LIMIT,
    hold_summary,
    holds_by_phase,
    holds_per_batch,
    modes,
    rate_bound,
)


def test_the_bound_is_the_limit_over_the_seconds_held() -> None:
    assert rate_bound(2.0) == IN_FLIGHT_LIMIT / 2.0 == 60_000
    assert rate_bound(0.5, limit=1000) == 2000
    assert rate_bound(0.0) == math.inf
    assert math.isnan(rate_bound(math.nan))


def test_holds_split_at_the_last_batch_and_skip_messages_not_stamped_both_ways() -> None:
    received = {"a": 10.0, "b": 11.0, "c": 20.0, "d": 21.0}
    deleted = {"a": 13.0, "b": 15.0, "c": 40.0, "e": 50.0}  # d never deleted, e never received
    steady, last = holds_by_phase(received, deleted, last_batch_start=20.0)
    assert sorted(steady) == [3.0, 4.0]
    assert last == [20.0]


def test_summary_reports_percentiles_and_bounds_at_them() -> None:
    holds = [float(s) for s in range(1, 11)]  # 1..10 s
    summary = hold_summary(holds)
    assert summary["messages"] == 10
    assert summary["median_s"] == pytest.approx(5.5)
    assert summary["p90_s"] == pytest.approx(9.1)
    assert summary["max_s"] == 10.0
    assert summary["bound_median_msg_s"] == pytest.approx(IN_FLIGHT_LIMIT / 5.5)
    assert summary["bound_p90_msg_s"] == pytest.approx(IN_FLIGHT_LIMIT / 9.1)
    empty = hold_summary([])
    assert empty["messages"] == 0 and math.isnan(empty["bound_median_msg_s"])


def test_every_mode_at_every_size() -> None:
    runs = modes([250, 1000])
    assert [(m.per_trigger, m.options.get("deleteAfterJournal")) for m in runs] == [
        (250, None),
        (1000, None),
        (250, "true"),
        (1000, "true"),
    ]


def test_each_message_belongs_to_the_batch_that_started_before_its_receive() -> None:
    received = {"early": 0.5, "a": 1.0, "b": 1.5, "c": 5.0}
    deleted = {"early": 1.0, "a": 4.0, "b": 4.5, "c": 6.0}
    assert holds_per_batch(received, deleted, [1.0, 5.0]) == [[3.0, 3.0], [1.0]]
