"""How to reach AWS: the queue, its region and endpoint, and the credentials. Runs on: driver
and executors.

The source and the sink take the same connection options, validated by the same rows and
validators here, each inside its own option table (``spark_sqs.options``,
``spark_sqs.sink.options``), so both accept and reject exactly the same values and every error
names the side it came from. The result is one frozen ``Connection``, which is all that
``spark_sqs.sqs.client`` builds sessions and clients from (SQS, the Extended Client's S3
payloads, an ``s3://`` journal; ``spark_sqs.sqs.credentials`` says where their credentials come
from). Only option values travel in pickles: each process builds its own clients.

``queueUrl``/``queueName`` may name a comma-separated list of queues (the source reads several;
the sink refuses more than one): ``split_queue_option`` checks the list, ``check_one_region``
that its URLs share one region, since all queues of a stream share one client.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidOptionError
from .option_table import Check, OptionSpec, OptionTable, build

# Which queue and where: the first rows of both directions' tables.
QUEUE_OPTIONS: tuple[OptionSpec, ...] = (
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
)

# Whose credentials: the last rows of the source's table, after the queue rows in the sink's.
CREDENTIAL_OPTIONS: tuple[OptionSpec, ...] = (
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

CONNECTION_OPTIONS: tuple[OptionSpec, ...] = (*QUEUE_OPTIONS, *CREDENTIAL_OPTIONS)

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
class Connection:
    """The queues and how to reach them, validated; hashable, so clients are cached by it."""

    queue_url: str | None
    queue_name: str | None
    queue_owner_account_id: str | None
    region: str
    endpoint_url: str | None = None
    credentials: AwsCredentials | None = field(default=None, repr=False)
    profile: str | None = None
    service_credential: str | None = None
    assume_role: AssumeRole | None = None
    # Every queue of a comma-separated queueUrl/queueName (queue_url/queue_name: the first).
    queue_urls: tuple[str, ...] = ()
    queue_names: tuple[str, ...] = ()

    @property
    def queue_count(self) -> int:
        return max(1, len(self.queue_urls or self.queue_names))

    @property
    def is_fifo(self) -> bool:
        name = self.queue_name or (self.queue_url or "").rstrip("/").rsplit("/", 1)[-1]
        return name.endswith(".fifo")

    @classmethod
    def parse(cls, options: Mapping[str, Any], env: Mapping[str, str]) -> Connection:
        """The connection options alone (``spark-sqs send``/``inspect``), named as the
        source's in errors."""
        return build(cls, CONNECTION.parse(options, env))


def _queue_name(entry: str) -> str:
    return entry.rstrip("/").rsplit("/", 1)[-1]


def split_queue_option(key: str, value: str | None, *, side: str = "source") -> tuple[str, ...]:
    """The entries of a ``queueUrl``/``queueName`` value (empty tuple for None).

    Raises ``InvalidOptionError`` for an empty entry, a queue named twice, or a mix of FIFO and
    standard queues (their delivery guarantees differ, so one stream holds one kind), naming
    the offending queues."""
    if value is None:
        return ()
    entries = tuple(part.strip() for part in value.split(","))
    if any(not part for part in entries):
        raise InvalidOptionError.for_option(
            key,
            value,
            "has an empty entry in its comma-separated list of queues",
            f"remove the extra comma: '{','.join(p for p in entries if p)}'",
            side=side,
        )
    seen: set[str] = set()
    for entry in entries:
        normal = entry.rstrip("/")
        if normal in seen:
            raise InvalidOptionError.for_option(
                key,
                value,
                f"names the queue '{entry}' twice",
                "name each queue once",
                side=side,
            )
        seen.add(normal)
    fifo = [e for e in entries if _queue_name(e).endswith(".fifo")]
    standard = [e for e in entries if not _queue_name(e).endswith(".fifo")]
    if fifo and standard:
        raise InvalidOptionError.for_option(
            key,
            value,
            f"mixes FIFO queues ({', '.join(fifo)}) with standard queues "
            f"({', '.join(standard)}); one stream reads queues of one kind",
            "read the FIFO queues and the standard queues with two queries",
            side=side,
        )
    return entries


def check_one_region(key: str, regions: Mapping[str, str | None], *, side: str = "source") -> None:
    """All queues of a stream share one client: refuse URLs of different regions."""
    known = {r for r in regions.values() if r}
    if len(known) > 1:
        listed = ", ".join(f"{url} ({region})" for url, region in regions.items() if region)
        raise InvalidOptionError.for_option(
            key,
            ",".join(regions),
            f"names queues in different regions: {listed}",
            "read the queues of each region with their own query",
            side=side,
        )


