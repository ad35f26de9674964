"""spark-sqs: an exactly-once Spark Structured Streaming source for Amazon SQS.

    from spark_sqs import SqsDataSource
    spark.dataSource.register(SqsDataSource)
    df = spark.readStream.format("sqs").option("queueUrl", url) \\
        .option("journalLocation", "/checkpoints/q1-journal").load()

PySpark is not a dependency of the wheel (clusters bring their own): ``pip install
'spark-sqs[spark]'`` for local use. Importing the package checks that PySpark has the streaming
Python Data Source API and raises ``ImportError`` naming what is missing otherwise.
"""

# First: fails with the fix when PySpark or its streaming Python Data Source API is missing,
# before ``.source`` fails on it with a bare ImportError.
from . import _compat  # noqa: F401
from .errors import (
    InvalidOptionError,
    JournalError,
    QueueNotFoundError,
    SqsAccessError,
    SqsSourceError,
    TransientSqsError,
)
from .source import SqsDataSource, SqsStreamReader

__version__ = "0.1.0"

__all__ = [
    "InvalidOptionError",
    "JournalError",
    "QueueNotFoundError",
    "SqsAccessError",
    "SqsDataSource",
    "SqsSourceError",
    "SqsStreamReader",
    "TransientSqsError",
]
