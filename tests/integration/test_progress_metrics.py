"""Metrics where Spark users look: rows and lag in ``observedMetrics`` through
``spark_sqs.observe_lag`` (every supported Spark; also run by ``make test-oldest`` on 4.0), and
the newest settled batch's counters beside the backlog in ``sources[0].latestOffset`` (Spark
4.2+, ``reportLatestOffset``). Spark Connect: tests/integration/test_spark_connect.py."""

from __future__ import annotations

import json
import time
from typing import Any

import pyspark
import pytest

from spark_sqs import observe_lag, observed_lag
from tests import helpers

pytestmark = pytest.mark.integration

SPARK_4_2 = tuple(int(p) for p in pyspark.__version__.split(".")[:2]) >= (4, 2)


def test_rows_and_lag_reach_last_progress_and_counters_reach_latest_offset(
    sqs, queue_url, tmp_path, source
):
    count = 40
    sent_before = time.time() * 1000
    helpers.send_numbered(sqs, queue_url, count)
    sent_after = time.time() * 1000
    df = observe_lag(source(journal=tmp_path / "journal", numPartitions=2))
    started = time.time() * 1000
    query = helpers.start_query(df, "noop", tmp_path / "ckpt")
    try:

        def observed_rows() -> list[dict[str, Any]] | None:
            seen = [m for p in query.recentProgress if (m := observed_lag(p)) and m["rows"]]
            return seen if sum(m["rows"] for m in seen) == count else None

        seen = helpers.wait_until(observed_rows, 240, f"observedMetrics with {count} rows")
        # lastProgress is what a user reads: the same reader takes it (None when idle).
        last = observed_lag(query.lastProgress)
        assert last is None or set(last) == {"rows", "oldestMessageAgeMs", "medianMessageAgeMs"}
        for metrics in seen:
            assert set(metrics) == {"rows", "oldestMessageAgeMs", "medianMessageAgeMs"}
            assert 0 <= metrics["medianMessageAgeMs"] <= metrics["oldestMessageAgeMs"]
            # Every message was sent before the query started, so each batch started after
            # they were sent; none can be older than the whole test so far.
            assert metrics["oldestMessageAgeMs"] >= started - sent_after - 1
            assert metrics["oldestMessageAgeMs"] <= time.time() * 1000 - sent_before + 1

        if not SPARK_4_2:
            return

        def settled() -> dict[str, Any] | None:
            # Progress of a batch or of an idle trigger; the newest settled batch's counters
            # arrive once the batch is acknowledged.
            batches: dict[int, dict[str, Any]] = {}
            for p in query.recentProgress:
                latest = json.loads(p["sources"][0].get("latestOffset") or "{}")
                if "lastBatch" in latest:
                    batches[latest["lastBatch"]["batch"]] = latest
            total = sum(b["lastBatch"]["deleted"] for b in batches.values())
            return batches if total == count else None

        batches = helpers.wait_until(settled, 180, "lastBatch counters for every message")
    finally:
        query.stop()
    for latest in batches.values():
        assert {"visibleMessages", "inFlightMessages", "delayedMessages"} <= set(latest)
        last = latest["lastBatch"]
        assert last["received"] == last["journaled"] == last["deleted"]
        assert last["deleteFailures"] == 0 and last["duplicatesDropped"] == 0
        assert 0 <= last["medianMessageAgeMs"] <= last["oldestMessageAgeMs"]
