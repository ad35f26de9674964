"""``spark_sqs.register(spark)``: the data source registered, and findable from the calling
thread. Runs on: the program that defines queries (driver, or a Spark Connect client).

Classic PySpark (4.0-4.3) finds a registered Python data source through the JVM's *active*
session of the thread that runs the command, and a Python thread other than the one that
created the session has none: ``df.write.format("sqs")`` started there fails with
``DATA_SOURCE_NOT_FOUND``, although the same session found it from the main thread, and
registering again in that thread does not help. Making the session the thread's active session
does. PySpark offers no public call for that, so this goes through the session's py4j handles
(``_jvm``, ``_jsparkSession``), and only where they exist: a Spark Connect session has neither
and sends its session with every request.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register ``SqsDataSource`` with ``spark`` and make ``spark`` the active session of the
    calling thread. Call it once in each thread that runs ``df.write.format("sqs")`` or starts
    an SQS query (the main thread included)."""
    from .source import SqsDataSource

    jvm, session = getattr(spark, "_jvm", None), getattr(spark, "_jsparkSession", None)
    if jvm is not None and session is not None:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(session)
    spark.dataSource.register(SqsDataSource)
