"""A loopback HTTP forwarding proxy that adds a fixed delay to every request.

SQS within an AWS region answers in roughly 10-30 ms; moto and LocalStack on 127.0.0.1 answer in
well under a millisecond of network time. Putting this proxy between a consumer and the local SQS
makes each call cost about what it costs in a region, so what a benchmark measures is how many
calls a consumer keeps in flight (its concurrency), not how fast one Python process can spin.

Each connection gets its own thread and its own persistent upstream connection, so concurrent
requests are delayed concurrently, as on a real network. Run standalone as
``python -m bench.proxy --upstream URL --delay 0.02`` (prints ``PORT <n>``), or embed
``DelayProxy``.

The proxy also counts what passes through it by kind (``bench.cost.request_kind``: SQS by
action, S3 by price class), with the 64 KiB units SQS bills and the KMS requests S3's SSE-KMS
implies, for the cost section of ``make bench``. Control requests, never forwarded nor counted:
``GET /__bench/counts`` (JSON) and ``POST /__bench/reset``. For SQS it also counts what each
call carried (``sqs_items``): the messages a ``ReceiveMessage`` returned, the entries of a
batch call, and the calls that carried none: how full the calls were; and the connections
opened, to the proxy and from it to the server (``connections``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

from bench import cost

CONTROL = "/__bench/"

# Hop-by-hop headers are per connection and must not be forwarded (RFC 9110 7.6.1).
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: with Nagle's algorithm on, the client's
    # delayed ACK would add about 40 ms to every response.
    disable_nagle_algorithm = True
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def setup(self) -> None:
        super().setup()
        self.server.opened("client")

    def _control(self, body: bytes | None) -> None:
        if self.path == CONTROL + "reset":
            self.server.reset()
        data = json.dumps(self.server.snapshot()).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self.path.startswith(CONTROL):
            self._control(body)
            return
        delay = self.server.delay
        if delay > 0:
            time.sleep(delay)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Host"] = self.server.upstream_netloc
        conn = getattr(self, "_upstream", None)
        for attempt in range(2):
            if conn is None:
                conn = http.client.HTTPConnection(
                    self.server.upstream_host, self.server.upstream_port, timeout=120
                )
                conn.connect()
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.server.opened("upstream")
                self._upstream = conn
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                break
            except (http.client.HTTPException, OSError):
                # The upstream closed an idle keep-alive connection: reconnect once.
                conn.close()
                conn = None
                self._upstream = None
                if attempt:
                    self.send_error(502, "upstream unreachable")
                    return
        self.server.count(self.command, self.path, self.headers, body, response, data)
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    # Many consumers open connections at once; the default backlog of 5 drops some.
    request_queue_size = 256

    def __init__(self, upstream: str, delay: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        parsed = urlparse(upstream)
        self.upstream_host = parsed.hostname or "127.0.0.1"
        self.upstream_port = parsed.port or 80
        self.upstream_netloc = parsed.netloc
        self.delay = delay
        self.requests = 0
        self._counts: dict[str, int] = {}
        self._units: dict[str, int] = {}
        self._objects: dict[str, int] = {}
        self._items: dict[str, int] = {}
        self._empty: dict[str, int] = {}
        self._connections: dict[str, int] = {}
        self._guard = threading.Lock()

    def opened(self, side: str) -> None:
        """A connection opened: a client's to the proxy, or the proxy's to the upstream."""
        with self._guard:
            self._connections[side] = self._connections.get(side, 0) + 1

    def count(
        self,
        method: str,
        target: str,
        headers: Any,
        body: bytes | None,
        response: http.client.HTTPResponse,
        data: bytes,
    ) -> None:
        path, _, query = target.partition("?")
        kind = cost.request_kind(method, path, query, headers, body)
        units = 0
        kms = 0
        obj = ""
        items = -1
        if kind.startswith("SQS "):
            units = cost.sqs_billed_requests(max(len(body or b""), len(data)))
            items = sqs_items(kind, body, data)
        else:
            kms = cost.kms_requests(kind, headers, dict(response.getheaders()))
            obj = f"{kind} {cost.s3_key_pattern(path, query)}"
        with self._guard:
            self.requests += 1
            self._counts[kind] = self._counts.get(kind, 0) + 1
            if units:
                self._units[kind] = self._units.get(kind, 0) + units
            if kms:
                self._counts["KMS"] = self._counts.get("KMS", 0) + kms
            if obj:
                self._objects[obj] = self._objects.get(obj, 0) + 1
            if items >= 0:
                self._items[kind] = self._items.get(kind, 0) + items
                if not items:
                    self._empty[kind] = self._empty.get(kind, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        with self._guard:
            return {
                "requests": self.requests,
                "counts": dict(self._counts),
                "units": dict(self._units),
                "objects": dict(self._objects),
                "sqs_items": dict(self._items),
                "sqs_empty": dict(self._empty),
                "connections": dict(self._connections),
            }

    def reset(self) -> None:
        with self._guard:
            self.requests = 0
            self._counts.clear()
            self._units.clear()
            self._objects.clear()
            self._items.clear()
            self._empty.clear()
            self._connections.clear()


def sqs_items(kind: str, body: bytes | None, data: bytes) -> int:
    """What one SQS call carried: the messages a ``ReceiveMessage`` returned, the entries of a
    ``...Batch`` request, 1 for any other call. JSON protocol (``"MessageId"`` and
    ``"ReceiptHandle"``/``"Id"`` keys) or the query protocol (XML answers, form requests)."""
    if kind == "SQS ReceiveMessage":
        return data.count(b'"MessageId"') + data.count(b"<MessageId>")
    if kind.endswith("Batch"):
        request = body or b""
        return request.count(b'"Id"') + len(re.findall(rb"Entry\.\d+\.Id=", request))
    return 1


class DelayProxy:
    """Forwards ``http://127.0.0.1:<port>`` to ``upstream``, ``delay`` seconds late."""

    def __init__(self, upstream: str, delay: float) -> None:
        self._server = _ProxyServer(upstream, delay)
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def requests(self) -> int:
        return self._server.requests

    def counts(self) -> dict[str, Any]:
        """``{"requests": n, "counts": {kind: n}, "units": {SQS kind: 64 KiB units},
        "objects": {"S3 <class> <key pattern>": n}, "sqs_items": {SQS kind: messages or
        entries}, "sqs_empty": {SQS kind: calls that carried none}, "connections": {"client" or
        "upstream": connections opened}}``."""
        return self._server.snapshot()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds added per request")
    args = parser.parse_args(argv)
    proxy = DelayProxy(args.upstream, args.delay)
    print(f"PORT {proxy.port}", flush=True)
    try:
        # Until the parent closes our stdin (or dies).
        sys.stdin.read()
    finally:
        proxy.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
