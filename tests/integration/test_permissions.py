"""conf/iam-policy.json is enough, and each permission it grants is needed: with moto enforcing
IAM, a user with exactly that policy runs a query end to end, and a user lacking one action gets
an error that names the missing ``sqs:<Action>`` (and loses nothing).

moto's IAM enforcement is global to the (shared, in-process) server: it is switched on inside one
test at a time and always switched off again. The embedded server authorises like SQS (batch
actions need the single-message permission, see ``devtools.local_sqs``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest

from spark_sqs.journal import Journal
from tests import helpers
from tests.conftest import REGION

pytestmark = pytest.mark.integration

POLICY = Path(__file__).resolve().parents[2] / "conf" / "iam-policy.json"
SQS_ACTIONS = [
    "GetQueueUrl",
    "GetQueueAttributes",
    "ReceiveMessage",
    "ChangeMessageVisibility",
    "DeleteMessage",
]


@contextmanager
def iam_enforced() -> Iterator[None]:
    """moto checks every request against its IAM users while this is active."""
    from moto import settings

    before = settings.INITIAL_NO_AUTH_ACTION_COUNT
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    try:
        yield
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = before


def documented_policy(queue_arn: str, without: str | None = None) -> dict[str, Any]:
    """conf/iam-policy.json with its placeholders filled in, optionally minus one SQS action."""
    _, _, _, region, account, name = queue_arn.split(":")
    text = POLICY.read_text()
    for placeholder, value in (
        ("REGION", region),
        ("ACCOUNT_ID", account),
        ("QUEUE_NAME", name),
        ("JOURNAL_BUCKET", "journal-bucket"),
        ("JOURNAL_PREFIX", "streams/q"),
    ):
        text = text.replace(placeholder, value)
    policy = json.loads(text)
    # The source's statements: the sink's target queue statement is the sink's business.
    policy["Statement"] = [s for s in policy["Statement"] if s.get("Sid") != "WriteTheTargetQueue"]
    if without is not None:
        for statement in policy["Statement"]:
            actions = statement["Action"]
            if isinstance(actions, list) and f"sqs:{without}" in actions:
                actions.remove(f"sqs:{without}")
    granted = {a for s in policy["Statement"] for a in s["Action"] if a.startswith("sqs:")}
    assert granted == {f"sqs:{a}" for a in SQS_ACTIONS} - {f"sqs:{without}"}
    return policy


def iam_user(endpoint: str, policy: dict[str, Any], name: str | None = None) -> dict[str, str]:
    """A new IAM user with ``policy``; returns its access key and secret."""
    iam = boto3.client("iam", region_name=REGION, endpoint_url=endpoint)
    name = name or f"u-{uuid.uuid4().hex[:10]}"
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="spark-sqs", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {"awsAccessKeyId": key["AccessKeyId"], "awsSecretAccessKey": key["SecretAccessKey"]}


@pytest.fixture
def admin_keys(moto_endpoint: str) -> dict[str, str]:
    """Keys of a user who may do anything, also while IAM is enforced."""
    return iam_user(
        moto_endpoint,
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
        },
    )


def client(service: str, endpoint: str, keys: dict[str, str]) -> Any:
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id=keys["awsAccessKeyId"],
        aws_secret_access_key=keys["awsSecretAccessKey"],
    )


@pytest.fixture
def admin_sqs(moto_endpoint: str, admin_keys: dict[str, str]) -> Any:
    return client("sqs", moto_endpoint, admin_keys)


def queue_arn(sqs: Any, queue_url: str) -> str:
    attrs = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    return attrs["Attributes"]["QueueArn"]


def documented_user(
    sqs: Any, queue_url: str, endpoint: str, admin_keys: dict[str, str]
) -> tuple[str, str, dict[str, str], Any]:
    """A new user with exactly the documented policy on the queue, and the admin's IAM client
    to change that policy mid-stream: (queue ARN, user name, the user's keys, IAM client)."""
    arn = queue_arn(sqs, queue_url)
    user = f"u-{uuid.uuid4().hex[:10]}"
    keys = iam_user(endpoint, documented_policy(arn), name=user)
    return arn, user, keys, client("iam", endpoint, admin_keys)


def source_options(endpoint: str, queue_url: str, journal: Path, keys: dict[str, str]) -> dict:
    # By name, so that GetQueueUrl is used too.
    return {
        "queueName": queue_url.rsplit("/", 1)[1],
        "region": REGION,
        "endpointUrl": endpoint,
        "journalLocation": str(journal),
        "numPartitions": "2",
        **keys,
    }


@pytest.mark.parametrize("mode", [{}, {"deleteAfterJournal": "true"}], ids=["commit", "journal"])
def test_documented_policy_is_enough(
    spark, moto_endpoint, sqs, admin_sqs, queue_url, tmp_path, mode
):
    keys = iam_user(moto_endpoint, documented_policy(queue_arn(sqs, queue_url)))
    numbers = helpers.send_numbered(sqs, queue_url, 30)
    options = {**source_options(moto_endpoint, queue_url, tmp_path / "j", keys), **mode}
    reader = spark.readStream.format("sqs")
    for key, value in options.items():
        reader = reader.option(key, value)
    out = tmp_path / "out"
    with iam_enforced():
        helpers.drain_to_parquet(reader.load(), out, tmp_path / "c", admin_sqs, queue_url, 180)
    assert helpers.body_numbers(spark.read.parquet(str(out)).collect()) == numbers


@pytest.mark.parametrize("missing", SQS_ACTIONS)
def test_missing_permission_is_named_and_nothing_is_lost(
    spark, moto_endpoint, sqs, admin_sqs, queue_url, tmp_path, missing
):
    keys = iam_user(moto_endpoint, documented_policy(queue_arn(sqs, queue_url), without=missing))
    helpers.send_numbered(sqs, queue_url, 3)
    options = source_options(moto_endpoint, queue_url, tmp_path / "j", keys)
    with iam_enforced():
        message = helpers.start_and_fail(spark, options, str(tmp_path / "c"))
        # Denied before anything was received (ReceiveMessage: the receive itself was denied).
        assert helpers.queue_counts(admin_sqs, queue_url) == (3, 0)
    assert f"AWS rejected SQS {missing}" in message, message[:2000]
    assert f"allow 'sqs:{missing}'" in message and "conf/iam-policy.json" in message
    assert keys["awsSecretAccessKey"] not in message


def test_policy_without_delete_is_enough_when_the_source_never_deletes(
    spark, moto_endpoint, sqs, admin_sqs, queue_url, tmp_path
):
    keys = iam_user(
        moto_endpoint, documented_policy(queue_arn(sqs, queue_url), without="DeleteMessage")
    )
    numbers = helpers.send_numbered(sqs, queue_url, 5)
    options = {
        **source_options(moto_endpoint, queue_url, tmp_path / "j", keys),
        "deleteOnCommit": "false",
    }
    reader = spark.readStream.format("sqs")
    for key, value in options.items():
        reader = reader.option(key, value)
    with iam_enforced():
        query = reader.load().writeStream.format("memory").queryName(f"nodelete_{uuid.uuid4().hex}")
        started = query.option("checkpointLocation", str(tmp_path / "c")).start()
        try:
            helpers.process_all_available(started, timeout=180)
            # deleteOnCommit=false: the messages stay in the queue (in flight until they expire).
            assert sum(helpers.queue_counts(admin_sqs, queue_url)) == 5
        finally:
            started.stop()
    assert helpers.body_numbers(spark.table(started.name).collect()) == numbers


def test_visibility_permission_revoked_mid_stream_stops_the_query_and_loses_nothing(
    spark, moto_endpoint, sqs, admin_keys, admin_sqs, queue_url, tmp_path
):
    arn, user, keys, iam = documented_user(sqs, queue_url, moto_endpoint, admin_keys)
    numbers = helpers.send_numbered(sqs, queue_url, 5)
    options = {
        **source_options(moto_endpoint, queue_url, tmp_path / "j", keys),
        "numPartitions": "1",
        # The heartbeat (every 0.8 s) must extend messages while the batch is in the sink.
        "visibilityTimeout": "4",
        "waitTimeSeconds": "1",
    }
    reader = spark.readStream.format("sqs")
    for key, value in options.items():
        reader = reader.option(key, value)
    sink = helpers.HoldingSink()
    with iam_enforced():
        query = helpers.start_query(reader.load(), sink, tmp_path / "c")
        try:
            assert sink.holding.wait(180), "no batch reached the sink"
            iam.put_user_policy(
                UserName=user,
                PolicyName="spark-sqs",
                PolicyDocument=json.dumps(
                    documented_policy(arn, without="ChangeMessageVisibility")
                ),
            )
            # Without extensions the held batch's messages become visible again.
            helpers.wait_until(
                lambda: helpers.queue_counts(admin_sqs, queue_url) == (len(numbers), 0),
                60,
                "the held messages to become visible",
            )
            sink.release()
            with pytest.raises(Exception) as info:
                query.awaitTermination(120)
                pytest.fail("the query should have stopped")
            # The committed batch was acknowledged before the query stopped.
            assert helpers.queue_counts(admin_sqs, queue_url) == (0, 0)
        finally:
            sink.release()
            query.stop()
    message = str(info.value)
    assert "AWS rejected SQS ChangeMessageVisibility" in message, message[:2000]
    assert "allow 'sqs:ChangeMessageVisibility'" in message
    assert sink.numbers() == numbers


def test_delete_permission_revoked_mid_stream_stops_the_query_and_the_next_run_settles(
    spark, moto_endpoint, sqs, admin_keys, admin_sqs, queue_url, tmp_path
):
    arn, user, keys, iam = documented_user(sqs, queue_url, moto_endpoint, admin_keys)

    def grant(policy: dict[str, Any]) -> None:
        iam.put_user_policy(
            UserName=user, PolicyName="spark-sqs", PolicyDocument=json.dumps(policy)
        )

    numbers = helpers.send_numbered(sqs, queue_url, 5)
    options = {
        **source_options(moto_endpoint, queue_url, tmp_path / "j", keys),
        "numPartitions": "1",
    }
    sink = helpers.HoldingSink()

    def start() -> Any:
        reader = spark.readStream.format("sqs")
        for key, value in options.items():
            reader = reader.option(key, value)
        return (
            reader.load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "c"))
            .start()
        )

    with iam_enforced():
        query = start()
        try:
            assert sink.holding.wait(180), "no batch reached the sink"
            grant(documented_policy(arn, without="DeleteMessage"))
            sink.release()
            with pytest.raises(Exception) as info:
                query.awaitTermination(120)
                pytest.fail("the query should have stopped")
        finally:
            sink.release()
            query.stop()
        message = str(info.value)
        assert "AWS rejected SQS DeleteMessage" in message, message[:2000]
        assert "allow 'sqs:DeleteMessage'" in message
        # Committed by Spark, not deleted: still in the queue, and still in the journal.
        assert sum(helpers.queue_counts(admin_sqs, queue_url)) == len(numbers)
        assert Journal(str(tmp_path / "j")).batches.list()

        grant(documented_policy(arn))
        helpers.drain_and_stop(start(), admin_sqs, queue_url, timeout=180)
    assert sink.numbers() == numbers, "delivered once, before and after the restart"
    assert not Journal(str(tmp_path / "j")).batches.list()
