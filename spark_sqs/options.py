"""Options of the SQS source: parsed once, validated, frozen. Runs on: driver and executors.

``SqsOptions.parse`` turns the case-insensitive option map given to
``spark.readStream.format("sqs").option(...)`` into one immutable object. It is called when the
DataFrame is created (``load()``), so a bad option fails there with a message that names the
option, the value and the fix. The same object is pickled into every input partition.

``OPTIONS`` is the one declarative table of accepted options: each row's kind, range, choices,
``requires`` and ``excludes`` drive the generic parse and its errors, and ``render_markdown``
turns the table into docs/options.md's (a test compares the two; ``python -m
devtools.options_doc`` rewrites the file). Rules between options that are more than "needs" or
"excludes" (the visibility timeout against the long poll, the heartbeat against the visibility
timeout, queue lists and regions, credentials) are the small named validators in ``_VALIDATORS``,
which run after the generic pass.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ._compat import require_s3_conditional_writes
from .driver.queues import check_one_region, split_queue_option
from .errors import InvalidOptionError
from .journal.stores import check_location

# How a value is read. "list" values stay text for their validator to split.
KINDS = ("str", "int", "seconds", "bytes", "bool", "choice", "url", "queueUrl", "list")

# The shape a value of a kind must have: (pattern, what it is for "is not ...").
_KIND_SHAPES: dict[str, tuple[str | None, str]] = {
    "url": (r"https?://[^/\s]+.*", "an http(s) URL"),
    "queueUrl": (r"https?://[^/\s]+/.+", "a queue URL"),
}


@dataclass(frozen=True)
class OptionSpec:
    """One accepted option.

    ``requires``/``excludes`` entries are ``"option"`` (that option is given) or
    ``"option=value"`` (it has that value, given or by default), optionally followed by
    ``" because <why>"`` for the error. They apply only while this option is in use: given with
    a value other than its default.
    """

    name: str
    default: str | None
    doc: str
    kind: str = "str"
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    # For "str" kinds: a regular expression the whole value must match, what such a value is
    # ("a 12-digit AWS account id") and an example for the fix. For "list": what it lists.
    pattern: str | None = None
    shape: str = ""
    example: str = ""
    # Never shown in an error (the value) nor in a repr.
    secret: bool = False
    # The default is computed from other options by a validator (``default`` only documents it).
    derived: bool = False
    # Other spellings accepted for it (other sources' names); giving two of them is an error.
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: unknown kind {self.kind!r}")


# Order is the docs' order.
OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "queueUrl",
        None,
        "URL of the queue, or a comma-separated list of queue URLs (all standard or all FIFO, "
        "one region): receivers are spread over them by backlog. Give this, or `queueName`.",
        kind="list",
        shape="queue URLs",
    ),
    OptionSpec(
        "queueName",
        None,
        "Name of the queue (or a comma-separated list), resolved with `GetQueueUrl` in `region`.",
        kind="list",
        shape="queue names",
        excludes=("queueUrl because the queue must be named exactly once",),
    ),
    OptionSpec(
        "queueOwnerAccountId",
        None,
        "The 12-digit account that owns the queue.",
        requires=("queueName",),
        pattern=r"\d{12}",
        shape="a 12-digit AWS account id",
        example="'123456789012'",
    ),
    OptionSpec(
        "region",
        None,
        "AWS region. Default: taken from `queueUrl`, else `AWS_REGION`/`AWS_DEFAULT_REGION`.",
        pattern=r"[a-z]{2}(-[a-z]+)+-\d+",
        shape="an AWS region name",
        example="'eu-west-1'",
    ),
    OptionSpec(
        "endpointUrl",
        None,
        "SQS endpoint override (VPC endpoint, LocalStack, moto).",
        kind="url",
        example="https://sqs.us-east-1.amazonaws.com or http://127.0.0.1:4566",
    ),
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
        "handle, crash before acknowledgement) is dropped if SQS delivers it again.",
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
    OptionSpec(
        "serviceCredential",
        None,
        "Databricks: the name of a Unity Catalog service credential. SQS, the Extended Client's "
        "S3 payloads and an `s3://` journal then use its credentials, from the provider "
        "Databricks documents for notebooks and UDFs (Runtime 16.2+). Databricks does not "
        "document that provider inside a Python data source's processes and this was not "
        "tested on Databricks: where the runtime offers none, the query fails at start naming "
        "the runtime and the alternatives. See "
        "[operations](operations.md#credentials-on-databricks).",
        pattern=r"[^\s]{1,255}",
        shape="a service credential name",
        example="'sqs-orders'",
        excludes=(
            "awsAccessKeyId because the service credential already gives the keys",
            "profile because the service credential already gives the keys",
        ),
    ),
    OptionSpec(
        "awsAccessKeyId",
        None,
        "Explicit credentials, with `awsSecretAccessKey`; default is the AWS credential chain.",
        secret=True,
        aliases=("awsAccessKey",),
    ),
    OptionSpec(
        "profile",
        None,
        "Named profile from the AWS config files (must exist on the driver and every executor).",
        excludes=("awsAccessKeyId", "awsSecretAccessKey"),
    ),
    OptionSpec(
        "roleArn",
        None,
        "IAM role to assume (with the base credentials); refreshed before the session expires.",
        pattern=r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+",
        shape="an IAM role ARN",
        example="arn:aws:iam::<account>:role/<name>",
    ),
    OptionSpec(
        "roleExternalId",
        None,
        "External id for `roleArn`, if the role requires one.",
        requires=("roleArn",),
        secret=True,
    ),
    OptionSpec(
        "roleSessionName",
        "spark-sqs",
        "Session name for `roleArn`.",
        requires=("roleArn",),
        pattern=r"[\w+=,.@-]{2,64}",
        shape="a valid role session name (2-64 of letters, digits, +=,.@-_)",
        example="'nightly-orders'",
    ),
    OptionSpec(
        "awsSecretAccessKey",
        None,
        "Secret for `awsAccessKeyId`, with it.",
        secret=True,
        aliases=("awsSecretKey",),
    ),
    OptionSpec(
        "awsSessionToken",
        None,
        "Session token for temporary credentials, with both keys.",
        secret=True,
    ),
)

SPECS: dict[str, OptionSpec] = {spec.name: spec for spec in OPTIONS}
_CANONICAL = {key.lower(): spec.name for spec in OPTIONS for key in (spec.name, *spec.aliases)}
_DEFAULTS = {spec.name: spec.default for spec in OPTIONS}

# https://sqs.us-east-1.amazonaws.com/123456789012/q, https://us-east-1.queue.amazonaws.com/...,
# https://sqs.cn-north-1.amazonaws.com.cn/..., https://sqs-fips.us-gov-west-1.amazonaws.com/...
_REGION_IN_URL = re.compile(r"^https?://(?:sqs(?:-fips)?\.)?(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)\.")
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$|^[A-Za-z0-9_-]{1,75}\.fifo$")


@dataclass(frozen=True)
class AssumeRole:
    role_arn: str
    external_id: str | None = field(default=None, repr=False)
    session_name: str = "spark-sqs"


@dataclass(frozen=True)
class AwsCredentials:
    """Explicit credentials; never shown by ``repr`` or logs."""

    access_key_id: str = field(repr=False)
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SqsOptions:
    queue_url: str | None
    queue_name: str | None
    queue_owner_account_id: str | None
    region: str
    endpoint_url: str | None
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
    credentials: AwsCredentials | None = field(default=None, repr=False)
    profile: str | None = None
    service_credential: str | None = None
    log_level: str = "INFO"
    assume_role: AssumeRole | None = None
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
    # Every queue of a comma-separated queueUrl/queueName (queue_url/queue_name: the first).
    queue_urls: tuple[str, ...] = ()
    queue_names: tuple[str, ...] = ()

    @property
    def queue_count(self) -> int:
        return max(1, len(self.queue_urls or self.queue_names))

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

    @property
    def is_fifo(self) -> bool:
        name = self.queue_name or (self.queue_url or "").rstrip("/").rsplit("/", 1)[-1]
        return name.endswith(".fifo")

    @classmethod
    def parse(cls, options: Mapping[str, Any], env: Mapping[str, str] | None = None) -> SqsOptions:
        """Validate the user's options. Raises ``InvalidOptionError`` naming the option."""
        given = _normalise_keys(options)
        values = {spec.name: _value(spec, given) for spec in OPTIONS}
        _check_rules(given, values)
        fields = {f.name for f in dataclasses.fields(cls)}
        result = {_field_name(n): v for n, v in values.items() if _field_name(n) in fields}
        check = _Check(values, os.environ if env is None else env)
        for validator in _VALIDATORS:
            result.update(validator(check))
        return cls(**result)


