"""The one local SparkSession of the tests, the demo, the benchmarks and the fault harness.
Runs on: the driver of a development process (never on a cluster; not in the wheel).

Every caller gets the same loopback-only, quiet session (no UI, driver bound to 127.0.0.1, two
shuffle partitions, ERROR log level by default) with ``SqsDataSource`` registered; callers add
only what is theirs: the master (task slots and retries), the app name and their own configs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

BASE_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Loopback only: nothing outside this machine reaches the driver.
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    # The queries here never shuffle much; 200 partitions only cost task start-ups.
    "spark.sql.shuffle.partitions": "2",
}


def local_session(
    app_name: str,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    *,
    log_level: str | None = "ERROR",
    quiet_log4j: bool = False,
) -> Any:
    """Start (or reuse) a local SparkSession with ``SqsDataSource`` registered.

    ``master`` is ``local[N]`` or ``local[N,F]`` (``F`` attempts per task). ``quiet_log4j`` points
    the driver at ``conf/log4j2-demo.properties``, which also silences the JVM's start-up lines
    that ``setLogLevel`` comes too late for. ``log_level=None`` keeps Spark's default level (the
    security test searches everything Spark logs).
    """
    from pyspark.sql import SparkSession

    from spark_sqs import SqsDataSource

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**BASE_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    log4j = REPO / "conf" / "log4j2-demo.properties"
    if quiet_log4j and log4j.exists():
        builder = builder.config(
            "spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile={log4j}"
        )
    spark = builder.getOrCreate()
    if log_level is not None:
        spark.sparkContext.setLogLevel(log_level)
    spark.dataSource.register(SqsDataSource)
    return spark


def sqs_stream(spark: Any, endpoint: str, queue_url: str, journal: Any, **options: Any) -> Any:
    """``spark.readStream.format("sqs")`` on a development SQS at ``endpoint``, loaded; further
    options as keywords (values are passed as strings)."""
    reader = (
        spark.readStream.format("sqs")
        .option("queueUrl", queue_url)
        .option("endpointUrl", endpoint)
        .option("journalLocation", str(journal))
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()
