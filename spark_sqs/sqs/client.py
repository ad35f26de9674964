"""boto3 SQS client construction, queue resolution and AWS error classification.

Runs on: driver and executors. Clients are created lazily in each process (they do not pickle);
retries of throttling, 5xx and network errors are botocore's, configured through
``Config(retries=...)``.
"""

from __future__ import annotations

import logging
import platform
import re
from collections.abc import Callable
from typing import Any, Protocol

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from ..connection import Connection
from ..errors import QueueNotFoundError, SqsAccessError, SqsSourceError, TransientSqsError
from ..per_process import PerProcess
from . import credentials

logger = logging.getLogger(__name__)

_QUEUE_MISSING = {
    "AWS.SimpleQueueService.NonExistentQueue",
    "QueueDoesNotExist",
    "NonExistentQueue",
}
_ACCESS = {
    "AccessDenied",
    "AccessDeniedException",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidSecurity",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "KMS.AccessDeniedException",
}
_TRANSIENT = {
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ServiceUnavailable",
    "InternalError",
    "InternalFailure",
    "KmsThrottled",
    "KMS.ThrottlingException",
    "AWS.SimpleQueueService.RequestThrottled",
}


class SqsClient(Protocol):
    """The calls this package makes on a boto3 SQS client. boto3 builds the client's class at
    run time, so this names what we rely on; every call takes the API's keyword arguments and
    returns its parsed response."""

    def receive_message(self, **kwargs: Any) -> dict[str, Any]: ...
    def delete_message(self, **kwargs: Any) -> dict[str, Any]: ...
    def delete_message_batch(self, **kwargs: Any) -> dict[str, Any]: ...
    def change_message_visibility_batch(self, **kwargs: Any) -> dict[str, Any]: ...
    def send_message(self, **kwargs: Any) -> dict[str, Any]: ...
    def send_message_batch(self, **kwargs: Any) -> dict[str, Any]: ...
    def get_queue_url(self, **kwargs: Any) -> dict[str, Any]: ...
    def get_queue_attributes(self, **kwargs: Any) -> dict[str, Any]: ...


# botocore rebuilds its default User-Agent twice for every request (about a tenth of the CPU of
# a ReceiveMessage of 10 messages, most of it sanitising the same components again); a fixed
# header is joined from these strings instead (boto3's session appends ``Botocore/<version>``,
# the clients ``spark-sqs``): the same SDK, language and versions, without botocore's
# per-request feature codes.
USER_AGENT = (
    f"Boto3/{boto3.__version__} lang/python#{platform.python_version()} "
    f"md/pyimpl#{platform.python_implementation()}"
)


def make_client(
    connection: Connection,
    *,
    wait_time_seconds: int = 0,
    max_pool_connections: int = 16,
    parameter_validation: bool = True,
) -> SqsClient:
    """A new SQS client for this process, for long polls of up to ``wait_time_seconds`` (none
    by default: the sink and the command line never receive). ``parameter_validation=False``
    skips botocore's check of every request against the API model: for callers whose requests
    are built and checked by this package (the sink's send loop and the receivers' receives
    and deletes, where it is about a tenth of botocore's CPU per call)."""
    config = Config(
        parameter_validation=parameter_validation,
        region_name=connection.region,
        retries={"mode": "standard", "max_attempts": 5},
        connect_timeout=10,
        # A long poll holds the connection for waitTimeSeconds; leave room for the response.
        read_timeout=wait_time_seconds + 20,
        max_pool_connections=max_pool_connections,
        user_agent=USER_AGENT,
        user_agent_extra="spark-sqs",
    )
    kwargs: dict[str, Any] = {"config": config}
    if connection.endpoint_url:
        kwargs["endpoint_url"] = connection.endpoint_url
    return make_session(connection).client("sqs", **kwargs)


def make_session(connection: Connection) -> boto3.session.Session:
    """A boto3 session with the connection's credentials (``spark_sqs.sqs.credentials`` says
    where they come from): a service credential, explicit keys, a profile, or the default chain,
    then (with ``roleArn``) an assumed role that botocore refreshes before it expires."""
    region = connection.region
    if connection.service_credential:
        base = credentials.session_with(
            credentials.service_credentials(connection.service_credential), region
        )
    else:
        base = botocore.session.Session(profile=connection.profile)
        if connection.profile and connection.profile not in base.available_profiles:
            raise SqsAccessError(
                f"AWS profile {connection.profile!r} is not defined. Fix: define it in the AWS "
                "config files on the driver and on every executor, or remove the 'profile' "
                "option"
            )
        keys = connection.credentials
        if keys is not None:
            base.set_credentials(keys.access_key_id, keys.secret_access_key, keys.session_token)
        if region:
            base.set_config_variable("region", region)
    role = connection.assume_role
    if role is None:
        return boto3.session.Session(botocore_session=base, region_name=region)
    assumed = credentials.assumed_role_credentials(
        base,
        role.role_arn,
        role.session_name,
        role.external_id,
        on_error=lambda exc: classify(exc, "AssumeRole", role.role_arn),
    )
    return boto3.session.Session(
        botocore_session=credentials.session_with(assumed, region), region_name=region
    )


_CLIENTS: PerProcess[tuple[Connection, int], SqsClient] = PerProcess()


