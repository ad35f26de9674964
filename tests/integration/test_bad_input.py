"""Bad options and bad resources fail early, with a message that names the problem and the fix."""

from __future__ import annotations

import pytest

from spark_sqs.sqs.client import queue_counts
from tests.helpers import send_numbered, start_and_fail

pytestmark = pytest.mark.integration


def _options(queue_url: str, endpoint: str, journal: str) -> dict[str, str]:
    return {"queueUrl": queue_url, "endpointUrl": endpoint, "journalLocation": journal}


LOAD_ERRORS = [
    ({"journalLocation": None}, "Missing SQS source option 'journalLocation'"),
    ({"maxMessagePerTrigger": "5"}, "did you mean 'maxMessagesPerTrigger'"),
    ({"numPartitions": "0"}, "'numPartitions' = '0': is out of range 1-1000"),
    ({"waitTimeSeconds": "25"}, "'waitTimeSeconds' = '25': is out of range 0-20"),
    ({"visibilityTimeout": "ten"}, "'visibilityTimeout' = 'ten': is not a whole number"),
    ({"deleteOnCommit": "maybe"}, "'deleteOnCommit' = 'maybe': is not a boolean"),
    ({"queueName": "other"}, "conflicts with 'queueUrl'"),
    ({"awsAccessKeyId": "AKIAEXAMPLE"}, "Missing SQS source option 'awsSecretAccessKey'"),
    (
        {"visibilityTimeout": "8", "waitTimeSeconds": "5"},
        "raise 'visibilityTimeout' to at least 20",
    ),
    # Unknown keys: a near miss gets a suggestion, anything else the list of accepted options.
    ({"checkpointLocation": "/tmp/c"}, "'checkpointLocation' is an option of the sink"),
    ({"checkpointLocatoin": "/tmp/c"}, "Unknown SQS source option 'checkpointlocatoin'"),
    ({"VISIBILITYTIMEOUTS": "30"}, "did you mean 'visibilityTimeout'"),
    # Wrong type.
    ({"numPartitions": "2.5"}, "'numPartitions' = '2.5': is not a whole number"),
    ({"queuePollInterval": "fast"}, "'queuePollInterval' = 'fast': is not a number of seconds"),
    ({"deleteAfterJournal": "sometimes"}, "'deleteAfterJournal' = 'sometimes': is not a boolean"),
    ({"region": "Ireland"}, "'region' = 'Ireland': is not an AWS region name"),
    ({"endpointUrl": "localhost:4566"}, "'endpointUrl' = 'localhost:4566': is not an http(s) URL"),
    ({"queueUrl": "arn:aws:sqs:us-east-1:123456789012:q"}, "is not a queue URL"),
    ({"roleArn": "arn:aws:iam::123456789012:user/me"}, "is not an IAM role ARN"),
    (
        {"messageAttributeNames": "trace_id,bad name"},
        "'bad name' is not a valid message attribute name",
    ),
    # Out of range.
    ({"maxMessagesPerTrigger": "-5"}, "'maxMessagesPerTrigger' = '-5': is out of range"),
    ({"visibilityTimeout": "43201"}, "'visibilityTimeout' = '43201': is out of range 1-43200"),
    ({"dedupeWindow": "1209601"}, "'dedupeWindow' = '1209601': is out of range 0-1209600"),
    ({"maxInFlightMessages": "120001"}, "'maxInFlightMessages' = '120001': is out of range"),
    # Conflicting.
    (
        {"deleteAfterJournal": "true", "deleteOnCommit": "false"},
        "conflicts with deleteOnCommit=false",
    ),
    (
        {"minMessagesPerTrigger": "500", "maxMessagesPerTrigger": "100"},
        "is larger than maxMessagesPerTrigger=100",
    ),
    ({"heartbeatInterval": "60"}, "longer than a quarter of visibilityTimeout=120"),
    ({"queueOwnerAccountId": "123456789012"}, "only applies together with 'queueName'"),
    (
        {"profile": "nightly", "awsAccessKeyId": "AKIAEXAMPLE", "awsSecretAccessKey": "s"},
        "'profile' = 'nightly': conflicts with 'awsAccessKeyId'",
    ),
    ({"roleExternalId": "ext"}, "'roleExternalId': it only applies with 'roleArn'"),
    ({"awsSessionToken": "token"}, "'awsSessionToken': a session token needs"),
]


@pytest.mark.parametrize(("change", "message"), LOAD_ERRORS, ids=[m for _, m in LOAD_ERRORS])
def test_bad_option_fails_at_load(spark, moto_endpoint, queue_url, tmp_path, change, message):
    options = _options(queue_url, moto_endpoint, str(tmp_path / "journal"))
    options.update(change)
    reader = spark.readStream.format("sqs")
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, value)
    with pytest.raises(Exception) as info:
        reader.load()
    assert message in str(info.value)
    assert "Fix:" in str(info.value)
    # Our message, not a Python traceback from inside the planner.
    assert "InvalidOptionError" in str(info.value)


