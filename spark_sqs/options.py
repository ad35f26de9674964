"""Options of the SQS source: parsed once, validated, frozen. Runs on: driver and executors.

``SqsOptions.parse`` turns the case-insensitive option map given to
``spark.readStream.format("sqs").option(...)`` into one immutable object. It is called when the
DataFrame is created (``load()``), so a bad option fails there with a message that names the
option, the value and the fix. The same object is pickled into every input partition.

``OPTIONS`` is the one declarative table of accepted options: the connection's rows
(``spark_sqs.connection``: queues, region, endpoint, credentials, role, shared with the sink)
and the source's own. ``spark_sqs.option_table`` parses it: each row's kind, range, choices,
``requires`` and ``excludes`` drive the generic parse and its errors, then the small named
validators in ``SOURCE``'s list check the rules between options that are more than "needs" or
"excludes" (the visibility timeout against the long poll, the heartbeat against the visibility
timeout, queue lists and regions, credentials). ``render_markdown`` turns the table into
docs/options.md's (a test compares the two; ``python -m devtools.options_doc`` rewrites the
file).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import connection
from ._compat import require_s3_conditional_writes
from .connection import CREDENTIAL_OPTIONS, QUEUE_OPTIONS, AssumeRole, AwsCredentials, Connection
from .errors import InvalidOptionError
from .journal.stores import check_location
from .option_table import Check, OptionSpec, OptionTable, build
from .option_table import render_markdown as render_table

# Order is the docs' order.
OPTIONS: tuple[OptionSpec, ...] = (
    *QUEUE_OPTIONS,
    OptionSpec(
        "journalLocation",
        None,
        "Required. Directory of the durable journal of received messages: a local path (one "
        "machine, or a POSIX file system all nodes share) or `s3://bucket/prefix`. Other "
        "schemes and Databricks `/dbfs`, `/Volumes` paths are refused. One per query.",
    ),
    OptionSpec(
        "journalSseKmsKeyId",
        None,
        "With an `s3://` journal: KMS key to encrypt journal objects with (SSE-KMS). Default: "
        "the bucket's default encryption.",
    ),
    OptionSpec(
        "numPartitions",
        "4",
        "Most receivers (Spark tasks) per micro-batch. A new batch plans as many as its "
        "backlog needs: one per 100 messages visible in each queue when it is planned, at "
        "least 1 and at most `numPartitions` (all of them when a queue's count is unknown), so "
        "a trickle of messages costs one receiver's requests per batch. A replayed batch keeps "
        "the receivers it was first planned with.",
        "int",
        1,
        1000,
    ),
    OptionSpec(
        "maxMessagesPerTrigger",
        "10000",
        "Upper bound on messages per micro-batch, split evenly across receivers.",
        "int",
        1,
        1_000_000,
    ),
    OptionSpec(
        "maxBytesPerTrigger",
        None,
        "A soft bound on the bytes of a micro-batch (as in Auto Loader), split evenly across "
        "receivers like `maxMessagesPerTrigger`; each receiver then holds at most its share or "
        "`maxBytesPerReceiver`, whichever is lower. Soft: a receiver always makes its first "
        "receive call, so a batch can exceed it by one call's messages per receiver. A byte "
        "size such as `512m` or `10g`. Default: none.",
        "bytes",
        1 << 10,
        1 << 40,
    ),
    OptionSpec(
        "maxBytesPerReceiver",
        "64m",
        "Memory bound of one receiver: it stops receiving once the messages it holds (bodies, "
        "attributes, receipt handles, and Extended Client payloads at the size their sender "
        "declared) reach this many bytes, so it holds less than this plus one receive call's "
        "messages (10 × 1 MiB at SQS's largest). A Python worker needs about twice that plus "
        "its own footprint. Applies to batches planned from now on; a replay keeps its plan's. "
        "See [operations](operations.md#memory).",
        "bytes",
        1 << 10,
        1 << 36,
    ),
    OptionSpec(
        "minMessagesPerTrigger",
        None,
        "Wait for at least this many visible messages before starting a micro-batch, but never "
        "longer than `maxTriggerDelay`. At most `maxMessagesPerTrigger`. Like the Kafka "
        "source's `minOffsetsPerTrigger`, except that `maxTriggerDelay` is in seconds here.",
        "int",
        1,
        1_000_000,
    ),
    OptionSpec(
        "maxTriggerDelay",
        "900",
        "With `minMessagesPerTrigger`, the longest a micro-batch waits for more, in seconds "
        "(a number such as `900`, not a duration such as Kafka's `15m`).",
        "seconds",
        0,
        86400,
    ),
    OptionSpec(
        "maxInFlightMessages",
        "60000",
        "A new micro-batch may receive at most this many minus what the source still holds "
        "unacknowledged (SQS allows about 120,000 in flight per queue), also under "
        "Trigger.AvailableNow. A second attempt of a task (speculation, a retry before the "
        "killed attempt's messages time out) can hold its share once more until it ends. "
        "With deleteAfterJournal, a batch counts only until Spark commits it (its receivers "
        "deleted what they journaled).",
        "int",
        1,
        120_000,
    ),
    OptionSpec(
        "waitTimeSeconds",
        "1",
        "Long-poll wait of each `ReceiveMessage` call. A receiver that has received its part of "
        "the messages visible when its batch was planned asks for more without waiting, and one "
        "whose long poll had to wait stops after it: it has caught up with the queue.",
        "int",
        0,
        20,
    ),
    OptionSpec(
        "visibilityTimeout",
        "120",
        "Seconds a received message stays invisible (set on each receive). A receiver stops "
        "receiving after a quarter of it, so the batch is journaled well before it expires; "
        "at least 4 × `waitTimeSeconds`.",
        "int",
        1,
        43200,
    ),
    OptionSpec(
        "messageAttributeNames",
        "All",
        "Comma-separated message attribute names to fetch (`All` for every attribute).",
        kind="list",
        shape="attribute names",
    ),
    OptionSpec(
        "deleteOnCommit",
        "true",
        "Delete messages once the micro-batch that yielded them is committed. `false` never "
        "deletes: each message becomes visible again after `visibilityTimeout` and this same "
        "query reads it again, as a new row, once every visibility timeout, for as long as the "
        "queue keeps it (its retention period, or until its redrive policy moves it). Only for "
        "peeking at a queue that another consumer drains; nothing is exactly once then.",
        kind="bool",
    ),
    OptionSpec(
        "deleteAfterJournal",
        "false",
        "Delete each message as soon as its receiver has journaled it, before the sink has it. "
        "Lets a FIFO message group yield more than one receive per micro-batch; still exactly "
        "once (the journal replays), but dead-letter redrive no longer applies. See "
        "[fifo](fifo.md).",
        kind="bool",
        excludes=("deleteOnCommit=false because that never deletes",),
    ),
    OptionSpec(
        "messageFormat",
        "raw",
        "`raw`: the body as SQS has it. `sns`: each message is an SNS notification envelope "
        "(a subscription without raw message delivery); `body` becomes the SNS `Message`, the "
        "columns `snsTopicArn`, `snsMessageId`, `snsSubject` and `snsTimestamp` are added and "
        "the SNS message attributes land in `messageAttributes`.",
        kind="choice",
        choices=("raw", "sns"),
    ),
    OptionSpec(
        "invalidEnvelope",
        "fail",
        "A message that is not an SNS notification: `fail` leaves it in the queue (not "
        "journaled, visible again at once, so the redrive policy applies) and fails the task "
        "naming its id; `keep` passes it through raw with null SNS columns.",
        kind="choice",
        choices=("fail", "keep"),
        requires=("messageFormat=sns",),
    ),
    OptionSpec(
        "extendedPayloads",
        "false",
        "`true`: a message the SQS Extended Client (Java or Python) offloaded to S3 is fetched "
        "from S3 by its receiver before it is journaled; `body` holds the payload and the "
        "reserved `ExtendedPayloadSize`/`SQSLargePayloadSize` attribute is removed.",
        kind="bool",
    ),
    OptionSpec(
        "deleteExtendedPayloads",
        "false",
        "Delete a message's S3 payload once the message is deleted from the queue (after its "
        "micro-batch is committed), never before.",
        kind="bool",
        requires=("extendedPayloads=true",),
        excludes=(
            "deleteOnCommit=false because messages stay in the queue, so their payloads must "
            "stay in S3",
        ),
    ),
    OptionSpec(
        "s3EndpointUrl",
        None,
        "S3 endpoint override for the payloads (VPC endpoint, LocalStack, moto). The journal's "
        "S3 endpoint is set in `journalLocation` instead.",
        kind="url",
        example="https://s3.us-east-1.amazonaws.com or http://127.0.0.1:4566",
        requires=(
            "extendedPayloads=true because the journal's S3 endpoint is a parameter of "
            "journalLocation: s3://bucket/prefix?endpoint_override=...",
        ),
    ),
    OptionSpec(
        "poisonMessagePolicy",
        "fail",
        "What a batch that keeps failing does (SQS's redrive policy never sees a replay). `fail`: "
        "the query keeps failing; after `maxBatchAttempts` attempts the error names the batch and "
        "the `spark-sqs release` command. `deadLetter`: the batch is narrowed by halves until the "
        "failing message is alone, which goes to the dead-letter queue; the rest are delivered "
        "by later batches. See [operations](operations.md#poison-messages).",
        kind="choice",
        choices=("fail", "deadLetter"),
        excludes=(
            "deleteOnCommit=false because messages are never deleted and come back after the "
            "visibility timeout, so the queue's own redrive policy already applies",
        ),
    ),
    OptionSpec(
        "maxBatchAttempts",
        "3",
        "Attempts (task attempts or query runs that read a batch) after which "
        "`poisonMessagePolicy` acts.",
        "int",
        1,
        1000,
    ),
    OptionSpec(
        "deadLetterQueueUrl",
        None,
        "The queue poison messages go to. Default: the target of the queue's RedrivePolicy; "
        "with neither, the query fails at start.",
        kind="queueUrl",
        example="https://sqs.us-east-1.amazonaws.com/123456789012/my-queue-dlq",
        requires=("poisonMessagePolicy=deadLetter",),
    ),
    OptionSpec(
        "heartbeatInterval",
        "visibilityTimeout / 5",
        "Seconds between visibility heartbeats, which keep every message of an unacknowledged "
        "batch invisible until it is deleted. At most a quarter of `visibilityTimeout`.",
        "seconds",
        0.1,
        43200,
        derived=True,
    ),
    OptionSpec(
        "dedupeWindow",
        "21600",
        "Seconds during which a message whose deletion may not have taken effect (expired "
        "handle, crash before acknowledgement) is dropped if SQS delivers it again, on the "
        "driver's clock, counting only the time the query runs (a restart goes on from what "
        "was left).",
        "seconds",
        0,
        14 * 86400,
    ),
    OptionSpec(
        "duplicateWindow",
        "600",
        "Seconds during which a copy that a standard queue delivers after its message was "
        "acknowledged cleanly is dropped (and deleted); 0 turns the window off. FIFO queues "
        "deliver no such copies and never use it.",
        "seconds",
        0,
        86400,
    ),
    OptionSpec(
        "duplicateAttribute",
        None,
        "A message attribute that identifies copies too, besides the MessageId: a message whose "
        "value of it was acknowledged within `duplicateWindow` is dropped. Set "
        "`spark_sqs.dedupeId` to drop the copies that this package's sink sends to a standard "
        "queue when a sink batch is retried or replayed.",
        pattern=r"[A-Za-z0-9_.\-]{1,256}",
        shape="a message attribute name",
        example="spark_sqs.dedupeId",
        excludes=("duplicateWindow=0 because the window is where the values are kept",),
    ),
    OptionSpec(
        "queuePollInterval",
        "1",
        "Seconds between `GetQueueAttributes` calls that check an idle queue for new messages.",
        "seconds",
        0.01,
        3600,
    ),
    OptionSpec(
        "logLevel",
        "INFO",
        "Level of the source's log lines in the driver's streaming-source process (where PySpark "
        "runs `latestOffset`, `partitions` and `commit`; logging configured in a notebook does not "
        "reach it). They are written to that process's stderr, which Spark copies to the driver's "
        "stderr log. See [operations](operations.md#logs).",
        kind="choice",
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "OFF"),
    ),
    *CREDENTIAL_OPTIONS,
)


@dataclass(frozen=True)
class SqsOptions:
    connection: Connection
    journal_location: str
    num_partitions: int
    max_messages_per_trigger: int
    min_messages_per_trigger: int | None
    max_trigger_delay: float
    max_in_flight_messages: int
    wait_time_seconds: int
    visibility_timeout: int
    message_attribute_names: tuple[str, ...]
    delete_on_commit: bool
    delete_after_journal: bool
    queue_poll_interval: float
    heartbeat_interval: float
    dedupe_window: float
    duplicate_window: float = 600.0
    duplicate_attribute: str | None = None
    log_level: str = "INFO"
    journal_sse_kms_key_id: str | None = None
    message_format: str = "raw"
    keep_invalid_envelopes: bool = False
    extended_payloads: bool = False
    delete_extended_payloads: bool = False
    s3_endpoint_url: str | None = None
    poison_message_policy: str = "fail"
    # Bytes: the per-receiver memory bound, and the soft per-batch budget split over receivers.
    max_bytes_per_receiver: int = 64 << 20
    max_bytes_per_trigger: int | None = None
    max_batch_attempts: int = 3
    dead_letter_queue_url: str | None = None

    # The connection's fields, read through the options as the rest of the source reads them.

    @property
    def queue_url(self) -> str | None:
        return self.connection.queue_url

    @property
    def queue_name(self) -> str | None:
        return self.connection.queue_name

    @property
    def queue_owner_account_id(self) -> str | None:
        return self.connection.queue_owner_account_id

    @property
    def queue_urls(self) -> tuple[str, ...]:
        return self.connection.queue_urls

    @property
    def queue_names(self) -> tuple[str, ...]:
        return self.connection.queue_names

    @property
    def region(self) -> str:
        return self.connection.region

    @property
    def endpoint_url(self) -> str | None:
        return self.connection.endpoint_url

    @property
    def credentials(self) -> AwsCredentials | None:
        return self.connection.credentials

    @property
    def profile(self) -> str | None:
        return self.connection.profile

    @property
    def service_credential(self) -> str | None:
        return self.connection.service_credential

    @property
    def assume_role(self) -> AssumeRole | None:
        return self.connection.assume_role

    @property
    def queue_count(self) -> int:
        return self.connection.queue_count

    @property
    def is_fifo(self) -> bool:
        return self.connection.is_fifo

    @property
    def sns(self) -> bool:
        """SNS envelopes are unwrapped and the SNS columns are part of the schema."""
        return self.message_format == "sns"

    @property
    def receive_budget_seconds(self) -> float:
        """How long a receiver keeps receiving before it journals what it has.

        A quarter of the visibility timeout (at most 60 s) leaves the rest of it for journaling,
        the sink and the acknowledgement, before the heartbeat has to step in.
        """
        return min(60.0, self.visibility_timeout / 4.0)

    @classmethod
    def parse(cls, options: Mapping[str, Any], env: Mapping[str, str] | None = None) -> SqsOptions:
        """Validate the user's options. Raises ``InvalidOptionError`` naming the option."""
        fields = SOURCE.parse(options, os.environ if env is None else env)
        return build(cls, {**fields, "connection": build(Connection, fields)})


