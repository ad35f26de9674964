"""Credentials: Unity Catalog service credentials, the Kinesis source's option spellings and
role assumption (spark_sqs/sqs/credentials.py, spark_sqs/sqs/client.py make_session).

Databricks' service-credential provider cannot run here. These tests put a stand-in on the
path that implements exactly the interface Databricks documents, and nothing more: a module
``databricks.service_credentials`` with ``getServiceCredentialsProvider(name)`` (the UDF API),
or a notebook-global ``dbutils`` whose ``credentials.getServiceCredentialsProvider(name)`` (the
notebook API) returns a botocore session; nothing here ran on Databricks. Which keys signed a
request is read from the request itself (its ``Authorization`` header) against moto.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import boto3
import botocore.session
import pytest
from moto import mock_aws

from spark_sqs.errors import InvalidOptionError, SqsAccessError
from spark_sqs.options import SqsOptions
from spark_sqs.sink.options import SinkOptions
from tests.factories import QUEUE_URL, make_options
from tests.fakes import install_databricks_service_credentials

SERVICE_KEY = "AKIASERVICECREDENTIAL"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIABASECHAIN")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "base-secret")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        yield


@pytest.fixture
def udf_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    yield install_databricks_service_credentials(tmp_path, monkeypatch)
    for name in ("databricks", "databricks.service_credentials"):
        sys.modules.pop(name, None)


def signing_key(client) -> str:  # noqa: ANN001
    """The access key id in the Authorization header of the client's next request."""
    seen: list[str] = []

    def capture(request, **_):  # noqa: ANN001, ANN003
        header = request.headers.get("Authorization", b"")
        header = header.decode() if isinstance(header, bytes) else header
        seen.append(header.split("Credential=", 1)[1].split("/", 1)[0])

    client.meta.events.register("before-send", capture)
    return seen  # type: ignore[return-value]


def test_service_credential_signs_sqs_extended_client_s3_and_the_s3_journal(
    aws, udf_module
) -> None:
    from spark_sqs.executor.envelopes import s3_client
    from spark_sqs.journal.stores import S3Store
    from spark_sqs.sqs.client import make_client

    boto3.client("sqs", region_name="us-east-1").create_queue(QueueName="orders")
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="journal")
    options = make_options(
        "s3://journal/q1", serviceCredential="sqs-orders", extendedPayloads="true"
    )

    sqs = make_client(options.connection)
    sqs_keys = signing_key(sqs)
    sqs.get_queue_url(QueueName="orders")
    payloads = s3_client(options)
    payload_keys = signing_key(payloads)
    payloads.list_objects_v2(Bucket="journal")
    journal = S3Store.from_location("s3://journal/q1", options.connection)
    journal_keys = signing_key(journal.client)
    assert journal.create("probe", b"x") is True

    assert sqs_keys == payload_keys == journal_keys == [SERVICE_KEY]
    assert udf_module.CALLS == ["sqs-orders"] * 3


def test_service_credential_from_a_notebook_dbutils(aws, monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_sqs.sqs.client import make_client

    monkeypatch.setitem(sys.modules, "databricks.service_credentials", None)  # not importable
    asked: list[str] = []

    def provider(name: str) -> botocore.session.Session:
        asked.append(name)
        session = botocore.session.Session()
        session.set_credentials(SERVICE_KEY, "service-secret")
        return session

    dbutils = types.SimpleNamespace(
        credentials=types.SimpleNamespace(getServiceCredentialsProvider=provider)
    )
    monkeypatch.setattr(sys.modules["__main__"], "dbutils", dbutils, raising=False)
    boto3.client("sqs", region_name="us-east-1").create_queue(QueueName="orders")
    client = make_client(make_options(serviceCredential="sqs-orders").connection)
    keys = signing_key(client)
    client.get_queue_url(QueueName="orders")
    assert keys == [SERVICE_KEY] and asked == ["sqs-orders"]


def test_without_a_provider_the_error_names_the_runtime_and_the_alternatives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spark_sqs.sqs.client import make_client

    monkeypatch.setitem(sys.modules, "databricks.service_credentials", None)
    monkeypatch.delattr(sys.modules["__main__"], "dbutils", raising=False)
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "15.4")
    with pytest.raises(SqsAccessError) as raised:
        make_client(make_options(serviceCredential="sqs-orders").connection)
    text = str(raised.value)
    assert "Databricks Runtime 15.4" in text
    assert "databricks.service_credentials.getServiceCredentialsProvider" in text
    for alternative in ("instance profile", "'roleArn'", "'awsAccessKeyId'", "secret scope"):
        assert alternative in text


