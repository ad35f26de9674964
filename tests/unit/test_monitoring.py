"""``spark_sqs.observed_lag`` reads the figures of ``observe_lag`` from each shape a progress
report takes (classic PySpark's object with Rows, a dict with Rows, Spark Connect's JSON form
of a Row); the integration tests read them from real queries."""

from __future__ import annotations

from types import SimpleNamespace

from pyspark.sql import Row

from spark_sqs import observed_lag

FIGURES = {"rows": 3, "oldestMessageAgeMs": 900, "medianMessageAgeMs": 400}


def test_reads_rows_from_a_progress_object_and_from_a_dict() -> None:
    row = Row(**FIGURES)
    assert observed_lag(SimpleNamespace(observedMetrics={"sqs": row})) == FIGURES
    assert observed_lag({"observedMetrics": {"sqs": row}}) == FIGURES


def test_reads_the_json_form_of_a_row() -> None:
    fields = [{"name": name, "type": "long"} for name in FIGURES]
    value = {"values": list(FIGURES.values()), "schema": {"type": "struct", "fields": fields}}
    assert observed_lag({"observedMetrics": {"sqs": value}}) == FIGURES
    assert observed_lag({"observedMetrics": {"lag": value}}, name="lag") == FIGURES


def test_none_without_figures() -> None:
    assert observed_lag(None) is None
    assert observed_lag({"observedMetrics": {}}) is None
    assert observed_lag(SimpleNamespace(observedMetrics={"other": Row(rows=1)})) is None