# -- the generic pass: one value per option, from the table --------------------------------------


def _value(spec: OptionSpec, given: Mapping[str, str]) -> Any:
    """The option's value of its kind: given, else its default; None when it has neither."""
    text = given.get(spec.name)
    if spec.kind in ("str", "url", "queueUrl", "list"):
        text = (text or "").strip() or None  # blank means not given
    if text is None:
        if spec.default is None or spec.derived:
            return None
        text = spec.default
    return _convert(spec, text)


def _convert(spec: OptionSpec, text: str) -> Any:
    name, text = spec.name, text.strip()
    if spec.kind == "int":
        return _to_int(name, text, int(spec.low or 0), int(spec.high or 0))
    if spec.kind == "seconds":
        return _to_seconds(name, text, float(spec.low or 0), float(spec.high or 0))
    if spec.kind == "bytes":
        return _to_bytes(name, text, int(spec.low or 0), int(spec.high or 0))
    if spec.kind == "bool":
        return _to_bool(name, text)
    if spec.kind == "choice":
        for choice in spec.choices:
            if choice.lower() == text.lower():
                return choice
        raise InvalidOptionError.for_option(
            name,
            text,
            "is not " + " or ".join(f"'{c}'" for c in spec.choices),
            "use "
            + " or ".join(
                f"'{c}'" + (" (the default)" if c == spec.default else "") for c in spec.choices
            ),
        )
    pattern, shape = _KIND_SHAPES.get(spec.kind, (spec.pattern, spec.shape))
    if pattern is not None and not re.fullmatch(pattern, text):
        example = f" such as {spec.example}" if spec.example else ""
        raise InvalidOptionError.for_option(name, text, f"is not {shape}", f"give {shape}{example}")
    return text