def test_outside_databricks_the_error_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_sqs.sqs.client import make_session

    monkeypatch.setitem(sys.modules, "databricks.service_credentials", None)
    monkeypatch.delattr(sys.modules["__main__"], "dbutils", raising=False)
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    with pytest.raises(SqsAccessError, match="not a Databricks runtime"):
        make_session(make_options(serviceCredential="sqs-orders").connection)


def test_a_credential_the_provider_refuses_names_it_and_the_privilege(aws, udf_module) -> None:
    from spark_sqs.sqs.client import make_client

    with pytest.raises(SqsAccessError) as raised:
        make_client(make_options(serviceCredential="nope").connection)
    assert "'nope'" in str(raised.value) and "ACCESS privilege" in str(raised.value)


def test_a_role_is_assumed_with_the_service_credential(aws, udf_module) -> None:
    from spark_sqs.sqs.client import make_session

    sts_keys: list[str] = []
    original = botocore.session.Session.create_client

    def spy(self, service_name, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if service_name == "sts":
            sts_keys.append(kwargs.get("aws_access_key_id"))
        return original(self, service_name, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(botocore.session.Session, "create_client", spy)
        session = make_session(
            make_options(
                serviceCredential="sqs-orders", roleArn="arn:aws:iam::123456789012:role/r"
            ).connection
        )
    credentials = session.get_credentials()
    assert sts_keys == [SERVICE_KEY], "AssumeRole is called with the service credential's keys"
    assert credentials.method == "assume-role"
    assert credentials.access_key not in (SERVICE_KEY, "AKIABASECHAIN")


def test_assumed_role_credentials_refresh_through_botocore(
    aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datetime

    import botocore.credentials
    from botocore.credentials import RefreshableCredentials

    from spark_sqs.sqs.client import make_session

    session = make_session(make_options(roleArn="arn:aws:iam::123456789012:role/r").connection)
    credentials = session.get_credentials()
    assert isinstance(credentials, RefreshableCredentials)
    first = credentials.access_key
    # Five minutes before they expire (set on botocore's own clock functions): botocore must
    # refresh them, and its fetcher assumes the role again.
    later = credentials._expiry_time - datetime.timedelta(minutes=5)
    monkeypatch.setattr(botocore.credentials, "_local_now", lambda: later)
    monkeypatch.setattr(credentials, "_time_fetcher", lambda: later)
    assert credentials.refresh_needed() is True
    assert credentials.get_frozen_credentials().access_key != first


def test_kinesis_spellings_of_the_keys_are_accepted() -> None:
    options = make_options(awsAccessKey="AKIAKINESIS", awsSecretKey="secret")
    assert options.credentials is not None
    assert options.credentials.access_key_id == "AKIAKINESIS"
    assert options.credentials.secret_access_key == "secret"


def test_two_spellings_of_one_option_are_refused() -> None:
    with pytest.raises(InvalidOptionError, match="given twice.*'awsAccessKey'"):
        make_options(awsAccessKeyId="A", awsAccessKey="B", awsSecretAccessKey="s")


@pytest.mark.parametrize(
    "extra",
    [{"awsAccessKeyId": "A", "awsSecretAccessKey": "s"}, {"profile": "nightly"}],
)
def test_service_credential_excludes_other_base_credentials(extra: dict[str, str]) -> None:
    with pytest.raises(InvalidOptionError, match="serviceCredential"):
        make_options(serviceCredential="sqs-orders", **extra)


def test_the_sink_takes_the_same_credential_options() -> None:
    sink = SinkOptions.parse(
        {"queueUrl": QUEUE_URL, "awsAccessKey": "AKIAKINESIS", "awsSecretKey": "secret"}, env={}
    )
    assert sink.connection.credentials.access_key_id == "AKIAKINESIS"
    sink = SinkOptions.parse({"queueUrl": QUEUE_URL, "serviceCredential": "sqs-orders"}, env={})
    assert sink.connection.service_credential == "sqs-orders"
    with pytest.raises(InvalidOptionError, match="sink option 'awsAccessKeyId' is given twice"):
        SinkOptions.parse(
            {"queueUrl": QUEUE_URL, "awsAccessKeyId": "A", "awsaccesskey": "B"}, env={}
        )


def test_the_option_table_lists_the_aliases() -> None:
    from spark_sqs.options import render_markdown

    table = render_markdown()
    assert "Also spelled `awsAccessKey`" in table and "Also spelled `awsSecretKey`" in table
    assert "| `serviceCredential` |" in table


def test_service_credential_name_survives_pickling() -> None:
    import pickle

    options = SqsOptions.parse(
        {"queueUrl": QUEUE_URL, "journalLocation": "/tmp/j", "serviceCredential": "sqs-orders"},
        env={},
    )
    assert pickle.loads(pickle.dumps(options)).service_credential == "sqs-orders"
