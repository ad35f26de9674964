"""Lag and rows where Spark users look: ``StreamingQueryProgress.observedMetrics``. Runs on: the
program that defines the query (it builds Column expressions; Spark evaluates them in each
micro-batch, on the executors), with classic PySpark and Spark Connect alike.

A Python data source has no hook into the progress report's source metrics, and
``reportLatestOffset`` (the backlog and the last settled batch's counters, in
``sources[0].latestOffset``) only exists from Spark 4.2. ``DataFrame.observe`` works on every
supported Spark (4.0 and newer) and on Spark Connect: its named aggregates of each micro-batch
appear as ``query.lastProgress["observedMetrics"][name]`` and in every
``StreamingQueryListener`` progress event.

The ages are measured against the micro-batch's timestamp (``current_timestamp()`` in a
streaming query is the time Spark started the batch), from each message's ``sentTimestamp``:
how long the batch's messages had waited in the queue when Spark started reading them, the
counterpart of the Kinesis source's ``avgMsBehindLatest``. A message sent after the batch
started counts as 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: The default name of the observation, the key in ``observedMetrics``.
DEFAULT_NAME = "sqs"


def observe_lag(
    df: DataFrame, name: str = DEFAULT_NAME, timestamp_column: str = "sentTimestamp"
) -> DataFrame:
    """``df`` with an observation ``name`` that reports, for each micro-batch, ``rows`` (rows of
    the batch), ``oldestMessageAgeMs`` and ``medianMessageAgeMs`` (milliseconds from
    ``timestamp_column`` to the batch's start; null for a batch without timestamps).

    Apply it to the source's DataFrame before anything filters rows out::

        df = spark_sqs.observe_lag(spark.readStream.format("sqs")...load())
        query = df.writeStream...start()
        query.lastProgress["observedMetrics"]["sqs"]
        # {'rows': 500, 'oldestMessageAgeMs': 8412, 'medianMessageAgeMs': 2210}

    One name per query: observing two DataFrames of one query under the same name fails.
    """
    from pyspark.sql import functions as F

    age_ms = F.greatest(
        F.lit(0),
        F.unix_millis(F.current_timestamp()) - F.unix_millis(F.col(timestamp_column)),
    )
    return df.observe(
        name,
        F.count(F.lit(1)).alias("rows"),
        F.max(age_ms).alias("oldestMessageAgeMs"),
        F.percentile_approx(age_ms, 0.5).alias("medianMessageAgeMs"),
    )


def observed_lag(progress: Any, name: str = DEFAULT_NAME) -> dict[str, Any] | None:
    """The figures ``observe_lag`` put in one progress report (``query.lastProgress``, an item
    of ``query.recentProgress``, or ``event.progress`` in a ``StreamingQueryListener``), as a
    dict ``{"rows": ..., "oldestMessageAgeMs": ..., "medianMessageAgeMs": ...}``; None when the
    report has none (a trigger that read no data).

    The progress comes in several shapes across PySpark versions and Spark Connect (an object
    with ``observedMetrics`` of Rows, or JSON where a Row is ``{"values": [...], "schema":
    {...}}``); this reads each of them.
    """
    if progress is None:
        return None
    metrics = getattr(progress, "observedMetrics", None)
    if metrics is None:
        metrics = progress["observedMetrics"]
    value = (metrics or {}).get(name)
    if value is None:
        return None
    figures = value.asDict() if hasattr(value, "asDict") else dict(value)
    if set(figures) == {"values", "schema"}:
        names = [field["name"] for field in figures["schema"]["fields"]]
        figures = dict(zip(names, figures["values"], strict=True))
    return figures
