"""The two servers of ``bench.driver``, each in its own process (``python -m bench.driver_servers
sqs|s3``), so that neither shares the measured driver's GIL or CPU time:

- ``sqs``: a stub SQS endpoint speaking the JSON protocol botocore uses (``POST /`` with
  ``X-Amz-Target: AmazonSQS.<Op>`` and a JSON body). Every call waits a fixed delay and nothing
  costs per message: ``ReceiveMessage`` hands out synthetic messages until a configured backlog
  is used up, batch deletes and visibility changes succeed for every entry.
- ``s3``: moto's S3 as a WSGI app behind a middleware that counts requests by kind (PUT, GET,
  HEAD, LIST, DELETE, POST).

Both count every request twice over: by kind, and by who sent it. A request is the driver's
when the client end of its TCP connection belongs to this server's parent process (the harness,
which is the driver); any other process (the receivers' worker processes) is a worker. The
owner is found from ``/proc`` (Linux): the connection's socket inode in ``/proc/net/tcp``, then
whether the parent holds that inode among its file descriptors. Exact, so the counts are
deterministic; elsewhere every request counts as ``unknown``.

Control requests, never counted: ``GET /__counts`` (the counters as JSON), ``POST /__reset``
(zero them; the SQS stub takes ``{"backlog": N, "delay": s}`` too).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DRIVER, WORKER, UNKNOWN = "driver", "worker", "unknown"


def _socket_inode(client_port: int, server_port: int) -> str | None:
    """Inode of the client end of a loopback TCP connection, from /proc/net/tcp."""
    try:
        with open("/proc/net/tcp") as f:
            lines = f.readlines()[1:]
    except OSError:
        return None
    local, remote = f":{client_port:04X}", f":{server_port:04X}"
    for line in lines:
        fields = line.split()
        # Skip TIME_WAIT remnants of an earlier connection on the same ports (inode 0).
        if fields[1].endswith(local) and fields[2].endswith(remote) and fields[9] != "0":
            return fields[9]
    return None


def origin(client_port: int, server_port: int, driver_pid: int) -> str:
    """``driver`` if ``driver_pid`` owns the client end of this connection, else ``worker``."""
    inode = _socket_inode(client_port, server_port)
    if inode is None:
        return UNKNOWN
    target = f"socket:[{inode}]"
    fd_dir = f"/proc/{driver_pid}/fd"
    try:
        for fd in os.listdir(fd_dir):
            try:
                if os.readlink(f"{fd_dir}/{fd}") == target:
                    return DRIVER
            except OSError:
                continue
    except OSError:
        return UNKNOWN
    return WORKER


class Counts:
    """Thread-safe counters: ``<origin>:<kind>`` -> requests, and ``<origin>:<kind>:entries``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, who: str, kind: str, entries: int = 0) -> None:
        with self._lock:
            self._counts[f"{who}:{kind}"] += 1
            if entries:
                self._counts[f"{who}:{kind}:entries"] += entries

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


# -- the SQS stub -------------------------------------------------------------------------------

# The length of a real receipt handle (base64, about 180 characters): it is what the journal
# stores and what every delete sends.
_HANDLE_PAD = "A" * 150


class StubSqs:
    """State of the stub queue: a backlog of synthetic messages, handed out once each."""

    def __init__(self, backlog: int, delay: float, body_bytes: int) -> None:
        self.lock = threading.Lock()
        self.backlog = backlog
        self.delay = delay
        self.handed_out = 0
        self.body = "x" * body_bytes
        self.md5 = hashlib.md5(self.body.encode()).hexdigest()
        self.counts = Counts()
        self.run_id = uuid.uuid4().hex[:8]

    def take(self, wanted: int) -> range:
        with self.lock:
            first = self.handed_out
            n = max(0, min(wanted, self.backlog - first))
            self.handed_out += n
            return range(first, first + n)

    def message(self, n: int, now_ms: str) -> dict[str, Any]:
        # A message id shaped like SQS's (a UUID: 36 characters), unique per server run.
        message_id = f"{self.run_id}-0000-4000-8000-{n:012d}"
        return {
            "MessageId": message_id,
            "ReceiptHandle": f"{message_id}/{_HANDLE_PAD}",
            "MD5OfBody": self.md5,
            "Body": self.body,
            "Attributes": {
                "SenderId": "AIDAEXAMPLE",
                "SentTimestamp": now_ms,
                "ApproximateReceiveCount": "1",
                "ApproximateFirstReceiveTimestamp": now_ms,
            },
        }

    def answer(self, op: str, request: dict[str, Any]) -> tuple[int, dict[str, Any], int]:
        """(HTTP status, response body, entries) of one call."""
        if op == "ReceiveMessage":
            wanted = int(request.get("MaxNumberOfMessages", 1))
            now_ms = str(int(time.time() * 1000))
            messages = [self.message(n, now_ms) for n in self.take(wanted)]
            return 200, {"Messages": messages} if messages else {}, len(messages)
        if op in ("DeleteMessageBatch", "ChangeMessageVisibilityBatch"):
            entries = request.get("Entries", [])
            return 200, {"Successful": [{"Id": e["Id"]} for e in entries]}, len(entries)
        if op in ("DeleteMessage", "ChangeMessageVisibility"):
            return 200, {}, 1
        if op == "GetQueueAttributes":
            with self.lock:
                visible = max(0, self.backlog - self.handed_out)
            attrs = {
                "QueueArn": "arn:aws:sqs:us-east-1:123456789012:bench",
                "ApproximateNumberOfMessages": str(visible),
                "ApproximateNumberOfMessagesNotVisible": "0",
                "ApproximateNumberOfMessagesDelayed": "0",
                "VisibilityTimeout": "30",
                "MaximumMessageSize": "262144",
            }
            names = request.get("AttributeNames") or ["All"]
            if "All" not in names:
                attrs = {k: v for k, v in attrs.items() if k in names}
            return 200, {"Attributes": attrs}, 0
        if op == "GetQueueUrl":
            return 200, {"QueueUrl": f"http://127.0.0.1/123456789012/{request['QueueName']}"}, 0
        return 400, {"__type": "com.amazonaws.sqs#UnsupportedOperation", "message": op}, 0