def region_from_url(url: str | None) -> str | None:
    if not url:
        return None
    match = _REGION_IN_URL.match(url)
    if not match or "amazonaws.com" not in url:
        return None
    return match.group("region")


def _region_from_env(env: Mapping[str, str]) -> str | None:
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None


# -- validators, in each table's list of validators ----------------------------------------------

# What the source and the sink do with the queue, for "Missing ... option 'queueUrl'".
_QUEUE_USE = {"source": "read", "sink": "write to"}


def queues(check: Check) -> dict[str, Any]:
    """The queues of queueUrl / queueName, each entry checked."""
    queue_url, queue_name = check.values["queueUrl"], check.values["queueName"]
    if not queue_url and not queue_name:
        raise check.missing(
            "queueUrl",
            f"the {check.side} needs to know which queue to {_QUEUE_USE[check.side]}. Fix: add "
            ".option('queueUrl', 'https://sqs.<region>.amazonaws.com/<account>/<queue>') or "
            ".option('queueName', '<queue>') with .option('region', ...)",
        )
    queue_urls = split_queue_option("queueUrl", queue_url, side=check.side)
    queue_names = split_queue_option("queueName", queue_name, side=check.side)
    for url in queue_urls:
        if not re.match(r"^https?://[^/\s,]+/.+", url):
            raise check.invalid(
                "queueUrl",
                url,
                "is not a queue URL",
                "use the URL shown by the SQS console or `aws sqs get-queue-url`, e.g. "
                "https://sqs.us-east-1.amazonaws.com/123456789012/my-queue",
            )
    for name in queue_names:
        if not _QUEUE_NAME.match(name):
            raise check.invalid(
                "queueName",
                name,
                "is not a valid SQS queue name (1-80 letters, digits, '-' or '_', FIFO names end "
                "in '.fifo')",
                "give the queue's name, not its URL or ARN (use 'queueUrl' for a URL)",
            )
    check_one_region("queueUrl", {u: region_from_url(u) for u in queue_urls}, side=check.side)
    return {
        "queue_url": queue_urls[0] if queue_urls else None,
        "queue_name": queue_names[0] if queue_names else None,
        "queue_urls": queue_urls,
        "queue_names": queue_names,
    }


def region(check: Check) -> dict[str, Any]:
    """Given, else from the queue URL, else from the environment; checked like a given one."""
    value = check.values["region"]
    if value is None:
        queue_url = check.values["queueUrl"]
        first_url = (split_queue_option("queueUrl", queue_url, side=check.side) or (None,))[0]
        value = region_from_url(first_url) or _region_from_env(check.env)
        if not value:
            raise check.missing(
                "region",
                "it cannot be taken from the queue URL or from AWS_REGION/AWS_DEFAULT_REGION. "
                "Fix: add .option('region', 'us-east-1') (the queue's region)",
            )
        value = check.convert("region", value)
    return {"region": value}


def credentials(check: Check) -> dict[str, Any]:
    access_key = check.values["awsAccessKeyId"]
    secret_key = check.values["awsSecretAccessKey"]
    token = check.values["awsSessionToken"]
    if access_key or secret_key:
        if not (access_key and secret_key):
            missing = "awsSecretAccessKey" if access_key else "awsAccessKeyId"
            raise check.missing(
                missing,
                "'awsAccessKeyId' and 'awsSecretAccessKey' must be given together. Fix: set "
                "both, or neither to use the default AWS credential chain",
            )
        return {"credentials": AwsCredentials(access_key, secret_key, token)}
    if token:
        raise InvalidOptionError(
            f"Invalid SQS {check.side} option 'awsSessionToken': a session token needs "
            "'awsAccessKeyId' and 'awsSecretAccessKey'. Fix: set all three, or none"
        )
    return {"credentials": None}


def assume_role(check: Check) -> dict[str, Any]:
    role_arn = check.values["roleArn"]
    if role_arn is None:
        return {"assume_role": None}
    return {
        "assume_role": AssumeRole(
            role_arn, check.values["roleExternalId"], check.values["roleSessionName"]
        )
    }


CONNECTION = OptionTable("source", CONNECTION_OPTIONS, (queues, region, credentials, assume_role))
