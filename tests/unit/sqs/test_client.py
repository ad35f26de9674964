"""AWS error classification: what a person must fix vs. what a retry fixes, and no secrets."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from botocore.stub import Stubber

from spark_sqs.errors import QueueNotFoundError, SqsAccessError, SqsSourceError, TransientSqsError
from spark_sqs.sqs.client import classify, error_code, queue_counts

HANDLE = "AQEB" + "x7Yz" * 60


def client_error(code: str, message: str = "", status: int = 400) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "ReceiveMessage",
    )


def test_missing_queue_names_the_fix() -> None:
    err = classify(client_error("AWS.SimpleQueueService.NonExistentQueue"), "GetQueueUrl", "q")
    assert isinstance(err, QueueNotFoundError) and not err.retriable
    assert "does not exist" in str(err) and "Fix:" in str(err)


def test_access_errors_name_the_action() -> None:
    for error in (client_error("AccessDenied", status=403), client_error("Whatever", status=403)):
        err = classify(error, "DeleteMessage", "q")
        assert isinstance(err, SqsAccessError) and "sqs:DeleteMessage" in str(err)


def test_missing_credentials_say_how_to_provide_them() -> None:
    err = classify(NoCredentialsError(), "GetQueueAttributes", "q")
    assert isinstance(err, SqsAccessError) and "awsAccessKeyId" in str(err)


def test_throttling_5xx_and_network_errors_are_retriable() -> None:
    for exc in (
        client_error("ThrottlingException"),
        client_error("InternalError", status=500),
        EndpointConnectionError(endpoint_url="https://sqs.example"),
    ):
        err = classify(exc, "ReceiveMessage", "q")
        assert isinstance(err, TransientSqsError) and err.retriable


def test_xml_error_bodies_yield_the_real_code() -> None:
    exc = client_error("403", "<Error><Code>InvalidClientTokenId</Code></Error>", status=403)
    assert error_code(exc) == "InvalidClientTokenId"


def test_receipt_handles_in_aws_messages_are_redacted() -> None:
    exc = client_error("InvalidParameterValue", f'Value "{HANDLE}" for ReceiptHandle is invalid')
    err = classify(exc, "ChangeMessageVisibility", "q")
    assert type(err) is SqsSourceError
    assert HANDLE not in str(err) and "<redacted>" in str(err)


def test_assumed_role_credentials_are_used_and_refreshable(monkeypatch) -> None:
    import boto3
    from moto import mock_aws

    from spark_sqs.sqs.client import make_client, make_session
    from tests.factories import make_options

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        boto3.client("sqs", region_name="us-east-1").create_queue(QueueName="orders")
        options = make_options(
            roleArn="arn:aws:iam::123456789012:role/reader",
            roleExternalId="ext-1",
            roleSessionName="job-7",
        )
        session = make_session(options.connection)
        credentials = session.get_credentials()
        assert credentials.method == "assume-role"
        assert credentials.refresh_needed() is False  # refreshable, and fresh now
        assert credentials.access_key != "testing", "the role's keys, not the base keys"
        client = make_client(options.connection)
        assert client.get_queue_url(QueueName="orders")["QueueUrl"].endswith("/orders")


def test_unknown_profile_says_where_to_define_it(monkeypatch, tmp_path) -> None:
    from spark_sqs.sqs.client import make_client
    from tests.factories import make_options

    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    import pytest

    with pytest.raises(SqsAccessError, match="profile 'nightly' is not defined"):
        make_client(make_options(profile="nightly").connection)


class _ProbeClient:
    """Answers the permission probe's batch calls with the given error, or a per-entry failure
    as SQS answers a receipt handle that names no message."""

    def __init__(self, errors: dict[str, Exception] | None = None) -> None:
        self.errors = errors or {}
        self.calls: list[tuple[str, dict]] = []

    def _answer(self, action: str, kwargs: dict) -> dict:
        self.calls.append((action, kwargs))
        if action in self.errors:
            raise self.errors[action]
        return {"Failed": [{"Id": "probe", "Code": "ReceiptHandleIsInvalid", "SenderFault": True}]}

    def change_message_visibility_batch(self, **kwargs):  # noqa: ANN003, ANN201
        return self._answer("ChangeMessageVisibility", kwargs)

    def delete_message_batch(self, **kwargs):  # noqa: ANN003, ANN201
        return self._answer("DeleteMessage", kwargs)


def test_permission_check_passes_when_sqs_only_rejects_the_probe_handle() -> None:
    from spark_sqs.sqs.client import check_permissions

    client = _ProbeClient()
    check_permissions(client, "https://sqs/q", delete=True)
    assert [a for a, _ in client.calls] == ["ChangeMessageVisibility", "DeleteMessage"]
    # The probe handle can never match a real message.
    assert all(
        k["Entries"][0]["ReceiptHandle"] == "spark-sqs-permission-probe" for _, k in client.calls
    )


def test_permission_check_names_the_denied_permission() -> None:
    import pytest

    from spark_sqs.sqs.client import check_permissions

    for action in ("ChangeMessageVisibility", "DeleteMessage"):
        client = _ProbeClient({action: client_error("AccessDenied", status=403)})
        with pytest.raises(SqsAccessError, match=f"allow 'sqs:{action}'"):
            check_permissions(client, "https://sqs/q", delete=True)


def test_permission_check_skips_delete_when_the_source_never_deletes() -> None:
    from spark_sqs.sqs.client import check_permissions

    client = _ProbeClient({"DeleteMessage": client_error("AccessDenied", status=403)})
    check_permissions(client, "https://sqs/q", delete=False)
    assert [a for a, _ in client.calls] == ["ChangeMessageVisibility"]


def test_permission_check_ignores_transient_and_unexpected_answers() -> None:
    from spark_sqs.sqs.client import check_permissions

    client = _ProbeClient(
        {
            "ChangeMessageVisibility": client_error("ThrottlingException"),
            "DeleteMessage": client_error("InvalidParameterValue", "odd emulator"),
        }
    )
    check_permissions(client, "https://sqs/q", delete=True)


def test_queue_counts_are_visible_and_in_flight() -> None:
    client = boto3.client(
        "sqs", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    with Stubber(client) as stub:
        stub.add_response(
            "get_queue_attributes",
            {"Attributes": {names[0]: "7", names[1]: "3"}},
            {"QueueUrl": url, "AttributeNames": names},
        )
        stub.add_client_error("get_queue_attributes", "AWS.SimpleQueueService.NonExistentQueue")
        assert queue_counts(client, url) == (7, 3)
        with pytest.raises(QueueNotFoundError):
            queue_counts(client, url)


def _sent_requests(client) -> list:
    """Requests the client sends, answered here with an empty 200 (never reaching a server)."""
    from botocore.awsrequest import AWSResponse

    class _Raw:
        def stream(self, **_: object):
            yield b"{}"

    sent: list = []

    def answer(request, **_: object) -> AWSResponse:
        sent.append(request)
        return AWSResponse(request.url, 200, {}, _Raw())

    client.meta.events.register("before-send.sqs", answer)
    return sent


def test_receivers_client_sends_requests_unchecked_with_a_fixed_user_agent(monkeypatch) -> None:
    from spark_sqs.per_process import PerProcess
    from spark_sqs.sqs import client as module
    from tests.factories import make_options

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setattr(module, "_CLIENTS", PerProcess())
    connection = make_options(endpointUrl="http://127.0.0.1:9").connection
    receivers = module.cached_client(connection, wait_time_seconds=1)
    assert module.cached_client(connection, wait_time_seconds=1) is receivers
    sent = _sent_requests(receivers)
    # Not an integer: botocore's model check would raise before sending.
    for _ in range(3):
        receivers.receive_message(QueueUrl="http://127.0.0.1:9/1/q", MaxNumberOfMessages="ten")
    assert len(sent) == 3
    (agent,) = {r.headers["User-Agent"].decode() for r in sent}
    assert agent.startswith(f"{module.USER_AGENT} ") and agent.endswith(" spark-sqs")
    assert module.USER_AGENT.startswith(f"Boto3/{boto3.__version__} ")


def test_other_clients_keep_botocore_parameter_checks(monkeypatch) -> None:
    from botocore.exceptions import ParamValidationError

    from spark_sqs.sqs.client import USER_AGENT, make_client
    from tests.factories import make_options

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = make_client(make_options(endpointUrl="http://127.0.0.1:9").connection)
    sent = _sent_requests(client)
    with pytest.raises(ParamValidationError):
        client.receive_message(QueueUrl="http://127.0.0.1:9/1/q", MaxNumberOfMessages="ten")
    assert sent == []
    client.get_queue_url(QueueName="q")
    (request,) = sent
    assert request.headers["User-Agent"].decode().startswith(f"{USER_AGENT} ")
