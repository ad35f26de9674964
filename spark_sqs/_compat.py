"""Checks, when ``spark_sqs`` is imported, that this Python's PySpark has the streaming Python
Data Source API the source is built on. Runs on: driver and executors (wherever the package is
imported).

The check looks for the API itself, never at the version number: some Databricks Runtime
versions report PySpark 3.5 yet ship ``DataSourceStreamReader`` (Databricks documents
``streamReader`` from Runtime 15.2), while open-source PySpark 3.5 lacks it. PySpark is not a
hard dependency of the wheel (clusters bring their own; ``spark-sqs[spark]`` installs it for
local use), so a missing or too old PySpark has to be reported here, with the fix, before any
other module of the package imports from it.
"""

from __future__ import annotations

import importlib
import sys

from .errors import SqsSourceError

#: What spark_sqs needs from ``pyspark.sql.datasource``.
REQUIRED = ("DataSource", "DataSourceStreamReader", "InputPartition")

FIX = (
    "Fix: on your own machine, pip install 'spark-sqs[spark]' (PySpark 4.0 or newer); on a "
    "cluster, keep its PySpark and use a runtime that ships the streaming Python Data Source "
    "API: Databricks Runtime 15.2+ or PySpark 4.0+ (e.g. EMR with Spark 4)."
)


class StreamingApiMissingError(SqsSourceError, ImportError):
    """PySpark is missing, or lacks the streaming Python Data Source API."""


def require_streaming_data_source_api() -> None:
    """Raise ``StreamingApiMissingError`` naming what is missing and the fix; else return."""
    try:
        import pyspark
    except ModuleNotFoundError as exc:
        if exc.name != "pyspark":
            raise
        raise StreamingApiMissingError(
            f"spark-sqs needs PySpark, but this Python ({sys.executable}) has no module "
            f"'pyspark'. {FIX}"
        ) from None
    where = f"PySpark {getattr(pyspark, '__version__', '(version unknown)')} at " + str(
        getattr(pyspark, "__file__", "?")
    )
    try:
        datasource = importlib.import_module("pyspark.sql.datasource")
    except ModuleNotFoundError as exc:
        if exc.name not in ("pyspark.sql", "pyspark.sql.datasource"):
            raise
        raise StreamingApiMissingError(
            f"spark-sqs needs the Python Data Source API, but {where} has no module "
            f"'pyspark.sql.datasource' (missing: {', '.join(REQUIRED)}). {FIX}"
        ) from None
    missing = [name for name in REQUIRED if not hasattr(datasource, name)]
    if missing:
        raise StreamingApiMissingError(
            f"spark-sqs needs the streaming Python Data Source API, but "
            f"pyspark.sql.datasource of {where} lacks {', '.join(missing)}. {FIX}"
        )


require_streaming_data_source_api()