def cached_client(connection: Connection, *, wait_time_seconds: int) -> SqsClient:
    """One client per connection and long poll per process: Python workers are reused across
    tasks, and a new client (and, with roleArn, a new AssumeRole call) per task is slow."""
    # The receivers' requests (receive, delete, visibility) are built by this package from
    # parsed options: botocore's model check of each is CPU spent per message.
    return _CLIENTS.get_or_build(
        (connection, wait_time_seconds),
        lambda: make_client(
            connection, wait_time_seconds=wait_time_seconds, parameter_validation=False
        ),
    )


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code.isdigit():
            # An endpoint that answers a JSON-protocol call with an XML error (some emulators,
            # some proxies) leaves botocore with only the HTTP status: find the real code.
            match = re.search(r"<Code>([^<]+)</Code>", _message(exc))
            if match:
                return match.group(1)
        return code
    return type(exc).__name__


def classify(exc: BaseException, action: str, resource: str) -> SqsSourceError:
    """Turn a botocore failure into a spark-sqs error that says what to do."""
    if isinstance(exc, SqsSourceError):
        return exc
    code = error_code(exc)
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return SqsAccessError(
            f"No AWS credentials found for SQS {action} on {resource}. Fix: configure the "
            "default credential chain (instance profile, AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY, ~/.aws) or set the 'awsAccessKeyId' and "
            "'awsSecretAccessKey' options"
        )
    if code in _QUEUE_MISSING:
        return QueueNotFoundError(
            f"SQS queue {resource} does not exist (or these credentials cannot see it) "
            f"[{action}: {code}]. Fix: check 'queueUrl'/'queueName', 'region' and "
            "'queueOwnerAccountId', or create the queue"
        )
    status = (
        exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if isinstance(exc, ClientError)
        else 0
    )
    if code in _ACCESS or status == 403:
        return SqsAccessError(
            f"AWS rejected SQS {action} on {resource} [{code}]. Fix: check the credentials "
            f"and allow 'sqs:{action}' on the queue in the IAM policy (see conf/iam-policy.json)"
        )
    if isinstance(exc, ClientError):
        if code in _TRANSIENT or (isinstance(status, int) and status >= 500):
            return TransientSqsError(f"SQS {action} on {resource} failed transiently [{code}]")
        return SqsSourceError(f"SQS {action} on {resource} failed [{code}]: {_message(exc)}")
    if isinstance(exc, (BotoConnectionError, BotoCoreError, OSError)):
        return TransientSqsError(
            f"SQS {action} on {resource} failed with a network error [{type(exc).__name__}]"
        )
    return SqsSourceError(f"SQS {action} on {resource} failed: {type(exc).__name__}: {exc}")


# Receipt handles are long base64 strings; AWS error messages sometimes quote them.
_LONG_TOKEN = re.compile(r"[A-Za-z0-9+/=_-]{64,}")


def _message(exc: ClientError) -> str:
    text = str(exc.response.get("Error", {}).get("Message", ""))
    return _LONG_TOKEN.sub("<redacted>", text)[:300]


def resolve_queue_url(client: SqsClient, connection: Connection) -> str:
    """The queue URL, checked to exist and to be readable with these credentials."""
    if connection.queue_url:
        url = connection.queue_url
    else:
        kwargs: dict[str, Any] = {"QueueName": connection.queue_name}
        if connection.queue_owner_account_id:
            kwargs["QueueOwnerAWSAccountId"] = connection.queue_owner_account_id
        try:
            url = client.get_queue_url(**kwargs)["QueueUrl"]
        except Exception as exc:
            raise classify(exc, "GetQueueUrl", repr(connection.queue_name)) from None
    return url


def queue_attributes(client: SqsClient, queue_url: str, names: list[str]) -> dict[str, str]:
    try:
        return client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names).get(
            "Attributes", {}
        )
    except Exception as exc:
        raise classify(exc, "GetQueueAttributes", queue_url) from None


def queue_counts(client: SqsClient, queue_url: str) -> tuple[int, int]:
    """(visible, in flight): SQS's approximate counts of the queue."""
    attrs = queue_attributes(
        client,
        queue_url,
        ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )
    return int(attrs["ApproximateNumberOfMessages"]), int(
        attrs["ApproximateNumberOfMessagesNotVisible"]
    )


# Can never name a message: an authorised call fails for the handle (ReceiptHandleIsInvalid), a
# denied one with 403 before the handle is looked at.
_PROBE_HANDLE = "spark-sqs-permission-probe"


def check_permissions(client: SqsClient, queue_url: str, *, delete: bool) -> None:
    """Fail at query start if the credentials may not change visibility or (``delete``) delete.

    Without this, a missing ``sqs:DeleteMessage`` shows only after the first micro-batch
    received and wrote its messages, and a missing ``sqs:ChangeMessageVisibility`` only once the
    heartbeat has to extend a long batch. The calls use a receipt handle that matches no
    message, so they change nothing. Only an access or missing-queue error stops the query;
    anything else (throttling, an emulator that answers differently) is logged and left to the
    real calls.
    """
    checks: list[tuple[str, Callable[[], object]]] = [
        (
            "ChangeMessageVisibility",
            lambda: client.change_message_visibility_batch(
                QueueUrl=queue_url,
                Entries=[{"Id": "probe", "ReceiptHandle": _PROBE_HANDLE, "VisibilityTimeout": 0}],
            ),
        )
    ]
    if delete:
        checks.append(
            (
                "DeleteMessage",
                lambda: client.delete_message_batch(
                    QueueUrl=queue_url, Entries=[{"Id": "probe", "ReceiptHandle": _PROBE_HANDLE}]
                ),
            )
        )
    for action, call in checks:
        try:
            call()
        except Exception as exc:
            err = classify(exc, action, queue_url)
            if isinstance(err, (SqsAccessError, QueueNotFoundError)):
                raise err from None
            logger.warning("could not check the %s permission at start: %s", action, err)
