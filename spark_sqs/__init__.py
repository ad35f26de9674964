"""spark-sqs: an exactly-once Spark Structured Streaming source for Amazon SQS.

    from spark_sqs import SqsDataSource
    spark.dataSource.register(SqsDataSource)
    df = spark.readStream.format("sqs").option("queueUrl", url) \\
        .option("journalLocation", "/checkpoints/q1-journal").load()

PySpark is not a dependency of the wheel (clusters bring their own): ``pip install
'spark-sqs[spark]'`` for local use. ``import spark_sqs`` needs no PySpark (the ``spark-sqs``
command runs without it); the names that need PySpark (``SqsDataSource``, ``SqsStreamReader``,
``observe_lag``, ``observed_lag``, ``register``) are imported on first use, which checks that
PySpark has the streaming Python Data Source API and raises ``ImportError`` naming what is
missing otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    InvalidOptionError,
    JournalError,
    QueueNotFoundError,
    SqsAccessError,
    SqsSourceError,
    TransientSqsError,
)

if TYPE_CHECKING:
    from .monitoring import observe_lag, observed_lag
    from .registration import register
    from .source import SqsDataSource, SqsStreamReader

__version__ = "0.1.0"

# Name -> module that defines it; each of these modules needs PySpark.
_LAZY = {
    "SqsDataSource": "source",
    "SqsStreamReader": "source",
    "observe_lag": "monitoring",
    "observed_lag": "monitoring",
    "register": "registration",
}

__all__ = [
    "InvalidOptionError",
    "JournalError",
    "QueueNotFoundError",
    "SqsAccessError",
    "SqsDataSource",
    "SqsSourceError",
    "SqsStreamReader",
    "TransientSqsError",
    "observe_lag",
    "observed_lag",
    "register",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'spark_sqs' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