# -- validators: rules between options that are more than needs/excludes ------------------------


def _journal(check: Check) -> dict[str, Any]:
    journal = check.values["journalLocation"]
    if not journal:
        raise check.missing(
            "journalLocation",
            "the source journals every received message durably before Spark sees it, so that "
            "a replayed micro-batch yields exactly the same rows. Fix: add "
            ".option('journalLocation', '<dir>') with a directory next to the query's "
            "checkpointLocation (local path or s3://bucket/prefix), one per query",
        )
    check_location(journal)
    if journal.startswith("s3://"):
        require_s3_conditional_writes()
    return {}


def _trigger_bounds(check: Check) -> dict[str, Any]:
    low, high = check.values["minMessagesPerTrigger"], check.values["maxMessagesPerTrigger"]
    if low is not None and low > high:
        raise check.invalid(
            "minMessagesPerTrigger",
            low,
            f"is larger than maxMessagesPerTrigger={high}",
            "lower 'minMessagesPerTrigger' or raise 'maxMessagesPerTrigger'",
        )
    return {}


def _visibility_covers_the_long_poll(check: Check) -> dict[str, Any]:
    # A receiver stops after receive_budget_seconds but a call may then still wait
    # waitTimeSeconds; all of that must fit in half the visibility timeout so that the rest
    # covers journaling and acknowledgement.
    visibility, wait = check.values["visibilityTimeout"], check.values["waitTimeSeconds"]
    if visibility / 4.0 + wait > visibility / 2.0:
        raise check.invalid(
            "visibilityTimeout",
            visibility,
            f"is too short for waitTimeSeconds={wait}: messages received at the start of a "
            "receive loop could become visible again before the batch is journaled",
            f"raise 'visibilityTimeout' to at least {4 * wait} or lower 'waitTimeSeconds'",
        )
    return {}