def test_load_with_a_path_names_the_queue_option(spark, moto_endpoint, queue_url, tmp_path):
    reader = spark.readStream.format("sqs").option("journalLocation", str(tmp_path / "j"))
    with pytest.raises(Exception, match="the SQS source takes no path") as info:
        reader.load(queue_url)
    assert "Fix:" in str(info.value) and "option('queueUrl'" in str(info.value)


def test_user_schema_is_rejected(spark, moto_endpoint, queue_url, tmp_path):
    reader = spark.readStream.format("sqs").schema("body string")
    for key, value in _options(queue_url, moto_endpoint, str(tmp_path / "j")).items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match="fixed schema"):
        reader.load().writeStream.format("noop").start().awaitTermination(60)


def test_missing_queue_fails_at_query_start(spark, moto_endpoint, queue_url, tmp_path):
    missing = queue_url.rsplit("/", 1)[0] + "/no-such-queue"
    message = start_and_fail(
        spark, _options(missing, moto_endpoint, str(tmp_path / "j")), str(tmp_path / "c")
    )
    assert "no-such-queue does not exist" in message and "Fix:" in message


def test_missing_queue_name_fails_at_query_start(spark, moto_endpoint, tmp_path):
    options = {
        "queueName": "no-such-queue",
        "region": "us-east-1",
        "endpointUrl": moto_endpoint,
        "journalLocation": str(tmp_path / "j"),
    }
    message = start_and_fail(spark, options, str(tmp_path / "c"))
    assert "'no-such-queue' does not exist" in message


def test_unwritable_journal_fails_at_query_start(spark, moto_endpoint, queue_url, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    message = start_and_fail(
        spark, _options(queue_url, moto_endpoint, str(blocker / "journal")), str(tmp_path / "c")
    )
    assert "is not writable" in message and "Fix:" in message


@pytest.mark.parametrize(
    ("location", "message"),
    [
        # Root may write anywhere on a normal file system; /proc refuses everyone.
        ("/proc/spark-sqs-journal", "journalLocation /proc/spark-sqs-journal is not writable"),
    ],
    ids=["read-only"],
)
def test_unusable_journal_fails_at_query_start(
    spark, moto_endpoint, sqs, queue_url, tmp_path, location, message
):
    send_numbered(sqs, queue_url, 2)
    text = start_and_fail(spark, _options(queue_url, moto_endpoint, location), str(tmp_path / "c"))
    assert message in text and "Fix:" in text
    # Checked before anything is received.
    assert queue_counts(sqs, queue_url) == (2, 0)


def test_a_journal_scheme_without_create_if_absent_fails_at_load(spark, moto_endpoint, queue_url):
    reader = spark.readStream.format("sqs")
    for key, value in _options(queue_url, moto_endpoint, "foo://bucket/journal").items():
        reader = reader.option(key, value)
    with pytest.raises(Exception) as info:
        reader.load()
    text = str(info.value)
    assert "'journalLocation' = 'foo://bucket/journal'" in text
    assert "create-if-absent" in text and "Fix:" in text and "s3://bucket/prefix" in text


def test_journal_in_a_missing_bucket_fails_at_query_start(
    spark, moto_endpoint, sqs, queue_url, tmp_path
):
    send_numbered(sqs, queue_url, 2)
    host_port = moto_endpoint.removeprefix("http://")
    location = f"s3://no-such-bucket-spark-sqs/j?endpoint_override={host_port}&scheme=http"
    text = start_and_fail(spark, _options(queue_url, moto_endpoint, location), str(tmp_path / "c"))
    assert f"journalLocation {location} is not writable" in text and "Fix:" in text
    assert "NoSuchBucket" in text or "bucket" in text.lower()
    assert queue_counts(sqs, queue_url) == (2, 0)


def test_journal_of_another_queue_is_refused(spark, moto_endpoint, sqs, queue_url, tmp_path):
    other = sqs.create_queue(QueueName=queue_url.rsplit("/", 1)[1] + "-other")["QueueUrl"]
    journal = tmp_path / "j"
    journal.mkdir()
    (journal / "_meta.json").write_text(f'{{"format": 1, "queueUrl": "{other}"}}')
    message = start_and_fail(
        spark, _options(queue_url, moto_endpoint, str(journal)), str(tmp_path / "c")
    )
    assert "belongs to queue" in message and "own 'journalLocation'" in message


def test_rejected_credentials_fail_at_query_start_and_lose_nothing(
    spark, moto_endpoint, sqs, queue_url, tmp_path, monkeypatch
):
    from moto import settings

    send_numbered(sqs, queue_url, 3)
    options = _options(queue_url, moto_endpoint, str(tmp_path / "j"))
    options.update(awsAccessKeyId="AKIAUNKNOWNKEY000000", awsSecretAccessKey="wrong-secret-xyz")
    # From here on moto checks every request against its IAM users: these keys are unknown.
    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    message = start_and_fail(spark, options, str(tmp_path / "c"))
    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", float("inf"))
    assert "AWS rejected SQS GetQueueAttributes" in message and "Fix:" in message
    assert "wrong-secret-xyz" not in message
    assert queue_counts(sqs, queue_url) == (3, 0)