def _to_int(name: str, text: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidOptionError.for_option(
            name, text, "is not a whole number", f"give an integer from {low} to {high}"
        ) from None
    if not low <= value <= high:
        raise InvalidOptionError.for_option(
            name, text, f"is out of range {low}-{high}", f"give an integer from {low} to {high}"
        )
    return value


def _number(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:g}"


def _to_seconds(name: str, text: str, low: float, high: float) -> float:
    bounds = f"from {_number(low)} to {_number(high)}"
    try:
        value = float(text)
    except ValueError:
        raise InvalidOptionError.for_option(
            name, text, "is not a number of seconds", f"give a number {bounds}"
        ) from None
    if math.isnan(value) or not low <= value <= high:
        raise InvalidOptionError.for_option(
            name, text, f"is out of range {_number(low)}-{_number(high)}", f"give a number {bounds}"
        )
    return value


# Byte sizes as Spark writes them (spark.executor.memory, Auto Loader's maxBytesPerTrigger):
# binary multiples, the unit's "b"/"ib" optional, any case.
_BYTE_UNITS = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}
_BYTE_SIZE = re.compile(r"(\d+)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)


def byte_size_text(value: int) -> str:
    """``value`` bytes as the largest exact unit: ``64m``, ``1g``, ``1536k``."""
    for unit in ("t", "g", "m", "k"):
        shift = _BYTE_UNITS[unit]
        if value and value % (1 << shift) == 0:
            return f"{value >> shift}{unit}"
    return str(value)


def _to_bytes(name: str, text: str, low: int, high: int) -> int:
    bounds = f"from {byte_size_text(low)} to {byte_size_text(high)}"
    match = _BYTE_SIZE.fullmatch(text.strip())
    if match is None:
        raise InvalidOptionError.for_option(
            name,
            text,
            "is not a byte size",
            f"give a number of bytes with an optional unit k, m, g or t (e.g. '64m'), {bounds}",
        )
    value = int(match.group(1)) << _BYTE_UNITS[match.group(2).lower()]
    if not low <= value <= high:
        raise InvalidOptionError.for_option(
            name,
            text,
            f"is out of range {byte_size_text(low)}-{byte_size_text(high)}",
            f"give a byte size {bounds}",
        )
    return value


def _to_bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise InvalidOptionError.for_option(name, lowered, "is not a boolean", "use 'true' or 'false'")


# -- requires / excludes -------------------------------------------------------------------------


def _rule(entry: str) -> tuple[str, str | None, str]:
    """``"option=value because why"`` -> (option, value or None, why)."""
    condition, _, why = entry.partition(" because ")
    option, equals, value = condition.partition("=")
    return option, (value if equals else None), why


def _in_use(name: str, given: Mapping[str, str], values: Mapping[str, Any]) -> bool:
    """Given, with a value other than the default: an option at its default never conflicts."""
    spec = SPECS[name]
    if name not in given or values[name] is None:
        return False
    return spec.default is None or spec.derived or values[name] != _convert(spec, spec.default)


def _holds(
    option: str, value: str | None, given: Mapping[str, str], values: Mapping[str, Any]
) -> bool:
    if value is None:
        return _in_use(option, given, values)
    return values[option] == _convert(SPECS[option], value)


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _fail(spec: OptionSpec, given: Mapping[str, str], problem: str, fix: str) -> NoReturn:
    # The value is shown unless it is a secret (then not even as <redacted>: nothing to fix in it).
    shown = "" if spec.secret else f" = {given[spec.name].strip()!r}"
    raise InvalidOptionError(
        f"Invalid SQS source option '{spec.name}'{shown}: {problem}. Fix: {fix}"
    )


def _check_rules(given: Mapping[str, str], values: Mapping[str, Any]) -> None:
    for spec in OPTIONS:
        if not _in_use(spec.name, given, values):
            continue
        for entry in spec.requires:
            option, value, why = _rule(entry)
            if _holds(option, value, given, values):
                continue
            because = f": {why}" if why else ""
            if value is not None:
                here = _shown(values[option])
                _fail(
                    spec,
                    given,
                    f"it only applies with {option}={value} (here {here}){because}",
                    f"add .option('{option}', '{value}') or remove '{spec.name}'",
                )
            instead = _alternatives(option, given, values)
            if instead:
                _fail(
                    spec,
                    given,
                    f"it only applies together with '{option}', not with '{instead}'{because}",
                    f"remove it, or give '{option}' instead of '{instead}'",
                )
            _fail(
                spec,
                given,
                f"it only applies with '{option}'{because}",
                f"set '{option}' or remove '{spec.name}'",
            )
        for entry in spec.excludes:
            option, value, why = _rule(entry)
            if not _holds(option, value, given, values):
                continue
            other = f"{option}={value}" if value is not None else f"'{option}'"
            because = f": {why}" if why else ""
            _fail(
                spec,
                given,
                f"conflicts with {other}{because}",
                f"set either '{spec.name}' or {other}, not both",
            )


def _alternatives(option: str, given: Mapping[str, str], values: Mapping[str, Any]) -> str | None:
    """A given option that stands in place of ``option`` (the two exclude each other)."""
    rivals = [_rule(e)[0] for e in SPECS[option].excludes]
    rivals += [s.name for s in OPTIONS if option in (_rule(e)[0] for e in s.excludes)]
    return next((r for r in rivals if _in_use(r, given, values)), None)


# -- validators: rules between options that are more than needs/excludes ------------------------


@dataclass(frozen=True)
class _Check:
    values: Mapping[str, Any]
    env: Mapping[str, str]


def _queues(check: _Check) -> dict[str, Any]:
    """The queues of queueUrl / queueName, each entry checked (several queues: driver/queues.py)."""
    queue_url, queue_name = check.values["queueUrl"], check.values["queueName"]
    if not queue_url and not queue_name:
        raise InvalidOptionError(
            "Missing SQS source option 'queueUrl': the source needs to know which queue to "
            "read. Fix: add .option('queueUrl', 'https://sqs.<region>.amazonaws.com/"
            "<account>/<queue>') or .option('queueName', '<queue>') with .option('region', ...)"
        )
    queue_urls = split_queue_option("queueUrl", queue_url)
    queue_names = split_queue_option("queueName", queue_name)
    for url in queue_urls:
        if not re.match(r"^https?://[^/\s,]+/.+", url):
            raise InvalidOptionError.for_option(
                "queueUrl",
                url,
                "is not a queue URL",
                "use the URL shown by the SQS console or `aws sqs get-queue-url`, e.g. "
                "https://sqs.us-east-1.amazonaws.com/123456789012/my-queue",
            )
    for name in queue_names:
        if not _QUEUE_NAME.match(name):
            raise InvalidOptionError.for_option(
                "queueName",
                name,
                "is not a valid SQS queue name (1-80 letters, digits, '-' or '_', FIFO names end "
                "in '.fifo')",
                "give the queue's name, not its URL or ARN (use 'queueUrl' for a URL)",
            )
    check_one_region("queueUrl", {u: _region_from_url(u) for u in queue_urls})
    return {
        "queue_url": queue_urls[0] if queue_urls else None,
        "queue_name": queue_names[0] if queue_names else None,
        "queue_urls": queue_urls,
        "queue_names": queue_names,
    }


def _region(check: _Check) -> dict[str, Any]:
    """Given, else from the queue URL, else from the environment; checked like a given one."""
    region = check.values["region"]
    if region is None:
        first_url = (split_queue_option("queueUrl", check.values["queueUrl"]) or (None,))[0]
        region = _region_from_url(first_url) or _region_from_env(check.env)
        if not region:
            raise InvalidOptionError(
                "Missing SQS source option 'region': it cannot be taken from the queue URL or "
                "from AWS_REGION/AWS_DEFAULT_REGION. Fix: add .option('region', 'us-east-1') "
                "(the queue's region)"
            )
        region = _convert(SPECS["region"], region)
    return {"region": region}


def _journal(check: _Check) -> dict[str, Any]:
    journal = check.values["journalLocation"]
    if not journal:
        raise InvalidOptionError(
            "Missing SQS source option 'journalLocation': the source journals every received "
            "message durably before Spark sees it, so that a replayed micro-batch yields "
            "exactly the same rows. Fix: add .option('journalLocation', '<dir>') with a "
            "directory next to the query's checkpointLocation (local path or s3://bucket/"
            "prefix), one per query"
        )
    check_location(journal)
    if journal.startswith("s3://"):
        require_s3_conditional_writes()
    return {}


def _trigger_bounds(check: _Check) -> dict[str, Any]:
    low, high = check.values["minMessagesPerTrigger"], check.values["maxMessagesPerTrigger"]
    if low is not None and low > high:
        raise InvalidOptionError.for_option(
            "minMessagesPerTrigger",
            low,
            f"is larger than maxMessagesPerTrigger={high}",
            "lower 'minMessagesPerTrigger' or raise 'maxMessagesPerTrigger'",
        )
    return {}


def _visibility_covers_the_long_poll(check: _Check) -> dict[str, Any]:
    # A receiver stops after receive_budget_seconds but a call may then still wait
    # waitTimeSeconds; all of that must fit in half the visibility timeout so that the rest
    # covers journaling and acknowledgement.
    visibility, wait = check.values["visibilityTimeout"], check.values["waitTimeSeconds"]
    if visibility / 4.0 + wait > visibility / 2.0:
        raise InvalidOptionError.for_option(
            "visibilityTimeout",
            visibility,
            f"is too short for waitTimeSeconds={wait}: messages received at the start of a "
            "receive loop could become visible again before the batch is journaled",
            f"raise 'visibilityTimeout' to at least {4 * wait} or lower 'waitTimeSeconds'",
        )
    return {}


def _heartbeat(check: _Check) -> dict[str, Any]:
    visibility, heartbeat = check.values["visibilityTimeout"], check.values["heartbeatInterval"]
    if heartbeat is None:
        return {"heartbeat_interval": visibility / 5.0}
    if heartbeat > visibility / 4.0:
        raise InvalidOptionError.for_option(
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


def _attributes(check: _Check) -> dict[str, Any]:
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


def _envelopes(check: _Check) -> dict[str, Any]:
    return {"keep_invalid_envelopes": check.values["invalidEnvelope"] == "keep"}


def _credentials(check: _Check) -> dict[str, Any]:
    access_key = check.values["awsAccessKeyId"]
    secret_key = check.values["awsSecretAccessKey"]
    token = check.values["awsSessionToken"]
    if access_key or secret_key:
        if not (access_key and secret_key):
            missing = "awsSecretAccessKey" if access_key else "awsAccessKeyId"
            raise InvalidOptionError(
                f"Missing SQS source option '{missing}': 'awsAccessKeyId' and "
                "'awsSecretAccessKey' must be given together. Fix: set both, or neither to "
                "use the default AWS credential chain"
            )
        return {"credentials": AwsCredentials(access_key, secret_key, token)}
    if token:
        raise InvalidOptionError(
            "Invalid SQS source option 'awsSessionToken': a session token needs "
            "'awsAccessKeyId' and 'awsSecretAccessKey'. Fix: set all three, or none"
        )
    return {"credentials": None}


def _assume_role(check: _Check) -> dict[str, Any]:
    role_arn = check.values["roleArn"]
    if role_arn is None:
        return {"assume_role": None}
    return {
        "assume_role": AssumeRole(
            role_arn, check.values["roleExternalId"], check.values["roleSessionName"]
        )
    }


# In this order, after the generic pass: the first failing one names its option.
_VALIDATORS: tuple[Callable[[_Check], dict[str, Any]], ...] = (
    _queues,
    _region,
    _journal,
    _trigger_bounds,
    _attributes,
    _envelopes,
    _visibility_covers_the_long_poll,
    _heartbeat,
    _credentials,
    _assume_role,
)


# -- keys ----------------------------------------------------------------------------------------

# Options people give the source that belong elsewhere; Spark passes keys lower-cased. A
# close-match suggestion would mislead here ('checkpointLocation' is near 'journalLocation').
_MISPLACED = {
    "checkpointlocation": "'checkpointLocation' is an option of the sink: give it to "
    ".writeStream.option('checkpointLocation', ...), and the source its own 'journalLocation'.",
    "path": "the SQS source takes no path: name the queue with .option('queueUrl', ...) "
    "instead of .load(<path>).",
}


def _normalise_keys(options: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in options.items():
        canonical = _CANONICAL.get(str(key).lower())
        if canonical is None:
            close = difflib.get_close_matches(str(key).lower(), list(_CANONICAL), n=1)
            hint = _MISPLACED.get(str(key).lower()) or (
                f"did you mean '{_CANONICAL[close[0]]}'?" if close else "see the option table"
            )
            raise InvalidOptionError(
                f"Unknown SQS source option '{key}'. Fix: remove it or correct the name; {hint} "
                f"Accepted options: {', '.join(s.name for s in OPTIONS)}"
            )
        if canonical in out:
            spellings = " and ".join(
                f"'{k}'" for k in options if _CANONICAL.get(str(k).lower()) == canonical
            )
            raise InvalidOptionError(
                f"SQS source option '{canonical}' is given twice, as {spellings}. Fix: give "
                "one of these spellings"
            )
        out[canonical] = "" if value is None else str(value)
    return out


def _field_name(option: str) -> str:
    """``queueOwnerAccountId`` -> ``queue_owner_account_id`` (the SqsOptions field)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", option).lower()


def _region_from_url(url: str | None) -> str | None:
    if not url:
        return None
    match = _REGION_IN_URL.match(url)
    if not match or "amazonaws.com" not in url:
        return None
    return match.group("region")


def _region_from_env(env: Mapping[str, str]) -> str | None:
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None


# -- helpers the sink's options share (spark_sqs/sink/options.py) --------------------------------


def _nonblank(raw: Mapping[str, str], name: str) -> str | None:
    value = raw.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _int(get: Callable[[str], str | None], name: str, low: int, high: int) -> int:
    return _to_int(name, (get(name) or "").strip(), low, high)


def _bool(get: Callable[[str], str | None], name: str) -> bool:
    return _to_bool(name, get(name) or "")


# -- the docs' table -----------------------------------------------------------------------------

MARKDOWN_BEGIN = "<!-- options table: generated from spark_sqs/options.py OPTIONS -->"
MARKDOWN_END = "<!-- end of the options table -->"


def _kind_text(spec: OptionSpec) -> str:
    if spec.kind == "int":
        return f"integer {_number(spec.low or 0)}-{_number(spec.high or 0)}"
    if spec.kind == "seconds":
        return f"seconds {_number(spec.low or 0)}-{_number(spec.high or 0)}"
    if spec.kind == "bytes":
        low, high = int(spec.low or 0), int(spec.high or 0)
        return f"byte size {byte_size_text(low)}-{byte_size_text(high)}"
    if spec.kind == "choice":
        return " or ".join(f"`{c}`" for c in spec.choices)
    return {
        "bool": "boolean",
        "url": "URL",
        "queueUrl": "queue URL",
        "list": f"list of {spec.shape}",
        "str": "string",
    }[spec.kind]


def _conditions(entries: tuple[str, ...]) -> str:
    shown = []
    for entry in entries:
        option, value, _ = _rule(entry)
        shown.append(f"`{option}={value}`" if value is not None else f"`{option}`")
    return ", ".join(shown)


def render_markdown() -> str:
    """docs/options.md's option table, one row per entry of ``OPTIONS``."""
    excluded_by: dict[str, list[str]] = {}
    for spec in OPTIONS:
        for entry in spec.excludes:
            option, value, _ = _rule(entry)
            if value is None:
                excluded_by.setdefault(option, []).append(spec.name)
    lines = ["| option | type | default | meaning |", "| --- | --- | --- | --- |"]
    for spec in OPTIONS:
        meaning = spec.doc
        if spec.requires:
            meaning += f" Only with {_conditions(spec.requires)}."
        excludes = (*spec.excludes, *excluded_by.get(spec.name, ()))
        if excludes:
            meaning += f" Not with {_conditions(excludes)}."
        if spec.aliases:
            meaning += " Also spelled " + ", ".join(f"`{a}`" for a in spec.aliases) + "."
        default = f"`{spec.default}`" if spec.default is not None else ""
        lines.append(f"| `{spec.name}` | {_kind_text(spec)} | {default} | {meaning} |")
    return "\n".join(lines) + "\n"


def rewrite_markdown(text: str) -> str:
    """``text`` (docs/options.md) with the table between the markers replaced by the rendered
    one. Raises ``ValueError`` if the markers are missing."""
    head, begin, rest = text.partition(MARKDOWN_BEGIN + "\n")
    _, end, tail = rest.partition(MARKDOWN_END)
    if not begin or not end:
        raise ValueError(f"markers {MARKDOWN_BEGIN!r} ... {MARKDOWN_END!r} not found")
    return f"{head}{begin}{render_markdown()}{end}{tail}"
