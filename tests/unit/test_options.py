"""SqsOptions.parse: accepted spellings, defaults, region resolution and every validation error."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from spark_sqs.connection import AwsCredentials, Connection
from spark_sqs.errors import InvalidOptionError
from spark_sqs.options import OPTIONS, OptionSpec, SqsOptions
from tests.factories import QUEUE_URL

URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"
JOURNAL = "/data/journals/orders"
BASE = {"queueUrl": URL, "journalLocation": JOURNAL}
J = {"journalLocation": JOURNAL}

# Distinctive values that must never leak into messages or reprs.
ACCESS_KEY = "AKIAZZLEAKCHECK00001"
SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCY-SECRET-9f3a"
TOKEN = "FwoGZXIvYXdzEJr-SESSION-TOKEN-7c1e"


def parse(env: dict[str, str] | None = None, /, **options: Any) -> SqsOptions:
    return SqsOptions.parse(options, env={} if env is None else env)


def with_base(**overrides: Any) -> dict[str, Any]:
    options = dict(BASE)
    for key, value in overrides.items():
        if value is None:
            options.pop(key, None)
        else:
            options[key] = value
    return options


# -- accepted input ----------------------------------------------------------------------------


def test_defaults_match_the_option_table() -> None:
    opts = parse(**BASE)

    assert opts.queue_url == URL
    assert opts.queue_name is None
    assert opts.queue_owner_account_id is None
    assert opts.region == "eu-west-1"
    assert opts.endpoint_url is None
    assert opts.journal_location == JOURNAL
    assert opts.num_partitions == 4
    assert opts.max_messages_per_trigger == 10000
    assert opts.wait_time_seconds == 1
    assert opts.visibility_timeout == 120
    assert opts.message_attribute_names == ("All",)
    assert opts.delete_on_commit is True
    assert opts.queue_poll_interval == 1.0
    assert opts.heartbeat_interval == 24.0  # visibilityTimeout / 5
    assert opts.dedupe_window == 21600.0
    assert opts.credentials is None
    # The documented defaults are what parse() uses.
    defaults = {spec.name: spec.default for spec in OPTIONS}
    assert int(defaults["numPartitions"]) == opts.num_partitions
    assert int(defaults["maxMessagesPerTrigger"]) == opts.max_messages_per_trigger
    assert int(defaults["visibilityTimeout"]) == opts.visibility_timeout
    assert float(defaults["dedupeWindow"]) == opts.dedupe_window


def test_keys_are_case_insensitive() -> None:
    opts = SqsOptions.parse(
        {
            "QUEUEURL": URL,
            "journallocation": JOURNAL,
            "NumPartitions": "7",
            "MAXMESSAGESPERTRIGGER": "70",
            "deleteoncommit": "false",
            "VisibilityTIMEOUT": "300",
            "waittimeseconds": "20",
            "MessageAttributeNames": "a,b",
            "QueuePollInterval": "2.5",
            "ENDPOINTURL": "http://127.0.0.1:4566",
            "Region": "us-west-2",
        },
        env={},
    )

    assert opts.queue_url == URL
    assert opts.journal_location == JOURNAL
    assert opts.num_partitions == 7
    assert opts.max_messages_per_trigger == 70
    assert opts.delete_on_commit is False
    assert opts.visibility_timeout == 300
    assert opts.wait_time_seconds == 20
    assert opts.message_attribute_names == ("a", "b")
    assert opts.queue_poll_interval == 2.5
    assert opts.endpoint_url == "http://127.0.0.1:4566"
    assert opts.region == "us-west-2"


def test_values_are_stripped() -> None:
    opts = parse(queueUrl=f"  {URL} ", journalLocation=f" {JOURNAL}\n", numPartitions=" 8 ")
    assert opts.queue_url == URL
    assert opts.journal_location == JOURNAL
    assert opts.num_partitions == 8


def test_non_string_values_are_accepted() -> None:
    # Spark passes strings, but Python callers of parse() may pass numbers and booleans.
    opts = parse(**BASE, numPartitions=2, waitTimeSeconds=0, deleteOnCommit=False)
    assert (opts.num_partitions, opts.wait_time_seconds, opts.delete_on_commit) == (2, 0, False)


@pytest.mark.parametrize(
    ("url", "region"),
    [
        ("https://sqs.us-east-1.amazonaws.com/123456789012/q", "us-east-1"),
        ("https://sqs.ap-southeast-2.amazonaws.com/123456789012/q.fifo", "ap-southeast-2"),
        ("https://us-west-2.queue.amazonaws.com/123456789012/q", "us-west-2"),
        ("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q", "cn-north-1"),
        ("https://sqs.us-gov-west-1.amazonaws.com/123456789012/q", "us-gov-west-1"),
    ],
)
def test_region_is_taken_from_the_queue_url(url: str, region: str) -> None:
    env = {"AWS_REGION": "sa-east-1", "AWS_DEFAULT_REGION": "sa-east-1"}
    assert parse(env, queueUrl=url, journalLocation=JOURNAL).region == region


def test_region_of_a_fips_queue_url() -> None:
    # The user gave no 'region'; the URL names us-east-1 and so does the environment.
    url = "https://sqs-fips.us-east-1.amazonaws.com/123456789012/orders"
    opts = parse({"AWS_REGION": "us-east-1"}, queueUrl=url, journalLocation=JOURNAL)
    assert opts.region == "us-east-1"


def test_explicit_region_beats_queue_url_and_env() -> None:
    env = {"AWS_REGION": "sa-east-1"}
    assert parse(env, **BASE, region="us-west-1").region == "us-west-1"


@pytest.mark.parametrize(
    ("env", "region"),
    [
        ({"AWS_REGION": "eu-central-1"}, "eu-central-1"),
        ({"AWS_DEFAULT_REGION": "eu-north-1"}, "eu-north-1"),
        ({"AWS_REGION": "eu-central-1", "AWS_DEFAULT_REGION": "eu-north-1"}, "eu-central-1"),
        ({"AWS_REGION": "", "AWS_DEFAULT_REGION": "eu-north-1"}, "eu-north-1"),
    ],
)
def test_region_falls_back_to_the_environment(env: dict[str, str], region: str) -> None:
    # Neither a custom endpoint's queue URL nor a queue name carries a region.
    local = parse(env, queueUrl="http://127.0.0.1:4566/000000000000/q", journalLocation=JOURNAL)
    by_name = parse(env, queueName="orders", journalLocation=JOURNAL)
    assert local.region == region
    assert by_name.region == region


def test_parse_without_env_argument_reads_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "ap-northeast-1")
    opts = SqsOptions.parse({"queueName": "orders", "journalLocation": JOURNAL})
    assert opts.region == "ap-northeast-1"


def test_queue_name_with_owner_account() -> None:
    opts = parse(
        queueName="orders.fifo", queueOwnerAccountId="210987654321", **J, region="us-east-1"
    )
    assert opts.queue_url is None
    assert opts.queue_name == "orders.fifo"
    assert opts.queue_owner_account_id == "210987654321"
    assert opts.is_fifo


@pytest.mark.parametrize(
    ("options", "fifo"),
    [
        ({"queueUrl": URL}, False),
        ({"queueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs.fifo"}, True),
        ({"queueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs.fifo/"}, True),
        ({"queueName": "jobs.fifo", "region": "us-east-1"}, True),
        ({"queueName": "jobs_fifo", "region": "us-east-1"}, False),
    ],
)
def test_is_fifo(options: dict[str, str], fifo: bool) -> None:
    assert parse(**options, **J).is_fifo is fifo


@pytest.mark.parametrize(
    "name", ["a", "a" * 80, "Orders_v2-eu", "a" * 75 + ".fifo", "my-queue.fifo"]
)
def test_valid_queue_names(name: str) -> None:
    assert parse(queueName=name, region="us-east-1", **J).queue_name == name


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("All", ("All",)),
        ("all", ("All",)),
        ("trace_id,ALL", ("All",)),
        (" a , b ,c ", ("a", "b", "c")),
        ("a,,b,", ("a", "b")),
        ("tenant.*", ("tenant.*",)),
        ("x-request-id,Order.Total", ("x-request-id", "Order.Total")),
        ("", ("All",)),
    ],
)
def test_message_attribute_names(text: str, expected: tuple[str, ...]) -> None:
    assert parse(**BASE, messageAttributeNames=text).message_attribute_names == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("true", True), ("TRUE", True), ("1", True), ("yes", True)]
    + [("false", False), ("False", False), ("0", False), ("no", False)],
)
def test_delete_on_commit_spellings(text: str, expected: bool) -> None:
    assert parse(**BASE, deleteOnCommit=text).delete_on_commit is expected


@pytest.mark.parametrize(
    ("option", "value", "attribute", "parsed"),
    [
        ("numPartitions", "1", "num_partitions", 1),
        ("numPartitions", "1000", "num_partitions", 1000),
        ("maxMessagesPerTrigger", "1", "max_messages_per_trigger", 1),
        ("maxMessagesPerTrigger", "1000000", "max_messages_per_trigger", 1_000_000),
        ("waitTimeSeconds", "0", "wait_time_seconds", 0),
        ("visibilityTimeout", "43200", "visibility_timeout", 43200),
        ("queuePollInterval", "0.01", "queue_poll_interval", 0.01),
        ("queuePollInterval", "3600", "queue_poll_interval", 3600.0),
    ],
)
def test_range_boundaries_are_accepted(
    option: str, value: str, attribute: str, parsed: Any
) -> None:
    assert getattr(parse(**BASE, **{option: value}), attribute) == parsed


def test_visibility_timeout_of_exactly_four_wait_times_is_accepted() -> None:
    opts = parse(**BASE, waitTimeSeconds="20", visibilityTimeout="80")
    assert (opts.wait_time_seconds, opts.visibility_timeout) == (20, 80)


@pytest.mark.parametrize(
    ("visibility", "budget"), [(4, 1.0), (120, 30.0), (240, 60.0), (43200, 60.0)]
)
def test_receive_budget_is_a_quarter_of_visibility_capped_at_a_minute(
    visibility: int, budget: float
) -> None:
    opts = parse(**BASE, waitTimeSeconds="0", visibilityTimeout=str(visibility))
    assert opts.receive_budget_seconds == budget


@pytest.mark.parametrize(("visibility", "heartbeat"), [(120, 24.0), (30, 6.0), (43200, 8640.0)])
def test_heartbeat_interval_defaults_to_a_fifth_of_visibility(
    visibility: int, heartbeat: float
) -> None:
    opts = parse(**BASE, visibilityTimeout=str(visibility))
    assert opts.heartbeat_interval == heartbeat


@pytest.mark.parametrize(("value", "parsed"), [("30", 30.0), ("0.1", 0.1), ("7.5", 7.5)])
def test_explicit_heartbeat_interval(value: str, parsed: float) -> None:
    assert parse(**BASE, heartbeatInterval=value).heartbeat_interval == parsed


@pytest.mark.parametrize(("value", "parsed"), [("0", 0.0), ("60", 60.0), ("1209600", 1209600.0)])
def test_explicit_dedupe_window(value: str, parsed: float) -> None:
    assert parse(**BASE, dedupeWindow=value).dedupe_window == parsed


def test_explicit_credentials() -> None:
    opts = parse(
        **BASE, awsAccessKeyId=ACCESS_KEY, awsSecretAccessKey=SECRET, awsSessionToken=TOKEN
    )
    assert opts.credentials == AwsCredentials(ACCESS_KEY, SECRET, TOKEN)
    no_token = parse(**BASE, awsAccessKeyId=ACCESS_KEY, awsSecretAccessKey=SECRET)
    assert no_token.credentials == AwsCredentials(ACCESS_KEY, SECRET, None)


def test_blank_credentials_mean_the_default_chain() -> None:
    opts = parse(**BASE, awsAccessKeyId=" ", awsSecretAccessKey="", awsSessionToken=None)
    assert opts.credentials is None


def test_envelope_options_default_to_raw_bodies() -> None:
    opts = parse(**BASE)
    assert (opts.message_format, opts.sns, opts.keep_invalid_envelopes) == ("raw", False, False)
    assert (opts.extended_payloads, opts.delete_extended_payloads) == (False, False)
    assert opts.s3_endpoint_url is None


def test_envelope_options_are_parsed() -> None:
    opts = parse(
        **BASE,
        messageformat="SNS",
        invalidEnvelope="Keep",
        extendedPayloads="true",
        deleteExtendedPayloads="yes",
        s3EndpointUrl="http://127.0.0.1:5000",
    )
    assert (opts.message_format, opts.sns, opts.keep_invalid_envelopes) == ("sns", True, True)
    assert (opts.extended_payloads, opts.delete_extended_payloads) == (True, True)
    assert opts.s3_endpoint_url == "http://127.0.0.1:5000"


def test_extended_payloads_always_fetch_the_reserved_attributes() -> None:
    opts = parse(**BASE, extendedPayloads="true", messageAttributeNames="tenant")
    assert opts.message_attribute_names == ("tenant", "ExtendedPayloadSize", "SQSLargePayloadSize")
    assert parse(**BASE, extendedPayloads="true").message_attribute_names == ("All",)


# -- validation errors -------------------------------------------------------------------------

ERROR_CASES: list[tuple[str, dict[str, Any], str, str]] = [
    # (id, options, option key the message must name, expected substring)
    (
        "unknown-option",
        with_base(numPartition="3"),
        "numPartition",
        "did you mean 'numPartitions'?",
    ),
    ("unknown-option-case", with_base(QUEUEURLL="x"), "QUEUEURLL", "did you mean 'queueUrl'?"),
    ("unknown-option-far", with_base(checkpointLocation="/c"), "checkpointLocation", "Unknown"),
    (
        # Spark hands the source lower-cased keys; the hint must not be "did you mean
        # 'journalLocation'?".
        "checkpoint-given-to-the-source",
        with_base(checkpointlocation="/c"),
        "checkpointLocation",
        "is an option of the sink: give it to .writeStream.option('checkpointLocation'",
    ),
    ("load-with-a-path", with_base(path=URL), "queueUrl", "the SQS source takes no path"),
    (
        "url-and-name",
        with_base(queueName="orders"),
        "queueName",
        "conflicts with 'queueUrl'",
    ),
    ("no-queue", with_base(queueUrl=None), "queueUrl", "Missing SQS source option"),
    ("blank-queue", with_base(queueUrl="  "), "queueUrl", "Missing SQS source option"),
    (
        "url-without-scheme",
        with_base(queueUrl="sqs.us-east-1.amazonaws.com/123456789012/q"),
        "queueUrl",
        "is not a queue URL",
    ),
    (
        "url-without-path",
        with_base(queueUrl="https://sqs.us-east-1.amazonaws.com/"),
        "queueUrl",
        "is not a queue URL",
    ),
    (
        "url-is-arn",
        with_base(queueUrl="arn:aws:sqs:us-east-1:123456789012:q"),
        "queueUrl",
        "is not a queue URL",
    ),
    (
        "name-is-url",
        {"queueName": URL, "region": "eu-west-1", "journalLocation": JOURNAL},
        "queueName",
        "is not a valid SQS queue name",
    ),
    (
        "name-too-long",
        {"queueName": "q" * 81, "region": "eu-west-1", "journalLocation": JOURNAL},
        "queueName",
        "is not a valid SQS queue name",
    ),
    (
        "fifo-name-too-long",
        {"queueName": "q" * 76 + ".fifo", "region": "eu-west-1", "journalLocation": JOURNAL},
        "queueName",
        "is not a valid SQS queue name",
    ),
    (
        "name-with-space",
        {"queueName": "my queue", "region": "eu-west-1", "journalLocation": JOURNAL},
        "queueName",
        "is not a valid SQS queue name",
    ),
    (
        "owner-with-url",
        with_base(queueOwnerAccountId="123456789012"),
        "queueOwnerAccountId",
        "only applies together with 'queueName'",
    ),
    (
        "owner-short",
        {"queueName": "q", "queueOwnerAccountId": "12345", "region": "eu-west-1", **J},
        "queueOwnerAccountId",
        "is not a 12-digit AWS account id",
    ),
    (
        "owner-letters",
        {"queueName": "q", "queueOwnerAccountId": "12345678901a", "region": "eu-west-1", **J},
        "queueOwnerAccountId",
        "is not a 12-digit AWS account id",
    ),
    (
        "endpoint-without-scheme",
        with_base(endpointUrl="localhost:4566"),
        "endpointUrl",
        "is not an http(s) URL",
    ),
    (
        "endpoint-ftp",
        with_base(endpointUrl="ftp://example.com"),
        "endpointUrl",
        "is not an http(s) URL",
    ),
    (
        "no-region",
        {"queueName": "orders", "journalLocation": JOURNAL},
        "region",
        "cannot be taken from the queue URL",
    ),
    (
        "no-region-local-url",
        {"queueUrl": "http://127.0.0.1:4566/000000000000/q", "journalLocation": JOURNAL},
        "region",
        "Missing SQS source option",
    ),
    ("region-upper", with_base(region="US-EAST-1"), "region", "is not an AWS region name"),
    ("region-az", with_base(region="us-east-1a"), "region", "is not an AWS region name"),
    ("region-word", with_base(region="ireland"), "region", "is not an AWS region name"),
    ("no-journal", with_base(journalLocation=None), "journalLocation", "Missing"),
    ("blank-journal", with_base(journalLocation=" "), "journalLocation", "Missing"),
    ("partitions-zero", with_base(numPartitions="0"), "numPartitions", "out of range 1-1000"),
    ("partitions-big", with_base(numPartitions="1001"), "numPartitions", "out of range 1-1000"),
    ("partitions-text", with_base(numPartitions="four"), "numPartitions", "not a whole number"),
    ("partitions-float", with_base(numPartitions="2.5"), "numPartitions", "not a whole number"),
    ("partitions-blank", with_base(numPartitions=""), "numPartitions", "not a whole number"),
    (
        "max-zero",
        with_base(maxMessagesPerTrigger="0"),
        "maxMessagesPerTrigger",
        "out of range 1-1000000",
    ),
    (
        "max-big",
        with_base(maxMessagesPerTrigger="1000001"),
        "maxMessagesPerTrigger",
        "out of range 1-1000000",
    ),
    (
        "max-text",
        with_base(maxMessagesPerTrigger="lots"),
        "maxMessagesPerTrigger",
        "not a whole number",
    ),
    ("wait-negative", with_base(waitTimeSeconds="-1"), "waitTimeSeconds", "out of range 0-20"),
    ("wait-big", with_base(waitTimeSeconds="21"), "waitTimeSeconds", "out of range 0-20"),
    ("wait-text", with_base(waitTimeSeconds="1s"), "waitTimeSeconds", "not a whole number"),
    (
        "visibility-zero",
        with_base(visibilityTimeout="0"),
        "visibilityTimeout",
        "out of range 1-43200",
    ),
    (
        "visibility-big",
        with_base(visibilityTimeout="43201"),
        "visibilityTimeout",
        "out of range 1-43200",
    ),
    (
        "visibility-text",
        with_base(visibilityTimeout="2m"),
        "visibilityTimeout",
        "not a whole number",
    ),
    (
        "poll-small",
        with_base(queuePollInterval="0.001"),
        "queuePollInterval",
        "out of range 0.01-3600",
    ),
    (
        "poll-big",
        with_base(queuePollInterval="3601"),
        "queuePollInterval",
        "out of range 0.01-3600",
    ),
    (
        "poll-text",
        with_base(queuePollInterval="soon"),
        "queuePollInterval",
        "not a number of seconds",
    ),
    (
        "poll-nan",
        with_base(queuePollInterval="nan"),
        "queuePollInterval",
        "out of range 0.01-3600",
    ),
    ("delete-maybe", with_base(deleteOnCommit="maybe"), "deleteOnCommit", "is not a boolean"),
    ("delete-blank", with_base(deleteOnCommit=""), "deleteOnCommit", "is not a boolean"),
    (
        "attributes-invalid",
        with_base(messageAttributeNames="trace_id,bad name!"),
        "messageAttributeNames",
        "'bad name!' is not a valid message attribute name",
    ),
    (
        "attributes-too-long",
        with_base(messageAttributeNames="a" * 257),
        "messageAttributeNames",
        "is not a valid message attribute name",
    ),
    (
        "attributes-empty-list",
        with_base(messageAttributeNames=" , ,"),
        "messageAttributeNames",
        "names no attribute",
    ),
    (
        "visibility-short-for-wait",
        with_base(waitTimeSeconds="20", visibilityTimeout="79"),
        "visibilityTimeout",
        "too short for waitTimeSeconds=20",
    ),
    (
        "visibility-short-for-wait-fix",
        with_base(waitTimeSeconds="5", visibilityTimeout="10"),
        "visibilityTimeout",
        "at least 20",
    ),
    (
        "heartbeat-over-quarter",
        with_base(heartbeatInterval="31"),
        "heartbeatInterval",
        "longer than a quarter of visibilityTimeout=120",
    ),
    (
        "heartbeat-over-quarter-fix",
        with_base(visibilityTimeout="40", heartbeatInterval="11"),
        "heartbeatInterval",
        "at most 10",
    ),
    (
        "heartbeat-too-small",
        with_base(heartbeatInterval="0.05"),
        "heartbeatInterval",
        "out of range 0.1-43200",
    ),
    (
        "heartbeat-text",
        with_base(heartbeatInterval="often"),
        "heartbeatInterval",
        "not a number of seconds",
    ),
    (
        "heartbeat-blank",
        with_base(heartbeatInterval=""),
        "heartbeatInterval",
        "not a number of seconds",
    ),
    (
        "dedupe-negative",
        with_base(dedupeWindow="-1"),
        "dedupeWindow",
        "out of range",
    ),
    (
        "dedupe-too-long",
        with_base(dedupeWindow="1209601"),
        "dedupeWindow",
        "out of range",
    ),
    ("dedupe-text", with_base(dedupeWindow="6h"), "dedupeWindow", "not a number of seconds"),
    (
        "key-without-secret",
        with_base(awsAccessKeyId=ACCESS_KEY),
        "awsSecretAccessKey",
        "must be given together",
    ),
    (
        "secret-without-key",
        with_base(awsSecretAccessKey=SECRET),
        "awsAccessKeyId",
        "must be given together",
    ),
    (
        "token-without-keys",
        with_base(awsSessionToken=TOKEN),
        "awsSessionToken",
        "needs 'awsAccessKeyId' and 'awsSecretAccessKey'",
    ),
    (
        "token-and-secret-without-key",
        with_base(awsSecretAccessKey=SECRET, awsSessionToken=TOKEN),
        "awsAccessKeyId",
        "must be given together",
    ),
    ("message-format", with_base(messageFormat="json"), "messageFormat", "use 'raw'"),
    (
        "invalid-envelope-value",
        with_base(messageFormat="sns", invalidEnvelope="skip"),
        "invalidEnvelope",
        "is not 'fail' or 'keep'",
    ),
    (
        "invalid-envelope-without-sns",
        with_base(invalidEnvelope="keep"),
        "invalidEnvelope",
        "only applies with messageFormat=sns",
    ),
    ("extended-not-bool", with_base(extendedPayloads="maybe"), "extendedPayloads", "boolean"),
    (
        "delete-payloads-without-extended",
        with_base(deleteExtendedPayloads="true"),
        "deleteExtendedPayloads",
        "only applies with extendedPayloads=true",
    ),
    (
        "delete-payloads-never-deleting",
        with_base(extendedPayloads="true", deleteExtendedPayloads="true", deleteOnCommit="false"),
        "deleteExtendedPayloads",
        "conflicts with deleteOnCommit=false",
    ),
    (
        "s3-endpoint-without-extended",
        with_base(s3EndpointUrl="http://127.0.0.1:5000"),
        "s3EndpointUrl",
        "only applies with extendedPayloads=true",
    ),
    (
        "s3-endpoint-not-a-url",
        with_base(extendedPayloads="true", s3EndpointUrl="127.0.0.1:5000"),
        "s3EndpointUrl",
        "is not an http(s) URL",
    ),
]


@pytest.mark.parametrize(
    ("options", "key", "expected"),
    [case[1:] for case in ERROR_CASES],
    ids=[case[0] for case in ERROR_CASES],
)
def test_invalid_options_are_rejected_naming_the_option_and_the_fix(
    options: dict[str, Any], key: str, expected: str
) -> None:
    with pytest.raises(InvalidOptionError) as info:
        SqsOptions.parse(options, env={})
    message = str(info.value)
    assert expected in message
    assert f"'{key}'" in message
    assert "Fix:" in message
    assert info.value.retriable is False
    # Callers that only know ValueError still catch it.
    assert isinstance(info.value, ValueError)


def test_unknown_option_lists_the_accepted_options() -> None:
    with pytest.raises(InvalidOptionError) as info:
        parse(**BASE, bogus="1")
    message = str(info.value)
    assert "see the option table" in message
    for spec in OPTIONS:
        assert spec.name in message


def test_dedupe_window_range_error_shows_the_bounds_in_plain_seconds() -> None:
    with pytest.raises(InvalidOptionError) as info:
        parse(**BASE, dedupeWindow="2000000")
    assert "1209600" in str(info.value)
    assert "e+" not in str(info.value)


def test_value_is_shown_for_non_secret_options() -> None:
    with pytest.raises(InvalidOptionError, match=r"'numPartitions' = 'lots'"):
        parse(**BASE, numPartitions="lots")


# -- secrets -----------------------------------------------------------------------------------

SECRET_CASES = [
    pytest.param(with_base(awsSecretAccessKey=SECRET), id="secret-without-key"),
    pytest.param(with_base(awsAccessKeyId=ACCESS_KEY), id="key-without-secret"),
    pytest.param(with_base(awsSessionToken=TOKEN), id="token-only"),
    pytest.param(
        with_base(awsSecretAccessKey=SECRET, awsSessionToken=TOKEN), id="token-and-secret"
    ),
    pytest.param(
        with_base(
            awsAccessKeyId=ACCESS_KEY,
            awsSecretAccessKey=SECRET,
            awsSessionToken=TOKEN,
            numPartitions="0",
        ),
        id="other-option-invalid",
    ),
    pytest.param(
        with_base(awsAccessKeyId=ACCESS_KEY, awsSecretAccessKey=SECRET, bogus=SECRET),
        id="secret-in-unknown-option",
    ),
    pytest.param(with_base(awsSecretAccesKey=SECRET), id="misspelt-secret-option"),
    pytest.param(
        with_base(awsAccessKeyId=ACCESS_KEY, awsSecretAccessKey=SECRET, region="bad"),
        id="bad-region",
    ),
]


@pytest.mark.parametrize("options", SECRET_CASES)
def test_credentials_never_appear_in_error_messages(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidOptionError) as info:
        SqsOptions.parse(options, env={})
    shown = f"{info.value} {info.value!r} {info.value.args!r}"
    assert SECRET not in shown
    assert ACCESS_KEY not in shown
    assert TOKEN not in shown


def test_credentials_never_appear_in_repr_or_str() -> None:
    opts = parse(
        **BASE, awsAccessKeyId=ACCESS_KEY, awsSecretAccessKey=SECRET, awsSessionToken=TOKEN
    )
    for text in (repr(opts), str(opts), repr(opts.credentials), str(opts.credentials)):
        assert SECRET not in text
        assert ACCESS_KEY not in text
        assert TOKEN not in text
    # The rest of the options still show, for logs.
    assert URL in repr(opts)


def test_redaction_of_secret_keys_in_for_option_is_case_insensitive() -> None:
    for key in ("awsSecretAccessKey", "AWSSECRETACCESSKEY", "awsaccesskeyid", "awsSessionToken"):
        message = str(InvalidOptionError.for_option(key, SECRET, "is wrong", "fix it"))
        assert SECRET not in message
        assert "<redacted>" in message


# -- pickling ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        BASE,
        {
            "queueName": "orders.fifo",
            "queueOwnerAccountId": "210987654321",
            "region": "us-east-1",
            "endpointUrl": "http://127.0.0.1:4566",
            "journalLocation": "s3://bucket/journal",
            "messageAttributeNames": "a,b.*",
            "deleteOnCommit": "false",
            "queuePollInterval": "0.5",
            "awsAccessKeyId": ACCESS_KEY,
            "awsSecretAccessKey": SECRET,
            "awsSessionToken": TOKEN,
        },
    ],
    ids=["minimal", "everything"],
)
def test_options_pickle_and_unpickle_equal(options: dict[str, str]) -> None:
    opts = SqsOptions.parse(options, env={})
    restored = pickle.loads(pickle.dumps(opts))
    assert restored == opts
    assert restored.credentials == opts.credentials
    assert hash(restored) == hash(opts)


def test_options_are_immutable() -> None:
    opts = parse(**BASE)
    with pytest.raises(AttributeError):
        opts.num_partitions = 9  # type: ignore[misc]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"roleArn": "reader"}, "'roleArn' = 'reader': is not an IAM role ARN"),
        ({"roleExternalId": "x"}, "'roleExternalId': it only applies with 'roleArn'"),
        (
            {"profile": "p", "awsAccessKeyId": "AKIAX", "awsSecretAccessKey": "s"},
            "'profile' = 'p': conflicts with",
        ),
    ],
)
def test_credential_option_errors(extra: dict[str, str], message: str) -> None:
    raw = {"queueUrl": QUEUE_URL, "journalLocation": "/j", **extra}
    with pytest.raises(InvalidOptionError) as info:
        SqsOptions.parse(raw, env={})
    assert message in str(info.value) and "Fix:" in str(info.value)


def test_assume_role_options_are_parsed_and_external_id_hidden() -> None:
    parsed = SqsOptions.parse(
        {
            "queueUrl": QUEUE_URL,
            "journalLocation": "/j",
            "ROLEARN": "arn:aws:iam::123456789012:role/reader",
            "roleExternalId": "very-secret-external-id",
        },
        env={},
    )
    assert parsed.assume_role is not None
    assert parsed.assume_role.role_arn.endswith("role/reader")
    assert parsed.assume_role.session_name == "spark-sqs"
    assert "very-secret-external-id" not in repr(parsed)


@pytest.mark.parametrize(
    ("location", "fix"),
    [
        ("gs://bucket/journal", "s3://bucket/prefix"),
        ("hdfs://namenode/journal", "s3://bucket/prefix"),
        ("abfss://c@account.dfs.core.windows.net/j", "s3://bucket/prefix"),
        ("/dbfs/mnt/streams/journal", "give the s3:// location behind the volume"),
        ("dbfs:/mnt/streams/journal", "give the s3:// location behind the volume"),
        ("/Volumes/main/default/vol/journal", "give the s3:// location behind the volume"),
    ],
)
def test_journal_locations_without_create_if_absent_are_refused_at_load(
    location: str, fix: str
) -> None:
    # Exactly-once rests on the store's own create-if-absent; only local files and S3 have one
    # (and a test). The error names the option, the value and what to use instead.
    with pytest.raises(InvalidOptionError) as info:
        parse(queueUrl=URL, journalLocation=location)
    message = str(info.value)
    assert "'journalLocation'" in message and location in message
    assert fix in message


@pytest.mark.parametrize(
    "location", ["/tmp/j", "file:///tmp/j", "s3://bucket/j", "s3a://bucket/j", "relative/j"]
)
def test_local_and_s3_journal_locations_are_accepted(location: str) -> None:
    assert parse(queueUrl=URL, journalLocation=location).journal_location == location


# -- the table drives the parse --------------------------------------------------------------


def _specs(kind: str) -> list[Any]:
    return [pytest.param(s, id=s.name) for s in OPTIONS if s.kind == kind]


@pytest.mark.parametrize("spec", _specs("int") + _specs("seconds"))
def test_every_number_option_is_refused_outside_its_range(spec: Any) -> None:
    low = spec.low - 1 if spec.kind == "int" or spec.low == 0 else spec.low / 2
    for value in (low, spec.high * 2):
        with pytest.raises(InvalidOptionError) as info:
            parse(**BASE, **{spec.name: str(value)})
        message = str(info.value)
        assert f"'{spec.name}' = '{value}': is out of range" in message
        assert "Fix: give" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64m", 64 << 20),
        ("64MiB", 64 << 20),
        ("64 MB", 64 << 20),
        ("1g", 1 << 30),
        ("1536k", 1536 << 10),
        ("1048576", 1 << 20),
        ("10G", 10 << 30),
    ],
)
def test_byte_sizes_are_read_as_spark_writes_them(text: str, expected: int) -> None:
    opts = parse(**BASE, maxBytesPerReceiver=text, maxBytesPerTrigger=text)
    assert opts.max_bytes_per_receiver == expected
    assert opts.max_bytes_per_trigger == expected


def test_byte_limits_default_to_64_mib_per_receiver_and_no_batch_budget() -> None:
    opts = parse(**BASE)
    assert opts.max_bytes_per_receiver == 64 << 20
    assert opts.max_bytes_per_trigger is None


@pytest.mark.parametrize("spec", _specs("bytes"))
@pytest.mark.parametrize(
    ("value", "problem"),
    [("lots", "is not a byte size"), ("10x", "is not a byte size"), ("-5m", "is not a byte size")],
)
def test_every_byte_size_option_names_its_value_and_the_fix(
    spec: Any, value: str, problem: str
) -> None:
    with pytest.raises(InvalidOptionError) as info:
        parse(**BASE, **{spec.name: value})
    message = str(info.value)
    assert f"'{spec.name}' = '{value}': {problem}" in message
    assert "Fix: give a number of bytes with an optional unit k, m, g or t" in message


@pytest.mark.parametrize("spec", _specs("bytes"))
def test_every_byte_size_option_is_refused_outside_its_range(spec: Any) -> None:
    for value in (str(int(spec.low) - 1), f"{int(spec.high) * 2}"):
        with pytest.raises(InvalidOptionError) as info:
            parse(**BASE, **{spec.name: value})
        message = str(info.value)
        assert f"'{spec.name}' = '{value}': is out of range 1k-" in message
        assert "Fix: give a byte size from 1k to" in message


@pytest.mark.parametrize("spec", _specs("choice"))
def test_every_choice_is_accepted_in_any_case_and_others_are_refused(spec: Any) -> None:
    for choice in spec.choices:
        extra = {"messageFormat": "sns"} if spec.name == "invalidEnvelope" else {}
        opts = parse(**BASE, **extra, **{spec.name: choice.upper()})
        field = {"invalidEnvelope": "keep_invalid_envelopes"}.get(spec.name)
        if field is None:
            field = "".join(f"_{c.lower()}" if c.isupper() else c for c in spec.name)
            assert getattr(opts, field) == choice
        else:
            assert getattr(opts, field) is (choice == "keep")
    with pytest.raises(InvalidOptionError) as info:
        parse(**BASE, **{spec.name: "other"})
    message = str(info.value)
    assert f"'{spec.name}' = 'other': is not " in message
    assert all(f"'{c}'" in message for c in spec.choices)


def test_every_option_reaches_the_options_object() -> None:
    # An option added to the table must land in a field of its name of SqsOptions or of its
    # connection part, or be one a validator turns into another field.
    built_by_validators = {
        "invalidEnvelope",
        "awsAccessKeyId",
        "awsSecretAccessKey",
        "awsSessionToken",
        "roleArn",
        "roleExternalId",
        "roleSessionName",
    }
    fields = set(SqsOptions.__dataclass_fields__) | set(Connection.__dataclass_fields__)
    for spec in OPTIONS:
        field = "".join(f"_{c.lower()}" if c.isupper() else c for c in spec.name)
        assert field in fields or spec.name in built_by_validators, spec.name


def test_an_unknown_kind_in_the_table_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown kind 'number'"):
        OptionSpec("x", None, "x", kind="number")


def test_a_rule_naming_an_option_of_no_table_is_a_programming_error() -> None:
    from spark_sqs.option_table import OptionTable

    needs_role = OptionSpec("roleSessionName", None, "x", requires=("roleArn",))
    with pytest.raises(ValueError, match="'roleArn' names no sink option"):
        OptionTable("sink", (needs_role,))
    with pytest.raises(ValueError, match="listed twice"):
        OptionTable("sink", (needs_role, OptionSpec("roleArn", None, "x"), needs_role))


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            with_base(deadLetterQueueUrl=URL),
            "'deadLetterQueueUrl' = '" + URL + "': it only applies with "
            "poisonMessagePolicy=deadLetter (here fail). Fix: add "
            ".option('poisonMessagePolicy', 'deadLetter') or remove 'deadLetterQueueUrl'",
        ),
        (
            with_base(extendedPayloads="false", s3EndpointUrl="http://127.0.0.1:5000"),
            "only applies with extendedPayloads=true (here false): the journal's S3 endpoint",
        ),
        (
            with_base(queueOwnerAccountId="123456789012"),
            "'queueOwnerAccountId' = '123456789012': it only applies together with 'queueName', "
            "not with 'queueUrl'. Fix: remove it, or give 'queueName' instead of 'queueUrl'",
        ),
        (
            with_base(roleSessionName="nightly"),
            "'roleSessionName' = 'nightly': it only applies with 'roleArn'. Fix: set 'roleArn'",
        ),
        (
            with_base(deleteAfterJournal="yes", deleteOnCommit="no"),
            "'deleteAfterJournal' = 'yes': conflicts with deleteOnCommit=false",
        ),
        (
            with_base(profile="nightly", awsSecretAccessKey=SECRET),
            "'profile' = 'nightly': conflicts with 'awsSecretAccessKey'. Fix: set either "
            "'profile' or 'awsSecretAccessKey', not both",
        ),
    ],
)
def test_requires_and_excludes_errors_name_both_options_and_the_fix(
    options: dict[str, Any], expected: str
) -> None:
    with pytest.raises(InvalidOptionError) as info:
        SqsOptions.parse(options, env={})
    assert expected in str(info.value)
    assert SECRET not in str(info.value)


def test_a_secret_option_is_not_shown_in_a_requires_error() -> None:
    with pytest.raises(InvalidOptionError) as info:
        parse(**BASE, roleExternalId="very-secret-external-id")
    assert "very-secret-external-id" not in str(info.value)
    assert "'roleExternalId': it only applies with 'roleArn'" in str(info.value)


@pytest.mark.parametrize(
    "extra",
    [
        {"invalidEnvelope": "fail"},
        {"roleSessionName": "spark-sqs"},
        {"deleteExtendedPayloads": "false", "deleteOnCommit": "false"},
        {"deleteAfterJournal": "false", "deleteOnCommit": "false"},
        {"poisonMessagePolicy": "fail", "deleteOnCommit": "false"},
        {"profile": " ", "awsAccessKeyId": ACCESS_KEY, "awsSecretAccessKey": SECRET},
    ],
    ids=lambda extra: ",".join(extra),
)
def test_an_option_given_with_its_default_or_blank_never_conflicts(extra: dict[str, str]) -> None:
    parse(**BASE, **extra)
