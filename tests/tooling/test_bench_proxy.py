"""The benchmarks' delay proxy forwards requests unchanged and holds each one."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.proxy import DelayProxy, sqs_items


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        data = json.dumps(
            {"path": self.path, "body": body.decode(), "target": self.headers.get("X-Amz-Target")}
        ).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def _proxy(delay: float) -> Iterator[DelayProxy]:
    """A delay proxy in front of an echoing server."""
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    proxy = DelayProxy(f"http://127.0.0.1:{upstream.server_address[1]}", delay)
    try:
        yield proxy
    finally:
        proxy.stop()
        upstream.shutdown()


def test_proxy_forwards_method_path_body_and_headers_and_counts_requests() -> None:
    with _proxy(0.0) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        for i in range(2):  # two requests on one keep-alive connection
            conn.request(
                "POST", f"/q/{i}", body=b'{"a": 1}', headers={"X-Amz-Target": "AmazonSQS.Rx"}
            )
            response = conn.getresponse()
            assert response.status == 201
            assert json.loads(response.read()) == {
                "path": f"/q/{i}",
                "body": '{"a": 1}',
                "target": "AmazonSQS.Rx",
            }
        assert proxy.requests == 2


def test_proxy_holds_each_request_for_the_delay() -> None:
    with _proxy(0.2) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        started = time.monotonic()
        conn.request("POST", "/", body=b"x")
        conn.getresponse().read()
        # A lower bound only: the delay is a sleep, so it can be longer, never shorter.
        assert time.monotonic() - started >= 0.2


def test_proxy_counts_requests_by_kind_and_resets_on_request() -> None:
    with _proxy(0.0) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        sent = [
            ("/", {"X-Amz-Target": "AmazonSQS.ReceiveMessage"}),
            ("/", {"X-Amz-Target": "AmazonSQS.ReceiveMessage"}),
            ("/bucket?delete", {}),
            ("/bucket/journal/key", {"x-amz-server-side-encryption": "aws:kms"}),
        ]
        for path, headers in sent:
            conn.request("POST", path, body=b"{}", headers=headers)
            conn.getresponse().read()
        conn.request("GET", "/__bench/counts")
        counted = json.loads(conn.getresponse().read())
        # The control request is neither forwarded nor counted; a POST that writes an object
        # with SSE-KMS implies a KMS request.
        assert counted["counts"] == {"SQS ReceiveMessage": 2, "S3 POST": 2, "KMS": 1}
        assert counted["units"] == {"SQS ReceiveMessage": 2}
        assert counted["objects"] == {"S3 POST (journal root)": 1, "S3 POST key": 1}
        # The echo answers no messages: two empty receives.
        assert counted["sqs_items"] == {"SQS ReceiveMessage": 0}
        assert counted["sqs_empty"] == {"SQS ReceiveMessage": 2}
        # One client connection (keep-alive), one to the upstream.
        assert counted["connections"] == {"client": 1, "upstream": 1}
        assert proxy.counts() == counted
        conn.request("POST", "/__bench/reset", body=b"")
        conn.getresponse().read()
        assert proxy.counts() == {
            "requests": 0,
            "counts": {},
            "units": {},
            "objects": {},
            "sqs_items": {},
            "sqs_empty": {},
            "connections": {},
        }


def test_sqs_calls_are_counted_with_the_messages_or_entries_they_carried() -> None:
    received = json.dumps(
        {
            "Messages": [
                {"MessageId": f"m{i}", "ReceiptHandle": f"h{i}", "Body": '{"MessageId": "x"}'}
                for i in range(3)
            ]
        }
    ).encode()
    deletes = json.dumps(
        {"QueueUrl": "q", "Entries": [{"Id": str(i), "ReceiptHandle": f"h{i}"} for i in range(7)]}
    ).encode()
    form = b"Action=DeleteMessageBatch&DeleteMessageBatchRequestEntry.1.Id=0&" + (
        b"DeleteMessageBatchRequestEntry.1.ReceiptHandle=h&DeleteMessageBatchRequestEntry.2.Id=1"
    )
    xml = b"<ReceiveMessageResult>" + (
        b"<Message><MessageId>a</MessageId></Message></ReceiveMessageResult>"
    )
    # A body that quotes a message id is not a message.
    assert sqs_items("SQS ReceiveMessage", b"{}", received) == 3
    assert sqs_items("SQS ReceiveMessage", b"", xml) == 1
    assert sqs_items("SQS ReceiveMessage", b"{}", b"{}") == 0
    assert sqs_items("SQS DeleteMessageBatch", deletes, b"{}") == 7
    assert sqs_items("SQS DeleteMessageBatch", form, b"") == 2
    assert sqs_items("SQS GetQueueAttributes", b"{}", b"{}") == 1