def _heartbeat(check: Check) -> dict[str, Any]:
    visibility, heartbeat = check.values["visibilityTimeout"], check.values["heartbeatInterval"]
    if heartbeat is None:
        return {"heartbeat_interval": visibility / 5.0}
    if heartbeat > visibility / 4.0:
        raise check.invalid(
            "heartbeatInterval",
            heartbeat,
            f"is longer than a quarter of visibilityTimeout={visibility}: messages "
            "journaled late in a receive loop could become visible before the first "
            "heartbeat reaches them",
            f"set 'heartbeatInterval' to at most {visibility / 4.0:g}, or leave it unset",
        )
    return {}


# Message attributes with which the SQS Extended Client marks an offloaded body (current name
# first, then the name older Java clients wrote).
EXTENDED_RESERVED = ("ExtendedPayloadSize", "SQSLargePayloadSize")


def _attributes(check: Check) -> dict[str, Any]:
    names = _attribute_names(check.values["messageAttributeNames"])
    if check.values["extendedPayloads"] and names != ("All",):
        # The reserved attribute is how an offloaded message is recognised: always fetch it.
        names = tuple(dict.fromkeys((*names, *EXTENDED_RESERVED)))
    wanted = check.values.get("duplicateAttribute")
    if wanted and names != ("All",):
        # Copies are recognised by it: always fetch it.
        names = tuple(dict.fromkeys((*names, wanted)))
    return {"message_attribute_names": names}


