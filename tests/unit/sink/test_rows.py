"""Input checks, row conversion and deduplication ids of the SQS sink (spark_sqs/sink/rows.py),
and its options (sink/options.py) and commit messages (sink/writer.py)."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import Row
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from spark_sqs.errors import InvalidOptionError
from spark_sqs.options import SqsOptions
from spark_sqs.schema import SCHEMA
from spark_sqs.sink.errors import OversizeRowError, SinkInputError
from spark_sqs.sink.options import ALL_SINK_OPTIONS, SinkOptions
from spark_sqs.sink.rows import (
    DEDUPE_ATTRIBUTE,
    DedupeIds,
    Layout,
    RowConverter,
    message_size,
)
from spark_sqs.sink.writer import QueueInfo, SinkCommitMessage, WriteTarget, report

URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/target"


_TYPES = {
    "string": StringType(),
    "int": IntegerType(),
    "binary": BinaryType(),
    "double": DoubleType(),
    "map<string,int>": MapType(StringType(), IntegerType()),
    "map<string,string>": MapType(StringType(), StringType()),
    "array<string>": ArrayType(StringType()),
    "attributes": SCHEMA["messageAttributes"].dataType,
}


def _schema(ddl: str) -> StructType:
    """'name type, ...' with the types above (StructType.fromDDL needs a SparkSession)."""
    fields = [part.split() for part in ddl.split(", ")]
    return StructType([StructField(name, _TYPES[kind]) for name, kind in fields])


def _layout(ddl: str, *, fifo: bool = False, ignore: bool = False) -> Layout:
    return Layout.of(_schema(ddl), fifo=fifo, ignore_extra=ignore, queue=URL)


# -- input checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ddl", "fifo", "expected"),
    [
        ("value string", False, "needs a string column 'body'"),
        ("body binary", False, "'body' must be a string, not binary"),
        ("body string, other int", False, "does not know the column(s) 'other'"),
        ("body string", True, "no 'messageGroupId' column"),
        ("body string, messageGroupId string", False, "is a standard queue"),
        ("body string, messageGroupId string, delaySeconds int", True, "'delaySeconds'"),
        ("body string, messageGroupId int", True, "'messageGroupId' must be a string"),
        ("body string, delaySeconds double", False, "must be an integer"),
        ("body string, messageAttributes map<string,int>", False, "has values of type int"),
        ("body string, messageAttributes array<string>", False, "must be a map"),
    ],
)
def test_bad_columns_are_refused_naming_column_and_fix(ddl, fifo, expected):
    with pytest.raises(SinkInputError) as failure:
        _layout(ddl, fifo=fifo)
    assert expected in str(failure.value) and "Fix:" in str(failure.value)


def test_a_source_row_is_accepted_with_ignore_extra_columns():
    with pytest.raises(SinkInputError, match="'md5OfBody'"):
        Layout.of(SCHEMA, fifo=False, ignore_extra=False, queue=URL)
    fifo = Layout.of(SCHEMA, fifo=True, ignore_extra=True, queue=URL)
    assert fifo.message_id == 0 and fifo.body == 1 and fifo.attributes is not None
    assert not fifo.attributes_are_strings


# -- conversion -----------------------------------------------------------------------------


def _converter(ddl: str, *, fifo: bool = False, max_size: int = 1024, scope: str = "s"):
    return RowConverter(
        _layout(ddl, fifo=fifo),
        fifo=fifo,
        dedupe=DedupeIds(scope, 0),
        max_message_size=max_size,
        oversize_allowed=False,
        where="partition 0 of batch 3",
    )


def test_standard_rows_carry_the_dedupe_id_as_an_attribute():
    conv = _converter("body string, messageAttributes map<string,string>")
    entry = conv.convert(0, ("hello", {"a": "1"}))
    assert entry.attributes["a"] == {"DataType": "String", "StringValue": "1"}
    dedupe = entry.attributes[DEDUPE_ATTRIBUTE]["StringValue"]
    assert dedupe == entry.dedupe_id and len(dedupe) == 64
    assert entry.request("0", fifo=False).keys() == {"Id", "MessageBody", "MessageAttributes"}
    assert entry.size == message_size("hello", entry.attributes)


def test_dedupe_attribute_false_sends_no_attribute_on_a_standard_queue():
    opts = SinkOptions.parse({"queueUrl": URL, "dedupeAttribute": "false"}, env={})
    assert not opts.dedupe_attribute
    assert SinkOptions.parse({"queueUrl": URL}, env={}).dedupe_attribute
    conv = RowConverter(
        _layout("body string, messageAttributes map<string,string>"),
        fifo=False,
        dedupe=DedupeIds("s", 0),
        max_message_size=1024,
        oversize_allowed=False,
        where="partition 0 of batch 3",
        dedupe_attribute=opts.dedupe_attribute,
    )
    plain = conv.convert(0, ("hello", None))
    assert plain.attributes is None and plain.size == len("hello")
    assert plain.request("0", fifo=False).keys() == {"Id", "MessageBody"}
    # The row's own attributes still go; the id is still derived (a FIFO dead-letter queue
    # uses it).
    own = conv.convert(1, ("hello", {"a": "1"}))
    assert own.attributes == {"a": {"DataType": "String", "StringValue": "1"}}
    assert own.dedupe_id and len(own.dedupe_id) == 64


def test_source_attribute_structs_are_written_back_unchanged():
    conv = _converter("body string, messageAttributes attributes")
    attrs = {
        "n": Row(dataType="Number", stringValue="7", binaryValue=None),
        "b": Row(dataType="Binary", stringValue=None, binaryValue=bytearray(b"\0\1")),
    }
    entry = conv.convert(0, ("x", attrs))
    assert entry.attributes["n"] == {"DataType": "Number", "StringValue": "7"}
    assert entry.attributes["b"] == {"DataType": "Binary", "BinaryValue": b"\0\1"}


def test_oversize_row_names_its_position_and_size():
    conv = _converter("body string", max_size=200)
    conv.convert(0, ("small",))
    with pytest.raises(OversizeRowError) as failure:
        conv.convert(1, ("y" * 50,))  # fits: 50 + 88 bytes of the dedupe attribute
        conv.convert(2, ("z" * 200,))
    text = str(failure.value)
    assert "Row 2 (0-based) of partition 0 of batch 3" in text
    size = message_size(
        "z" * 200, {DEDUPE_ATTRIBUTE: {"DataType": "String", "StringValue": "h" * 64}}
    )
    assert f"is {size} bytes" in text and "MaximumMessageSize of 200 bytes" in text


@pytest.mark.parametrize(
    ("ddl", "row", "expected"),
    [
        ("body string", (None,), "empty or null 'body'"),
        ("body string", ("",), "empty or null 'body'"),
        ("body string, messageGroupId string", ("x", None), "null or empty 'messageGroupId'"),
    ],
)
def test_rows_sqs_would_reject_fail_with_their_position(ddl, row, expected):
    conv = _converter(ddl, fifo="messageGroupId" in ddl)
    with pytest.raises(SinkInputError, match=r"Row 4 \(0-based\)") as failure:
        conv.convert(4, row)
    assert expected in str(failure.value)


def test_delay_out_of_range_is_refused():
    with pytest.raises(SinkInputError, match="delaySeconds=901"):
        _converter("body string, delaySeconds int").convert(0, ("x", 901))


# -- deduplication ids ----------------------------------------------------------------------


def _ids(rows, *, scope="q:1:b:5", partition=0, fifo=True):
    conv = RowConverter(
        _layout("body string, messageGroupId string, messageId string", fifo=fifo),
        fifo=fifo,
        dedupe=DedupeIds(scope, partition),
        max_message_size=1 << 20,
        oversize_allowed=False,
        where="p",
    )
    return [conv.convert(i, r).dedupe_id for i, r in enumerate(rows)]


def test_ids_are_deterministic_and_identical_rows_get_distinct_ids():
    rows = [("a", "g", None), ("b", "g", None), ("a", "g", None)]
    first = _ids(rows)
    assert first == _ids(rows), "a replay sends the same ids"
    assert len(set(first)) == 3, "identical rows are distinct messages"
    # Row order among different rows does not matter, only among identical ones.
    assert sorted(_ids([rows[1], rows[0], rows[2]])) == sorted(first)
    assert set(_ids(rows, scope="q:1:b:6")).isdisjoint(first), "another batch, other ids"
    assert set(_ids(rows, partition=1)).isdisjoint(first), "another partition, other ids"
    assert _ids([("a", "h", None)])[0] != first[0], "the group is part of the content"


def test_ids_from_the_upstream_message_id_ignore_scope_and_content():
    rows = [("a", "g", "m-1"), ("changed", "g", "m-1"), ("x", "g", "m-2")]
    ids = _ids(rows)
    assert len(set(ids)) == 3, "an exploded message's rows stay distinct"
    again = _ids([("other", "g", "m-1")], scope="q:2:b:99", partition=3)
    assert again[0] == ids[0]


def test_a_given_deduplication_id_is_used_as_is():
    conv = _converter(
        "body string, messageGroupId string, messageDeduplicationId string", fifo=True
    )
    assert (
        conv.convert(0, ("a", "g", "mine")).request("0", fifo=True)["MessageDeduplicationId"]
        == "mine"
    )


# -- options --------------------------------------------------------------------------------


def test_options_are_case_insensitive_with_defaults():
    opts = SinkOptions.parse(
        {"QUEUEURL": URL, "ignoreextracolumns": "TRUE", "checkpointLocation": "/c"}, env={}
    )
    assert opts.connection.queue_url == URL and opts.connection.region == "eu-west-1"
    assert opts.ignore_extra_columns and opts.max_in_flight_calls == 4
    assert opts.max_send_attempts == 10 and opts.write_id is None
    assert opts.metrics_location is None and opts.oversize_dead_letter_queue_url is None


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, "Missing SQS sink option 'queueUrl'"),
        ({"queueUrl": URL, "journalLocation": "/j"}, "Unknown SQS sink option 'journalLocation'"),
        ({"queueUrl": URL, "maxInFlightCall": "2"}, "did you mean 'maxInFlightCalls'"),
        ({"queueUrl": "nope"}, "Invalid SQS sink option 'queueUrl'"),
        ({"queueUrl": URL, "maxInFlightCalls": "0"}, "'maxInFlightCalls' = '0'"),
        ({"queueUrl": URL, "writeId": "has space"}, "'writeId'"),
        ({"queueUrl": URL, "metricsLocation": "s3://b/m"}, "must be a local directory"),
        ({"queueUrl": URL, "path": "/x"}, "takes no path"),
        ({"queueUrl": URL, "awsAccessKeyId": "AKIA"}, "Missing SQS sink option 'awsSecret"),
    ],
)
def test_bad_options_name_the_option_and_fix(options, expected):
    with pytest.raises(InvalidOptionError) as failure:
        SinkOptions.parse(options, env={})
    assert expected in str(failure.value) and "Fix:" in str(failure.value)


@pytest.mark.parametrize(
    "connection",
    [
        {},
        {"queueUrl": "nope"},
        {"queueUrl": URL + ",,"},
        {"queueName": "bad name!"},
        {"queueName": "target", "awsAccessKeyId": "AKIA"},
        {"queueUrl": URL, "region": "Europe"},
        {"queueName": "target"},
        {"queueUrl": URL, "awsSessionToken": "token"},
        {"queueUrl": URL, "profile": "p", "awsAccessKeyId": "AKIA", "awsSecretAccessKey": "s"},
        {"queueUrl": URL, "roleSessionName": "nightly"},
        {"queueUrl": URL, "endpointUrl": "localhost:4566"},
    ],
)
def test_the_sink_rejects_a_connection_as_the_source_does_naming_the_sink(connection):
    with pytest.raises(InvalidOptionError) as source:
        SqsOptions.parse({**connection, "journalLocation": "/j"}, env={})
    with pytest.raises(InvalidOptionError) as sink:
        SinkOptions.parse(connection, env={})
    assert "SQS source option" in str(source.value)
    assert str(sink.value) == str(source.value).replace("the source", "the sink").replace(
        "to read", "to write to"
    ).replace("SQS source option", "SQS sink option")


def test_the_sink_and_the_source_parse_one_connection_alike():
    connection = {
        "queueName": "target",
        "region": "eu-west-1",
        "endpointUrl": "http://127.0.0.1:4566",
        "awsAccessKey": "AKIAEXAMPLE",
        "awsSecretAccessKey": "secret",
        "roleArn": "arn:aws:iam::123456789012:role/writer",
    }
    source = SqsOptions.parse({**connection, "journalLocation": "/j"}, env={})
    sink = SinkOptions.parse(connection, env={})
    assert sink.connection == source.connection
    assert sink.connection.assume_role is not None and sink.connection.credentials is not None
    assert "secret" not in repr(sink) and "AKIAEXAMPLE" not in repr(sink)


def test_sink_option_table_is_documented(tmp_path):
    import re

    from tests import REPO

    doc = REPO / "docs" / "sink.md"
    documented = {}
    for line in doc.read_text().splitlines():
        match = re.match(r"^\| `([A-Za-z]+)` \| (`[^`]*`)? \|", line)
        if match:
            documented[match.group(1)] = (match.group(2) or "").strip("`")
    assert documented == {o.name: o.default or "" for o in ALL_SINK_OPTIONS}


# -- counters -------------------------------------------------------------------------------


def test_commit_sums_the_tasks_counters_into_a_metrics_file(tmp_path, caplog):
    opts = SinkOptions.parse({"queueUrl": URL, "metricsLocation": str(tmp_path)}, env={})
    target = WriteTarget(opts, QueueInfo(URL, False, 1024), _layout("body string"))
    messages = [
        SinkCommitMessage(0, {"rows": 5, "sent": 5, "retried": 2, "calls": 2}),
        None,
        SinkCommitMessage(1, {"rows": 3, "sent": 3, "failed": 1, "retried": 1, "calls": 1}),
    ]
    with caplog.at_level("INFO", logger="spark_sqs.sink.writer"):
        report(target, messages, "batch 7", "batch-0000000007")
    assert "SQS sink batch 7: 8 rows, sent 8, retried 3" in caplog.text
    written = json.loads((tmp_path / "batch-0000000007.json").read_text())
    assert written["sent"] == 8 and written["retried"] == 3 and written["failed"] == 1
    assert written["tasks"] == 2

    no_metrics = WriteTarget(
        SinkOptions.parse({"queueUrl": URL}, env={}), target.queue, target.layout
    )
    report(no_metrics, messages, "batch 8", "batch-0000000008")
    assert not (tmp_path / "batch-0000000008.json").exists()
