"""Unusual message content reaches the DataFrame unchanged, exactly once: bodies at SQS's 1 MiB
limit, Unicode that tends to get mangled (astral plane, right-to-left, combining marks, control
characters), and every message attribute type including custom ones."""

from __future__ import annotations

import gzip
import hashlib
import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from spark_sqs.sqs.client import queue_counts

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


def md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()  # noqa: S324 - SQS's own checksum


def test_bodies_at_the_1_mib_limit(sqs, queue_url, tmp_path, deliver):
    bodies = {
        "ascii": "a" * (MIB - 1) + "z",
        # 4 bytes per character in UTF-8: 1 MiB of bytes, a quarter of that in characters.
        "emoji": "\U0001f600" * (MIB // 4),
        "json": json.dumps({"pad": "x" * (MIB - len('{"pad": ""}'))}),
    }
    for key, body in bodies.items():
        assert len(body.encode("utf-8")) == MIB, key
        sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    # One byte over is refused by SQS to the producer; it never reaches the source.
    with pytest.raises(ClientError, match="InvalidParameterValue"):
        sqs.send_message(QueueUrl=queue_url, MessageBody="a" * (MIB + 1))

    rows = deliver(numPartitions=2)

    assert sorted(r.body for r in rows) == sorted(bodies.values())
    for row in rows:
        assert row.md5OfBody == md5(row.body)
    assert queue_counts(sqs, queue_url) == (0, 0)
    # Acknowledged: the journal kept nothing of the large entries.
    assert not list((tmp_path / "journal" / "batches").glob("*/*.arrow"))


UNICODE_BODIES = {
    "astral-emoji": "\U0001f600\U0001f469\u200d\U0001f469\u200d\U0001f467\U0001f1fa\U0001f1e6",
    "rtl": "\u05e9\u05dc\u05d5\u05dd \u200f\u0645\u0631\u062d\u0628\u0627\u200e abc \u202eevil",
    "combining-not-normalised": "e\u0301 \u00e9 A\u030a\u0308 \u1e9b\u0323",
    "zero-width-and-bom": "\ufeffa\u200bb\u200cc\u200dd\u2060",
    "edges-of-the-allowed-ranges": "\ud7ff\ue000\ufffd\U00010000\U0010ffff",
    "whitespace-kept": "  \t line one\r\nline two\rline three\n\n  ",
    "cjk-and-math": "\u4e2d\u6587 \u65e5\u672c\u8a9e \U0001d400\U0001d7ff \u221e\u2211",
    "json-escapes": '{"quote": "\\"", "backslash": "\\\\", "nul": "\\u0000"}',
    # Real SQS refuses these characters at SendMessage (InvalidMessageContents); the embedded
    # server lets them through, and so does the source: what the service delivers is kept.
    "control-characters": "nul\x00 bell\x07 esc\x1b del\x7f c1\x85",
}


def test_unicode_bodies_round_trip_exactly(sqs, queue_url, deliver):
    for key, body in UNICODE_BODIES.items():
        sqs.send_message(
            QueueUrl=queue_url,
            MessageBody=body,
            MessageAttributes={"case": {"DataType": "String", "StringValue": key}},
        )

    rows = deliver()

    got = {r.messageAttributes["case"].stringValue: r for r in rows}
    assert len(rows) == len(UNICODE_BODIES) == len(got), "each body exactly once"
    for key, body in UNICODE_BODIES.items():
        # Byte for byte: no normalisation (NFC would merge "e\u0301"), no trimming.
        assert got[key].body == body, key
        assert got[key].md5OfBody == md5(body), key


ATTRIBUTES: dict[str, dict[str, Any]] = {
    "kind": {"DataType": "String", "StringValue": "order"},
    "count": {"DataType": "Number", "StringValue": "42"},
    # SQS keeps a number as the string that was sent: no float conversion, trailing zeros kept.
    "price": {"DataType": "Number", "StringValue": "-1234.50"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff\x10binary"},
    "ratio": {"DataType": "Number.float", "StringValue": "2.5e-3"},
    "payload": {"DataType": "String.json", "StringValue": '{"a": [1, "\u00e9"]}'},
    "archive": {"DataType": "Binary.gz", "BinaryValue": gzip.compress(b"hello", mtime=0)},
    "trace.id": {"DataType": "String", "StringValue": "\u00fc\U0001f600-\u05e9"},
    "custom.binary": {"DataType": "Binary.x", "BinaryValue": b"\x00"},
    "tenth": {"DataType": "String", "StringValue": " spaces kept "},
}


def test_every_message_attribute_type(sqs, queue_url, deliver):
    assert len(ATTRIBUTES) == 10, "SQS's maximum per message"
    sqs.send_message(
        QueueUrl=queue_url, MessageBody="with attributes", MessageAttributes=ATTRIBUTES
    )
    sqs.send_message(QueueUrl=queue_url, MessageBody="without attributes")

    rows = {r.body: r for r in deliver()}

    assert set(rows) == {"with attributes", "without attributes"}
    assert rows["without attributes"].messageAttributes == {}
    got = rows["with attributes"].messageAttributes
    assert set(got) == set(ATTRIBUTES)
    for name, sent in ATTRIBUTES.items():
        value = got[name]
        # dataType as sent, custom suffix included; the value in stringValue (String and Number
        # types) or binaryValue (Binary types), the other one null.
        assert value.dataType == sent["DataType"], name
        assert value.stringValue == sent.get("StringValue"), name
        binary = None if value.binaryValue is None else bytes(value.binaryValue)
        assert binary == sent.get("BinaryValue"), name
    assert gzip.decompress(bytes(got["archive"].binaryValue)) == b"hello"


def test_message_attribute_names_selects_attributes(sqs, queue_url, deliver):
    sqs.send_message(QueueUrl=queue_url, MessageBody="m", MessageAttributes=ATTRIBUTES)

    rows = deliver(messageAttributeNames="kind, trace.id")

    assert len(rows) == 1
    # Only the named attributes are fetched; the others are not in the map (not null entries).
    assert set(rows[0].messageAttributes) == {"kind", "trace.id"}
    assert (
        rows[0].messageAttributes["trace.id"].stringValue == ATTRIBUTES["trace.id"]["StringValue"]
    )
