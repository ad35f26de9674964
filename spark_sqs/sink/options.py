"""Options of the SQS sink: parsed once, validated, frozen. Runs on: driver and executors.

``SinkOptions.parse`` turns the case-insensitive option map given to
``df.write.format("sqs")`` / ``df.writeStream.format("sqs")`` into one immutable object that is
pickled into every write task. The connection options (queue, region, endpoint, credentials,
role) are the source's: they are validated by ``SqsOptions.parse`` itself, so both directions
accept and reject exactly the same values, and the resulting ``SqsOptions`` is what
``spark_sqs.sqs.client`` builds clients from.

``SINK_OPTIONS`` is the table of sink-only options; docs/sink.md's table is checked against it
(plus the connection options) by a test.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidOptionError
from ..options import OPTIONS, OptionSpec, SqsOptions, _bool, _int, _nonblank

# The source options that name the queue and how to reach it; the sink takes exactly these.
CONNECTION_OPTIONS: tuple[str, ...] = (
    "queueUrl",
    "queueName",
    "queueOwnerAccountId",
    "region",
    "endpointUrl",
    "serviceCredential",
    "awsAccessKeyId",
    "awsSecretAccessKey",
    "awsSessionToken",
    "profile",
    "roleArn",
    "roleExternalId",
    "roleSessionName",
)

SINK_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "ignoreExtraColumns",
        "false",
        "Ignore input columns the sink does not use instead of failing at query start.",
    ),
    OptionSpec(
        "writeId",
        None,
        "Batch writes (`df.write`): a name for this write, the same on every retry of it, from "
        "which message deduplication ids are derived. Required for a FIFO queue unless the "
        "input has `messageDeduplicationId` or `messageId`.",
    ),
    OptionSpec(
        "maxInFlightCalls", "4", "`SendMessageBatch` calls in flight at once per task, 1-64."
    ),
    OptionSpec(
        "maxSendAttempts",
        "10",
        "Attempts per message for errors other than throttling (throttling is retried with "
        "backoff for up to five times as many). A message still failing fails the task.",
    ),
    OptionSpec(
        "oversizeDeadLetterQueueUrl",
        None,
        "Send rows larger than the queue's `MaximumMessageSize` to this queue instead of "
        "failing the write.",
    ),
    OptionSpec(
        "dedupeAttribute",
        "true",
        "Standard queues: add the message attribute `spark_sqs.dedupeId` (the row's "
        "deduplication id) to every message, so consumers can drop copies. `false` sends no "
        "such attribute (consumers then cannot tell a copy from a new message); FIFO queues "
        "never get it.",
    ),
    OptionSpec(
        "metricsLocation",
        None,
        "Local directory: one JSON file of counters per committed batch/write.",
    ),
)

# What Spark itself passes along with the user's options, or options meant for Spark.
_SPARK_KEYS = {"checkpointlocation", "path", "queryname"}

_CONNECTION_SPECS = {spec.name: spec for spec in OPTIONS if spec.name in CONNECTION_OPTIONS}
ALL_SINK_OPTIONS: tuple[OptionSpec, ...] = (
    *(_CONNECTION_SPECS[name] for name in CONNECTION_OPTIONS),
    *SINK_OPTIONS,
)
_CANONICAL = {
    key.lower(): spec.name for spec in ALL_SINK_OPTIONS for key in (spec.name, *spec.aliases)
}
_DEFAULTS = {spec.name: spec.default for spec in SINK_OPTIONS}

# Any value: the sink never opens a journal, but SqsOptions.parse requires one.
_NO_JOURNAL = "<unused by the sink>"


@dataclass(frozen=True)
class SinkOptions:
    connection: SqsOptions
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
        env = os.environ if env is None else env
        raw: dict[str, str] = {}
        for key, value in options.items():
            lowered = str(key).lower()
            if lowered == "path":
                raise InvalidOptionError(
                    "The SQS sink takes no path. Fix: name the queue with "
                    ".option('queueUrl', ...) instead of .save(<path>)"
                )
            if lowered in _SPARK_KEYS:
                continue
            canonical = _CANONICAL.get(lowered)
            if canonical is None:
                close = difflib.get_close_matches(lowered, list(_CANONICAL), n=1)
                hint = f"did you mean '{_CANONICAL[close[0]]}'?" if close else ""
                raise InvalidOptionError(
                    f"Unknown SQS sink option '{key}'. Fix: remove it or correct the name; "
                    f"{hint} Accepted options: {', '.join(s.name for s in ALL_SINK_OPTIONS)}"
                )
            if canonical in raw:
                raise InvalidOptionError(
                    f"SQS sink option '{canonical}' is given twice, under two spellings. Fix: "
                    "give one of them"
                )
            raw[canonical] = "" if value is None else str(value)

        if not _nonblank(raw, "queueUrl") and not _nonblank(raw, "queueName"):
            raise InvalidOptionError(
                "Missing SQS sink option 'queueUrl': the sink needs to know which queue to "
                "write to. Fix: add .option('queueUrl', 'https://sqs.<region>.amazonaws.com/"
                "<account>/<queue>') or .option('queueName', '<queue>') with "
                ".option('region', ...)"
            )
        connection_raw = {k: v for k, v in raw.items() if k in CONNECTION_OPTIONS}
        try:
            connection = SqsOptions.parse({**connection_raw, "journalLocation": _NO_JOURNAL}, env)
        except InvalidOptionError as exc:
            # Same validation as the source; only the wording names the sink.
            raise InvalidOptionError(
                exc.message.replace("SQS source option", "SQS sink option")
            ) from None
        if connection.queue_count > 1:
            key = "queueUrl" if connection.queue_urls else "queueName"
            several = InvalidOptionError.for_option(
                key,
                raw[key],
                "names several queues; the sink writes to one queue",
                "give one queue, or write the DataFrame once per queue",
            )
            raise InvalidOptionError(several.message.replace("source option", "sink option"))

        def get(name: str) -> str | None:
            value = raw.get(name)
            return _DEFAULTS[name] if value is None else value

        write_id = _nonblank(raw, "writeId")
        if write_id is not None and not re.fullmatch(r"[\w.:/@+=-]{1,200}", write_id):
            raise InvalidOptionError.for_option(
                "writeId",
                write_id,
                "must be 1-200 letters, digits or '_.:/@+=-'",
                "use a name such as 'orders-2024-06-01' that is the same on every retry",
            )
        dlq = _nonblank(raw, "oversizeDeadLetterQueueUrl")
        if dlq is not None and not re.match(r"^https?://[^/\s]+/.+", dlq):
            raise InvalidOptionError.for_option(
                "oversizeDeadLetterQueueUrl",
                dlq,
                "is not a queue URL",
                "use the URL shown by the SQS console or `aws sqs get-queue-url`",
            )
        metrics = _nonblank(raw, "metricsLocation")
        if metrics is not None and "://" in metrics and not metrics.startswith("file://"):
            raise InvalidOptionError.for_option(
                "metricsLocation",
                metrics,
                "must be a local directory",
                "give a local path such as /tmp/sink-metrics (the driver writes the files)",
            )
        return cls(
            connection=connection,
            ignore_extra_columns=_bool(get, "ignoreExtraColumns"),
            write_id=write_id,
            max_in_flight_calls=_int(get, "maxInFlightCalls", 1, 64),
            max_send_attempts=_int(get, "maxSendAttempts", 1, 100),
            oversize_dead_letter_queue_url=dlq,
            metrics_location=metrics.removeprefix("file://") if metrics else None,
            dedupe_attribute=_bool(get, "dedupeAttribute"),
        )