def _attribute_names(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise InvalidOptionError.for_option(
            "messageAttributeNames",
            text,
            "names no attribute",
            "use 'All', or a comma-separated list of attribute names",
        )
    if any(n.lower() == "all" for n in names):
        return ("All",)
    for n in names:
        if len(n) > 256 or not re.fullmatch(r"[A-Za-z0-9_.\-*]+", n):
            raise InvalidOptionError.for_option(
                "messageAttributeNames",
                text,
                f"'{n}' is not a valid message attribute name",
                "use letters, digits, '_', '-', '.', or a prefix ending in '.*'",
            )
    return names


def _envelopes(check: Check) -> dict[str, Any]:
    return {"keep_invalid_envelopes": check.values["invalidEnvelope"] == "keep"}


# In this order, after the generic pass: the first failing one names its option.
_VALIDATORS = (
    connection.queues,
    connection.region,
    _journal,
    _trigger_bounds,
    _attributes,
    _envelopes,
    _visibility_covers_the_long_poll,
    _heartbeat,
    connection.credentials,
    connection.assume_role,
)

# Options people give the source that belong elsewhere; Spark passes keys lower-cased. A
# close-match suggestion would mislead here ('checkpointLocation' is near 'journalLocation').
_MISPLACED = {
    "checkpointlocation": "'checkpointLocation' is an option of the sink: give it to "
    ".writeStream.option('checkpointLocation', ...), and the source its own 'journalLocation'.",
    "path": "the SQS source takes no path: name the queue with .option('queueUrl', ...) "
    "instead of .load(<path>).",
}

SOURCE = OptionTable("source", OPTIONS, _VALIDATORS, _MISPLACED)


# -- the docs' table -----------------------------------------------------------------------------

MARKDOWN_BEGIN = "<!-- options table: generated from spark_sqs/options.py OPTIONS -->"
MARKDOWN_END = "<!-- end of the options table -->"


def render_markdown() -> str:
    """docs/options.md's option table, one row per entry of ``OPTIONS``."""
    return render_table(SOURCE)


def rewrite_markdown(text: str) -> str:
    """``text`` (docs/options.md) with the table between the markers replaced by the rendered
    one. Raises ``ValueError`` if the markers are missing."""
    head, begin, rest = text.partition(MARKDOWN_BEGIN + "\n")
    _, end, tail = rest.partition(MARKDOWN_END)
    if not begin or not end:
        raise ValueError(f"markers {MARKDOWN_BEGIN!r} ... {MARKDOWN_END!r} not found")
    return f"{head}{begin}{render_markdown()}{end}{tail}"
