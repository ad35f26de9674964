"""Options of the SQS sink: parsed once, validated, frozen. Runs on: driver and executors.

``SinkOptions.parse`` turns the case-insensitive option map given to
``df.write.format("sqs")`` / ``df.writeStream.format("sqs")`` into one immutable object that is
pickled into every write task. The connection options (queue, region, endpoint, credentials,
role) are the connection's rows and validators (``spark_sqs.connection``), parsed by the same
engine as the source's (``spark_sqs.option_table``) inside the sink's own table, so both
directions accept and reject exactly the same values; the resulting ``Connection`` is what
``spark_sqs.sqs.client`` builds clients from.

``SINK`` is the sink's table; docs/sink.md's table is checked against ``ALL_SINK_OPTIONS`` by a
test.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import connection as conn
from ..connection import CONNECTION_OPTIONS, Connection
from ..option_table import Check, OptionSpec, OptionTable, build

SINK_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "ignoreExtraColumns",
        "false",
        "Ignore input columns the sink does not use instead of failing at query start.",
        kind="bool",
    ),
    OptionSpec(
        "writeId",
        None,
        "Batch writes (`df.write`): a name for this write, the same on every retry of it, from "
        "which message deduplication ids are derived. Required for a FIFO queue unless the "
        "input has `messageDeduplicationId` or `messageId`.",
        pattern=r"[\w.:/@+=-]{1,200}",
        shape="a name of 1-200 letters, digits or '_.:/@+=-'",
        example="'orders-2024-06-01' that is the same on every retry",
    ),
    OptionSpec(
        "maxInFlightCalls",
        "4",
        "`SendMessageBatch` calls in flight at once per task, 1-64.",
        "int",
        1,
        64,
    ),
    OptionSpec(
        "maxSendAttempts",
        "10",
        "Attempts per message for errors other than throttling (throttling is retried with "
        "backoff for up to five times as many). A message still failing fails the task.",
        "int",
        1,
        100,
    ),
    OptionSpec(
        "oversizeDeadLetterQueueUrl",
        None,
        "Send rows larger than the queue's `MaximumMessageSize` to this queue instead of "
        "failing the write.",
        kind="queueUrl",
        example="the URL shown by the SQS console or `aws sqs get-queue-url`",
    ),
    OptionSpec(
        "dedupeAttribute",
        "true",
        "Standard queues: add the message attribute `spark_sqs.dedupeId` (the row's "
        "deduplication id) to every message, so consumers can drop copies. `false` sends no "
        "such attribute (consumers then cannot tell a copy from a new message); FIFO queues "
        "never get it.",
        kind="bool",
    ),
    OptionSpec(
        "metricsLocation",
        None,
        "Local directory: one JSON file of counters per committed batch/write.",
    ),
)

ALL_SINK_OPTIONS: tuple[OptionSpec, ...] = (*CONNECTION_OPTIONS, *SINK_OPTIONS)


def _one_queue(check: Check) -> dict[str, Any]:
    for key in ("queueUrl", "queueName"):
        value = check.values[key]
        if value and "," in value:
            raise check.invalid(
                key,
                value,
                "names several queues; the sink writes to one queue",
                "give one queue, or write the DataFrame once per queue",
            )
    return {}


def _metrics(check: Check) -> dict[str, Any]:
    metrics = check.values["metricsLocation"]
    if metrics is not None and "://" in metrics and not metrics.startswith("file://"):
        raise check.invalid(
            "metricsLocation",
            metrics,
            "must be a local directory",
            "give a local path such as /tmp/sink-metrics (the driver writes the files)",
        )
    return {"metrics_location": metrics.removeprefix("file://") if metrics else None}


SINK = OptionTable(
    "sink",
    ALL_SINK_OPTIONS,
    (conn.queues, _one_queue, conn.region, conn.credentials, conn.assume_role, _metrics),
    # Spark's own options, and where the sink's users put a queue by habit.
    misplaced={
        "path": "the SQS sink takes no path: name the queue with .option('queueUrl', ...) "
        "instead of .save(<path>)."
    },
    passed=frozenset({"checkpointlocation", "queryname"}),
)


@dataclass(frozen=True)
class SinkOptions:
    connection: Connection
    ignore_extra_columns: bool
    write_id: str | None
    max_in_flight_calls: int
    max_send_attempts: int
    oversize_dead_letter_queue_url: str | None
    metrics_location: str | None
    dedupe_attribute: bool = True

    @property
    def is_fifo(self) -> bool:
        return self.connection.is_fifo

    @classmethod
    def parse(cls, options: Mapping[str, Any], env: Mapping[str, str] | None = None) -> SinkOptions:
        """Validate the user's options. Raises ``InvalidOptionError`` naming the option."""
        fields = SINK.parse(options, os.environ if env is None else env)
        return build(cls, {**fields, "connection": build(Connection, fields)})
