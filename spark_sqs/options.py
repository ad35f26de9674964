"""Options of the SQS source: parsed once, validated, frozen. Runs on: driver and executors.

``SqsOptions.parse`` turns the case-insensitive option map given to
``spark.readStream.format("sqs").option(...)`` into one immutable object. It is called when the
DataFrame is created (``load()``), so a bad option fails there with a message that names the
option, the value and the fix. The same object is pickled into every input partition.

``OPTIONS`` is the single table of accepted options; the docs' option table is checked against
it by a test.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .driver.queues import check_one_region, split_queue_option
from .errors import InvalidOptionError
from .journal.stores import check_location


@dataclass(frozen=True)
class OptionSpec:
    name: str
    default: str | None
    doc: str


# name, default (as the user would write it), description. Order is the docs' order.
OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "queueUrl",
        None,
        "URL of the queue, or a comma-separated list of queue URLs (all standard or all FIFO, "
        "one region): receivers are spread over them by backlog. Give this, or `queueName`.",
    ),
    OptionSpec(
        "queueName",
        None,
        "Name of the queue (or a comma-separated list), resolved with `GetQueueUrl` in `region`.",
    ),
    OptionSpec(
        "queueOwnerAccountId", None, "With `queueName`: the 12-digit account that owns the queue."
    ),
    OptionSpec(
        "region",
        None,
        "AWS region. Default: taken from `queueUrl`, else `AWS_REGION`/`AWS_DEFAULT_REGION`.",
    ),
    OptionSpec("endpointUrl", None, "SQS endpoint override (VPC endpoint, LocalStack, moto)."),
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
    OptionSpec("numPartitions", "4", "Receivers (Spark tasks) per micro-batch."),
    OptionSpec(
        "maxMessagesPerTrigger",
        "10000",
        "Upper bound on messages per micro-batch, split evenly across receivers.",
    ),
    OptionSpec(
        "minMessagesPerTrigger",
        None,
        "Wait for at least this many visible messages before starting a micro-batch, but never "
        "longer than `maxTriggerDelay` (as in the Kafka source).",
    ),
    OptionSpec(
        "maxTriggerDelay",
        "900",
        "Seconds: with `minMessagesPerTrigger`, the longest a micro-batch waits for more.",
    ),
    OptionSpec(
        "maxInFlightMessages",
        "60000",
        "Never more messages received and not yet acknowledged than this (SQS allows about "
        "120,000 in flight per queue). Caps every micro-batch, also under Trigger.AvailableNow.",
    ),
    OptionSpec(
        "waitTimeSeconds", "1", "Long-poll wait of each `ReceiveMessage` call, 0-20 seconds."
    ),
    OptionSpec(
        "visibilityTimeout",
        "120",
        "Seconds a received message stays invisible (set on each receive), 1-43200. A receiver "
        "stops receiving after a quarter of it, so the batch is journaled well before it expires.",
    ),
    OptionSpec(
        "messageAttributeNames",
        "All",
        "Comma-separated message attribute names to fetch (`All` for every attribute).",
    ),
    OptionSpec(
        "deleteOnCommit",
        "true",
        "Delete messages once the micro-batch that yielded them is committed. `false` never "
        "deletes (messages reappear after the visibility timeout).",
    ),
    OptionSpec(
        "deleteAfterJournal",
        "false",
        "Delete each message as soon as its receiver has journaled it, before the sink has it. "
        "Lets a FIFO message group yield more than one receive per micro-batch; still exactly "
        "once (the journal replays), but dead-letter redrive no longer applies. See docs/fifo.md.",
    ),
    OptionSpec(
        "messageFormat",
        "raw",
        "`raw`: the body as SQS has it. `sns`: each message is an SNS notification envelope "
        "(a subscription without raw message delivery); `body` becomes the SNS `Message`, the "
        "columns `snsTopicArn`, `snsMessageId`, `snsSubject` and `snsTimestamp` are added and "
        "the SNS message attributes land in `messageAttributes`.",
    ),
    OptionSpec(
        "invalidEnvelope",
        "fail",
        "With `messageFormat=sns`, a message that is not an SNS notification: `fail` leaves it "
        "in the queue (not journaled, visible again at once, so the redrive policy applies) and "
        "fails the task naming its id; `keep` passes it through raw with null SNS columns.",
    ),
    OptionSpec(
        "extendedPayloads",
        "false",
        "`true`: a message the SQS Extended Client (Java or Python) offloaded to S3 is fetched "
        "from S3 by its receiver before it is journaled; `body` holds the payload and the "
        "reserved `ExtendedPayloadSize`/`SQSLargePayloadSize` attribute is removed.",
    ),
    OptionSpec(
        "deleteExtendedPayloads",
        "false",
        "With `extendedPayloads=true`: delete a message's S3 payload once the message is "
        "deleted from the queue (after its micro-batch is committed), never before.",
    ),
    OptionSpec(
        "s3EndpointUrl",
        None,
        "With `extendedPayloads=true`: S3 endpoint override for the payloads (VPC endpoint, "
        "LocalStack, moto). The journal's S3 endpoint is set in `journalLocation` instead.",
    ),
    OptionSpec(
        "poisonMessagePolicy",
        "fail",
        "What a batch that keeps failing does (SQS's redrive policy never sees a replay). `fail`: "
        "the query keeps failing; after `maxBatchAttempts` attempts the error names the batch and "
        "the `spark-sqs release` command. `deadLetter`: the batch is narrowed by halves until the "
        "failing message is alone, which goes to the dead-letter queue; the rest are delivered "
        "by later batches. See docs/operations.md.",
    ),
    OptionSpec(
        "maxBatchAttempts",
        "3",
        "Attempts (task attempts or query runs that read a batch) after which "
        "`poisonMessagePolicy` acts, 1-1000.",
    ),
    OptionSpec(
        "deadLetterQueueUrl",
        None,
        "With `poisonMessagePolicy=deadLetter`: the queue poison messages go to. Default: the "
        "target of the queue's RedrivePolicy; with neither, the query fails at start.",
    ),
    OptionSpec(
        "heartbeatInterval",
        "visibilityTimeout / 5",
        "Seconds between visibility heartbeats, which keep every message of an unacknowledged "
        "batch invisible until it is deleted. At most a quarter of `visibilityTimeout`.",
    ),
    OptionSpec(
        "dedupeWindow",
        "21600",
        "Seconds during which a message whose deletion may not have taken effect (expired "
        "handle, crash before acknowledgement) is dropped if SQS delivers it again.",
    ),
    OptionSpec(
        "queuePollInterval",
        "1",
        "Seconds between `GetQueueAttributes` calls that check an idle queue for new messages.",
    ),
    OptionSpec(
        "awsAccessKeyId", None, "Explicit credentials; default is the AWS credential chain."
    ),
    OptionSpec(
        "profile",
        None,
        "Named profile from the AWS config files (must exist on the driver and every executor).",
    ),
    OptionSpec(
        "roleArn",
        None,
        "IAM role to assume (with the base credentials); refreshed before the session expires.",
    ),
    OptionSpec("roleExternalId", None, "External id for `roleArn`, if the role requires one."),
    OptionSpec("roleSessionName", "spark-sqs", "Session name for `roleArn`."),
    OptionSpec("awsSecretAccessKey", None, "Secret for `awsAccessKeyId`."),
    OptionSpec("awsSessionToken", None, "Session token for temporary credentials."),
)

_CANONICAL = {spec.name.lower(): spec.name for spec in OPTIONS}
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
    credentials: AwsCredentials | None = field(default=None, repr=False)
    profile: str | None = None
    assume_role: AssumeRole | None = None
    journal_sse_kms_key_id: str | None = None
    message_format: str = "raw"
    keep_invalid_envelopes: bool = False
    extended_payloads: bool = False
    delete_extended_payloads: bool = False
    s3_endpoint_url: str | None = None
    poison_message_policy: str = "fail"
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
        env = os.environ if env is None else env
        raw = _normalise_keys(options)

        def get(name: str) -> str | None:
            value = raw.get(name)
            if value is None:
                return _DEFAULTS[name]
            return value

        queue_url = _nonblank(raw, "queueUrl")
        queue_name = _nonblank(raw, "queueName")
        owner = _nonblank(raw, "queueOwnerAccountId")
        if queue_url and queue_name:
            raise InvalidOptionError.for_option(
                "queueName",
                queue_name,
                "conflicts with 'queueUrl'; the queue must be named exactly once",
                "set either 'queueUrl' or 'queueName' (with 'region'), not both",
            )
        if not queue_url and not queue_name:
            raise InvalidOptionError(
                "Missing SQS source option 'queueUrl': the source needs to know which queue to "
                "read. Fix: add .option('queueUrl', 'https://sqs.<region>.amazonaws.com/"
                "<account>/<queue>') or .option('queueName', '<queue>') with .option('region', ...)"
            )
        queue_urls, queue_names = _queue_lists(queue_url, queue_name)
        queue_url = queue_urls[0] if queue_urls else None
        queue_name = queue_names[0] if queue_names else None
        if owner and not queue_name:
            raise InvalidOptionError.for_option(
                "queueOwnerAccountId",
                owner,
                "only applies together with 'queueName'",
                "remove it, or name the queue with 'queueName' instead of 'queueUrl'",
            )
        if owner and not re.fullmatch(r"\d{12}", owner):
            raise InvalidOptionError.for_option(
                "queueOwnerAccountId", owner, "is not a 12-digit AWS account id", "fix the id"
            )

        endpoint_url = _nonblank(raw, "endpointUrl")
        if endpoint_url and not re.match(r"^https?://[^/\s]+", endpoint_url):
            raise InvalidOptionError.for_option(
                "endpointUrl",
                endpoint_url,
                "is not an http(s) URL",
                "give a URL such as https://sqs.us-east-1.amazonaws.com or http://127.0.0.1:4566",
            )

        check_one_region("queueUrl", {u: _region_from_url(u) for u in queue_urls})
        region = _nonblank(raw, "region") or _region_from_url(queue_url) or _region_from_env(env)
        if not region:
            raise InvalidOptionError(
                "Missing SQS source option 'region': it cannot be taken from the queue URL or "
                "from AWS_REGION/AWS_DEFAULT_REGION. Fix: add .option('region', 'us-east-1') "
                "(the queue's region)"
            )
        if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d+", region):
            raise InvalidOptionError.for_option(
                "region", region, "is not an AWS region name", "use a name such as 'eu-west-1'"
            )

        journal = _nonblank(raw, "journalLocation")
        if not journal:
            raise InvalidOptionError(
                "Missing SQS source option 'journalLocation': the source journals every received "
                "message durably before Spark sees it, so that a replayed micro-batch yields "
                "exactly the same rows. Fix: add .option('journalLocation', '<dir>') with a "
                "directory next to the query's checkpointLocation (local path or s3://bucket/"
                "prefix), one per query"
            )
        check_location(journal)

        num_partitions = _int(get, "numPartitions", 1, 1000)
        max_messages = _int(get, "maxMessagesPerTrigger", 1, 1_000_000)
        min_messages = (
            _int(get, "minMessagesPerTrigger", 1, 1_000_000)
            if raw.get("minMessagesPerTrigger") is not None
            else None
        )
        max_delay = _float(get, "maxTriggerDelay", 0.0, 86400.0)
        max_in_flight = _int(get, "maxInFlightMessages", 1, 120_000)
        if min_messages is not None and min_messages > max_messages:
            raise InvalidOptionError.for_option(
                "minMessagesPerTrigger",
                min_messages,
                f"is larger than maxMessagesPerTrigger={max_messages}",
                "lower 'minMessagesPerTrigger' or raise 'maxMessagesPerTrigger'",
            )
        wait = _int(get, "waitTimeSeconds", 0, 20)
        visibility = _int(get, "visibilityTimeout", 1, 43200)
        poll = _float(get, "queuePollInterval", 0.01, 3600.0)
        delete_on_commit = _bool(get, "deleteOnCommit")
        delete_after_journal = _bool(get, "deleteAfterJournal")
        if delete_after_journal and not delete_on_commit:
            raise InvalidOptionError.for_option(
                "deleteAfterJournal",
                "true",
                "conflicts with deleteOnCommit=false, which never deletes",
                "set one of them, not both",
            )
        attribute_names = _attribute_names(get("messageAttributeNames") or "All")
        envelope = _envelope_options(get, raw, delete_on_commit)
        if envelope["extended_payloads"] and attribute_names != ("All",):
            # The reserved attribute is how an offloaded message is recognised: always fetch it.
            attribute_names = tuple(dict.fromkeys((*attribute_names, *EXTENDED_RESERVED)))

        # A receiver stops after receive_budget_seconds but a call may then still wait
        # waitTimeSeconds; all of that must fit in half the visibility timeout so that the rest
        # covers journaling and acknowledgement.
        if visibility / 4.0 + wait > visibility / 2.0:
            raise InvalidOptionError.for_option(
                "visibilityTimeout",
                visibility,
                f"is too short for waitTimeSeconds={wait}: messages received at the start of a "
                "receive loop could become visible again before the batch is journaled",
                f"raise 'visibilityTimeout' to at least {4 * wait} or lower 'waitTimeSeconds'",
            )

        if raw.get("heartbeatInterval") is None:
            heartbeat = visibility / 5.0
        else:
            heartbeat = _float(get, "heartbeatInterval", 0.1, 43200.0)
            if heartbeat > visibility / 4.0:
                raise InvalidOptionError.for_option(
                    "heartbeatInterval",
                    heartbeat,
                    f"is longer than a quarter of visibilityTimeout={visibility}: messages "
                    "journaled late in a receive loop could become visible before the first "
                    "heartbeat reaches them",
                    f"set 'heartbeatInterval' to at most {visibility / 4.0:g}, or leave it unset",
                )
        dedupe_window = _float(get, "dedupeWindow", 0.0, 14 * 86400.0)

        access_key = _nonblank(raw, "awsAccessKeyId")
        secret_key = _nonblank(raw, "awsSecretAccessKey")
        token = _nonblank(raw, "awsSessionToken")
        credentials = None
        if access_key or secret_key:
            if not (access_key and secret_key):
                missing = "awsSecretAccessKey" if access_key else "awsAccessKeyId"
                raise InvalidOptionError(
                    f"Missing SQS source option '{missing}': 'awsAccessKeyId' and "
                    "'awsSecretAccessKey' must be given together. Fix: set both, or neither to "
                    "use the default AWS credential chain"
                )
            credentials = AwsCredentials(access_key, secret_key, token)
        elif token:
            raise InvalidOptionError(
                "Invalid SQS source option 'awsSessionToken': a session token needs "
                "'awsAccessKeyId' and 'awsSecretAccessKey'. Fix: set all three, or none"
            )

        profile = _nonblank(raw, "profile")
        if profile and credentials is not None:
            raise InvalidOptionError.for_option(
                "profile",
                profile,
                "conflicts with 'awsAccessKeyId'/'awsSecretAccessKey'",
                "use either a profile or explicit keys",
            )
        role_arn = _nonblank(raw, "roleArn")
        external_id = _nonblank(raw, "roleExternalId")
        session_name = _nonblank(raw, "roleSessionName") or "spark-sqs"
        assume_role = None
        if role_arn:
            if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+", role_arn):
                raise InvalidOptionError.for_option(
                    "roleArn",
                    role_arn,
                    "is not an IAM role ARN",
                    "use arn:aws:iam::<account>:role/<name>",
                )
            if not re.fullmatch(r"[\w+=,.@-]{2,64}", session_name):
                raise InvalidOptionError.for_option(
                    "roleSessionName",
                    session_name,
                    "is not a valid role session name (2-64 of letters, digits, +=,.@-_)",
                    "choose another name",
                )
            assume_role = AssumeRole(role_arn, external_id, session_name)
        elif external_id or _nonblank(raw, "roleSessionName"):
            key = "roleExternalId" if external_id else "roleSessionName"
            raise InvalidOptionError(
                f"Invalid SQS source option '{key}': it only applies with 'roleArn'. Fix: set "
                "'roleArn' or remove it"
            )

        return cls(
            queue_url=queue_url,
            queue_name=queue_name,
            queue_urls=queue_urls,
            queue_names=queue_names,
            queue_owner_account_id=owner,
            region=region,
            endpoint_url=endpoint_url,
            journal_location=journal,
            journal_sse_kms_key_id=_nonblank(raw, "journalSseKmsKeyId"),
            num_partitions=num_partitions,
            max_messages_per_trigger=max_messages,
            min_messages_per_trigger=min_messages,
            max_trigger_delay=max_delay,
            max_in_flight_messages=max_in_flight,
            wait_time_seconds=wait,
            visibility_timeout=visibility,
            message_attribute_names=attribute_names,
            delete_on_commit=delete_on_commit,
            delete_after_journal=delete_after_journal,
            queue_poll_interval=poll,
            heartbeat_interval=heartbeat,
            dedupe_window=dedupe_window,
            credentials=credentials,
            profile=profile,
            assume_role=assume_role,
            **envelope,
            **_poison_options(get, raw, delete_on_commit),
        )


# Message attributes with which the SQS Extended Client marks an offloaded body (current name
# first, then the name older Java clients wrote).
EXTENDED_RESERVED = ("ExtendedPayloadSize", "SQSLargePayloadSize")


def _envelope_options(
    get: Callable[[str], str | None], raw: Mapping[str, str], delete_on_commit: bool
) -> dict[str, Any]:
    """``messageFormat``, ``invalidEnvelope`` and the extended-payload options."""
    message_format = (get("messageFormat") or "").strip().lower()
    if message_format not in ("raw", "sns"):
        raise InvalidOptionError.for_option(
            "messageFormat",
            get("messageFormat"),
            "is not a message format",
            "use 'raw' (the default) or 'sns' for queues subscribed to an SNS topic without raw "
            "message delivery",
        )
    invalid = (get("invalidEnvelope") or "").strip().lower()
    if invalid not in ("fail", "keep"):
        raise InvalidOptionError.for_option(
            "invalidEnvelope", get("invalidEnvelope"), "is not 'fail' or 'keep'", "use one of them"
        )
    if raw.get("invalidEnvelope") is not None and message_format != "sns":
        raise InvalidOptionError.for_option(
            "invalidEnvelope",
            get("invalidEnvelope"),
            f"only applies with messageFormat=sns (here {message_format})",
            "add .option('messageFormat', 'sns') or remove 'invalidEnvelope'",
        )
    extended = _bool(get, "extendedPayloads")
    delete_payloads = _bool(get, "deleteExtendedPayloads")
    if delete_payloads and not extended:
        raise InvalidOptionError.for_option(
            "deleteExtendedPayloads",
            "true",
            "only applies with extendedPayloads=true",
            "add .option('extendedPayloads', 'true') or remove 'deleteExtendedPayloads'",
        )
    if delete_payloads and not delete_on_commit:
        raise InvalidOptionError.for_option(
            "deleteExtendedPayloads",
            "true",
            "conflicts with deleteOnCommit=false: messages stay in the queue, so their payloads "
            "must stay in S3",
            "set one of them, not both",
        )
    s3_endpoint = _nonblank(raw, "s3EndpointUrl")
    if s3_endpoint is not None:
        if not extended:
            raise InvalidOptionError.for_option(
                "s3EndpointUrl",
                s3_endpoint,
                "only applies with extendedPayloads=true (the journal's S3 endpoint is a "
                "parameter of journalLocation: s3://bucket/prefix?endpoint_override=...)",
                "add .option('extendedPayloads', 'true') or remove 's3EndpointUrl'",
            )
        if not re.match(r"^https?://[^/\s]+", s3_endpoint):
            raise InvalidOptionError.for_option(
                "s3EndpointUrl",
                s3_endpoint,
                "is not an http(s) URL",
                "give a URL such as https://s3.us-east-1.amazonaws.com or http://127.0.0.1:4566",
            )
    return {
        "message_format": message_format,
        "keep_invalid_envelopes": invalid == "keep",
        "extended_payloads": extended,
        "delete_extended_payloads": delete_payloads,
        "s3_endpoint_url": s3_endpoint,
    }


def _poison_options(
    get: Callable[[str], str | None], raw: Mapping[str, str], delete_on_commit: bool
) -> dict[str, Any]:
    """``poisonMessagePolicy``, ``maxBatchAttempts``, ``deadLetterQueueUrl``."""
    text = (get("poisonMessagePolicy") or "").strip()
    policy = {"fail": "fail", "deadletter": "deadLetter"}.get(text.lower())
    if policy is None:
        raise InvalidOptionError.for_option(
            "poisonMessagePolicy",
            text,
            "is not a poison message policy",
            "use 'fail' (the default) or 'deadLetter'",
        )
    attempts = _int(get, "maxBatchAttempts", 1, 1000)
    dead_letter = _nonblank(raw, "deadLetterQueueUrl")
    if dead_letter is not None:
        if policy != "deadLetter":
            raise InvalidOptionError.for_option(
                "deadLetterQueueUrl",
                dead_letter,
                f"only applies with poisonMessagePolicy=deadLetter (here {policy})",
                "add .option('poisonMessagePolicy', 'deadLetter') or remove 'deadLetterQueueUrl'",
            )
        if not re.match(r"^https?://[^/\s]+/.+", dead_letter):
            raise InvalidOptionError.for_option(
                "deadLetterQueueUrl",
                dead_letter,
                "is not a queue URL",
                "use the dead-letter queue's URL, e.g. "
                "https://sqs.us-east-1.amazonaws.com/123456789012/my-queue-dlq",
            )
    if policy == "deadLetter" and not delete_on_commit:
        raise InvalidOptionError.for_option(
            "poisonMessagePolicy",
            policy,
            "conflicts with deleteOnCommit=false: messages are never deleted and come back after "
            "the visibility timeout, so the queue's own redrive policy already applies",
            "remove one of them",
        )
    return {
        "poison_message_policy": policy,
        "max_batch_attempts": attempts,
        "dead_letter_queue_url": dead_letter,
    }


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
        out[canonical] = "" if value is None else str(value)
    return out


def _nonblank(raw: Mapping[str, str], name: str) -> str | None:
    value = raw.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _int(get: Callable[[str], str | None], name: str, low: int, high: int) -> int:
    text = (get(name) or "").strip()
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


def _float(get: Callable[[str], str | None], name: str, low: float, high: float) -> float:
    text = (get(name) or "").strip()
    try:
        value = float(text)
    except ValueError:
        raise InvalidOptionError.for_option(
            name,
            text,
            "is not a number of seconds",
            f"give a number from {_number(low)} to {_number(high)}",
        ) from None
    if not low <= value <= high:
        raise InvalidOptionError.for_option(
            name,
            text,
            f"is out of range {_number(low)}-{_number(high)}",
            f"give a number from {_number(low)} to {_number(high)}",
        )
    return value


def _bool(get: Callable[[str], str | None], name: str) -> bool:
    text = (get(name) or "").strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidOptionError.for_option(name, text, "is not a boolean", "use 'true' or 'false'")


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


def _queue_lists(
    queue_url: str | None, queue_name: str | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The queues of queueUrl / queueName, each entry checked (several queues: queues.py)."""
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
    return queue_urls, queue_names


def _region_from_url(url: str | None) -> str | None:
    if not url:
        return None
    match = _REGION_IN_URL.match(url)
    if not match or "amazonaws.com" not in url:
        return None
    return match.group("region")


def _region_from_env(env: Mapping[str, str]) -> str | None:
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None