def _sqs_handler(stub: StubSqs, driver_pid: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as botocore's pool expects

        def setup(self) -> None:
            super().setup()
            # One handler per connection: whose it is is looked up once.
            self.who = origin(self.client_address[1], self.server.server_address[1], driver_pid)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            pass

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-amz-json-1.0")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-amzn-RequestId", "bench")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/__counts":
                with stub.lock:
                    handed_out = stub.handed_out
                self._reply(200, {"counts": stub.counts.snapshot(), "handedOut": handed_out})
            else:
                self._reply(404, {})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path == "/__reset":
                config = json.loads(raw or b"{}")
                with stub.lock:
                    stub.backlog = int(config.get("backlog", stub.backlog))
                    stub.delay = float(config.get("delay", stub.delay))
                    stub.handed_out = 0
                    stub.run_id = uuid.uuid4().hex[:8]
                stub.counts.reset()
                self._reply(200, {})
                return
            target = self.headers.get("X-Amz-Target", "")
            op = target.split(".", 1)[1] if target.startswith("AmazonSQS.") else target
            request = json.loads(raw or b"{}")
            # The fixed cost of a call (a round trip to SQS in a region); concurrent calls
            # overlap, as they do against SQS.
            time.sleep(stub.delay)
            status, body, entries = stub.answer(op, request)
            stub.counts.add(self.who, op, entries)
            self._reply(status, body)

    return Handler


def serve_sqs(backlog: int, delay: float, body_bytes: int) -> ThreadingHTTPServer:
    stub = StubSqs(backlog, delay, body_bytes)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _sqs_handler(stub, os.getppid()))
    server.daemon_threads = True
    server.request_queue_size = 512
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# -- S3 (moto) with a request counter -------------------------------------------------------------


def s3_kind(method: str, path: str, query: str) -> str:
    """PUT, GET, HEAD, LIST (a GET of a bucket: ListObjects), DELETE, POST (DeleteObjects)."""
    bucket_only = path.strip("/").count("/") == 0
    if method == "GET" and (bucket_only or "list-type" in query or "prefix=" in query):
        return "LIST"
    return method


class CountingS3:
    """WSGI middleware around moto's app: counts requests by kind and by sender."""

    def __init__(self, app: Any, driver_pid: int) -> None:
        self.app = app
        self.driver_pid = driver_pid
        self.counts = Counts()
        self._origins: dict[tuple[int, int], str] = {}
        self._lock = threading.Lock()

    def _origin(self, environ: dict[str, Any]) -> str:
        port = int(environ.get("REMOTE_PORT") or 0)
        sock = environ.get("werkzeug.socket")
        # One lookup per connection (keep-alive connections carry many requests).
        key = (port, id(sock))
        with self._lock:
            who = self._origins.get(key)
        if who is None:
            server_port = int(environ.get("SERVER_PORT") or 0)
            who = origin(port, server_port, self.driver_pid)
            with self._lock:
                self._origins[key] = who
        return who

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path == "/__counts":
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps({"counts": self.counts.snapshot()}).encode()]
        if path == "/__reset":
            self.counts.reset()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [b"{}"]
        kind = s3_kind(environ["REQUEST_METHOD"], path, environ.get("QUERY_STRING", ""))
        self.counts.add(self._origin(environ), kind)
        return self.app(environ, start_response)


def serve_s3() -> Any:
    import logging

    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = CountingS3(DomainDispatcherApplication(create_backend_app), os.getppid())
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.driver_servers")
    p.add_argument("kind", choices=["sqs", "s3"])
    p.add_argument("--backlog", type=int, default=0)
    p.add_argument("--delay", type=float, default=0.005, help="seconds per SQS call")
    p.add_argument("--body-bytes", type=int, default=200)
    args = p.parse_args(argv)
    if args.kind == "sqs":
        server = serve_sqs(args.backlog, args.delay, args.body_bytes)
        host, port = server.server_address[:2]
    else:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
        server = serve_s3()
        host, port = "127.0.0.1", server.server_port
    print(f"ENDPOINT http://{host}:{port}", flush=True)
    # Runs until the harness closes stdin (bench.servers.Child).
    sys.stdin.read()
    server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
