"""spark-sqs: an exactly-once Spark Structured Streaming source for Amazon SQS.

    from spark_sqs import SqsDataSource
    spark.dataSource.register(SqsDataSource)
    df = spark.readStream.format("sqs").option("queueUrl", url) \\
        .option("journalLocation", "/checkpoints/q1-journal").load()
"""

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
