"""The AWS bill of a consumer, from the requests it made: request accounting and list prices.

Runs on: the benchmark process (development tool; not in the wheel).

Every request a consumer sends goes through a counting proxy (``bench.proxy``), which names it
with ``request_kind``: ``SQS <Action>`` for SQS (JSON or query protocol), ``S3 <class>`` for S3,
where the class is what the price list bills (``PUT``, ``COPY``, ``POST``, ``LIST``, ``GET``,
``HEAD``, ``DELETE``). A request may also imply requests to other services, counted beside it:

- ``KMS`` where S3 encrypts with SSE-KMS without an S3 Bucket Key: every object written costs
  a ``GenerateDataKey`` and every object read a ``Decrypt`` (``kms_requests``).
- SQS bills each 64 KiB of payload as one request (``sqs_billed_requests``).

``cost_per_million`` prices the counts with ``PRICES``; ``per_thousand`` turns them into
requests per 1,000 messages. Everything here is arithmetic on counts, asserted in
``tests/tooling/test_bench_cost.py``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs

SQS_CHUNK_BYTES = 64 * 1024
_NUMBERS = re.compile(r"[0-9a-f]{8,}|\d+")


@dataclass(frozen=True)
class Price:
    usd: float
    per: int
    source: str

    def of(self, requests: float) -> float:
        return requests * self.usd / self.per


# List prices, us-east-1, on-demand, without free tier.
_SQS = "https://aws.amazon.com/sqs/pricing/ (first 100 billion requests a month)"
_S3 = "https://aws.amazon.com/s3/pricing/ (S3 Standard, requests and data retrievals)"
_KMS = "https://aws.amazon.com/kms/pricing/ (symmetric key API requests)"
PRICES: dict[str, Price] = {
    "sqs standard": Price(0.40, 1_000_000, _SQS),
    "sqs fifo": Price(0.50, 1_000_000, _SQS),
    # PUT, COPY, POST, LIST. DeleteObjects is an HTTP POST and is billed here as one (the
    # conservative reading; single DELETEs are free).
    "s3 tier 1": Price(0.005, 1_000, _S3),
    # GET, HEAD and every other request but DELETE.
    "s3 tier 2": Price(0.0004, 1_000, _S3),
    "kms": Price(0.03, 10_000, _KMS),
}

S3_TIER_1 = frozenset({"PUT", "COPY", "POST", "LIST"})
S3_FREE = frozenset({"DELETE"})
# A GET of a bucket with only these parameters lists it (ListObjects, ListObjectsV2, uploads,
# versions); other bucket GETs (?location, ?versioning) are GET-class.
_LIST_PARAMETERS = frozenset(
    {
        "list-type",
        "prefix",
        "delimiter",
        "marker",
        "max-keys",
        "continuation-token",
        "start-after",
        "encoding-type",
        "fetch-owner",
        "uploads",
        "versions",
        "key-marker",
        "version-id-marker",
        "upload-id-marker",
    }
)


# -- naming requests ------------------------------------------------------------------------------


def s3_class(method: str, path: str, query: str, headers: Mapping[str, str]) -> str:
    """The price class of one path-style S3 request (``/bucket`` or ``/bucket/key``)."""
    method = method.upper()
    lowered = {k.lower(): v for k, v in headers.items()}
    bucket_only = "/" not in path.strip("/")
    if method == "GET":
        params = set(parse_qs(query, keep_blank_values=True))
        if bucket_only and params <= _LIST_PARAMETERS:
            return "LIST"
        return "GET"
    if method == "PUT" and "x-amz-copy-source" in lowered:
        return "COPY"
    return method


def request_kind(
    method: str, path: str, query: str, headers: Mapping[str, str], body: bytes | None
) -> str:
    """``SQS <Action>`` or ``S3 <class>`` (see ``s3_class``)."""
    target = next((v for k, v in headers.items() if k.lower() == "x-amz-target"), "")
    if target.startswith("AmazonSQS."):
        return "SQS " + target.split(".", 1)[1]
    if method.upper() == "POST" and path in ("", "/") and body:
        # SQS's query protocol: a form with Action=.
        form = parse_qs(body.decode("utf-8", "replace"))
        if "Action" in form:
            return "SQS " + form["Action"][0]
    return "S3 " + s3_class(method, path, query, headers)


def s3_key_pattern(path: str, query: str) -> str:
    """Which journal object a path-style S3 request is for, numbers and hashes replaced by
    ``N``: the key (or a LIST's prefix) under the bucket and one prefix level, as the benchmark
    lays out its journals (``/bucket/<journal>/batches/12/0.arrow`` -> ``batches/N/N.arrow``)."""
    parts = path.strip("/").split("/")
    if len(parts) <= 1:
        prefix = parse_qs(query).get("prefix", [""])[0]
        parts = [parts[0], *prefix.strip("/").split("/")]
    key = "/".join(parts[2:])
    return _NUMBERS.sub("N", key) or "(journal root)"


def kms_requests(
    kind: str, request_headers: Mapping[str, str], response_headers: Mapping[str, str]
) -> int:
    """KMS requests S3 makes on a request's behalf: SSE-KMS without a Bucket Key costs one
    ``GenerateDataKey`` per object written and one ``Decrypt`` per object read."""
    if kind not in ("S3 PUT", "S3 COPY", "S3 POST", "S3 GET"):
        return 0
    headers = response_headers if kind == "S3 GET" else request_headers
    lowered = {k.lower(): v.lower() for k, v in headers.items()}
    if lowered.get("x-amz-server-side-encryption") != "aws:kms":
        return 0
    if lowered.get("x-amz-server-side-encryption-bucket-key-enabled") == "true":
        return 0
    # DeleteObjects (a POST) carries no SSE header, so only writes and reads get here.
    return 1


def sqs_billed_requests(payload_bytes: int) -> int:
    """SQS bills each 64 KiB chunk of a request's payload as one request."""
    return max(1, math.ceil(payload_bytes / SQS_CHUNK_BYTES))


# -- pricing ------------------------------------------------------------------------------------


def price_key(kind: str, fifo: bool = False) -> str | None:
    """Which entry of ``PRICES`` bills a request kind (None: free)."""
    if kind.startswith("SQS "):
        return "sqs fifo" if fifo else "sqs standard"
    if kind == "KMS":
        return "kms"
    if kind.startswith("S3 "):
        cls = kind[3:]
        if cls in S3_FREE:
            return None
        return "s3 tier 1" if cls in S3_TIER_1 else "s3 tier 2"
    raise ValueError(f"unknown request kind {kind!r}")


def billed(counts: Mapping[str, int], units: Mapping[str, int] | None = None) -> dict[str, int]:
    """The billed requests by kind: SQS kinds by their 64 KiB units where ``units`` has them."""
    units = units or {}
    return {k: (units.get(k, v) if k.startswith("SQS ") else v) for k, v in counts.items()}


def cost_usd(counts: Mapping[str, int], fifo: bool = False) -> dict[str, float]:
    """Dollars by service (``SQS``, ``S3``, ``KMS``) for billed request counts."""
    out = {"SQS": 0.0, "S3": 0.0, "KMS": 0.0}
    for kind, n in counts.items():
        key = price_key(kind, fifo)
        if key is not None:
            out[kind.split(" ", 1)[0]] += PRICES[key].of(n)
    return out


def cost_per_million(
    counts: Mapping[str, int], messages: int, fifo: bool = False
) -> dict[str, float]:
    """Dollars per million messages by service, and ``total``."""
    if messages <= 0:
        return {}
    by_service = cost_usd(counts, fifo)
    out = {k: v * 1_000_000 / messages for k, v in by_service.items()}
    out["total"] = sum(out.values())
    return out


def per_thousand(counts: Mapping[str, int], messages: int) -> dict[str, float]:
    """Requests per 1,000 messages by kind."""
    if messages <= 0:
        return {}
    return {k: 1000 * v / messages for k, v in sorted(counts.items())}


def prices_json() -> str:
    return json.dumps({k: vars(v) for k, v in PRICES.items()}, indent=2)
