"""What a receiver's connections cost: each new TCP connection costs the SQS endpoint, any proxy
on the way and botocore a set-up, so the clients a Python worker keeps (``per_process.py``) must
keep their connections from task to task. Counted at a proxy in front of moto while the
real driver and receivers (a freshly unpickled reader per task, as in Spark's Python workers)
run a backlog drain: a worker opens its connections in its first batches (the receive, then
up to one per delete thread in the first batch that deletes) and none after them. A cost of
the driver, the receivers and the SQS client together, so no single module's test file is its
home."""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bench.proxy import DelayProxy
from spark_sqs.options import SqsOptions
from spark_sqs.source import SqsStreamReader

PER_BATCH = 60
BATCHES = 6


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[DelayProxy]:
    # moto closes each connection after its response (HTTP/1.0); the proxy keeps the client's
    # open (HTTP/1.1) and counts those it accepts. Its delay makes a receiver's delete calls
    # overlap in every batch, so the first batch that deletes opens as many connections as
    # any later one needs.
    counting = DelayProxy(moto_endpoint, delay=0.1)
    yield counting
    counting.stop()


def _opened(proxy: DelayProxy) -> int:
    return proxy.counts()["connections"].get("client", 0)


def _fill(sqs: Any, queue_url: str, count: int) -> None:
    for start in range(0, count, 10):
        entries = [{"Id": str(i), "MessageBody": f"m{start + i}"} for i in range(10)]
        sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)


def test_a_worker_opens_no_connection_after_its_first_deletes(
    sqs: Any, queue_url: str, proxy: DelayProxy, tmp_path: Any
) -> None:
    from spark_sqs.sqs import client as sqs_client

    # This process is the only worker: it starts with no client of its own.
    sqs_client._CLIENTS.clear()
    _fill(sqs, queue_url, PER_BATCH * (BATCHES + 1))
    options = SqsOptions.parse(
        {
            "queueUrl": queue_url,
            "endpointUrl": proxy.endpoint,
            "region": "us-east-1",
            "journalLocation": str(tmp_path / "journal"),
            "numPartitions": "2",
            "maxMessagesPerTrigger": str(PER_BATCH),
            "waitTimeSeconds": "0",
        }
    )
    reader = SqsStreamReader(options)
    shipped = pickle.dumps(reader)
    limit = reader.getDefaultReadLimit()
    start = reader.initialOffset()
    opened: list[int] = []
    rows: list[int] = []
    try:
        while len(opened) < BATCHES:
            before = _opened(proxy)
            end = reader.latestOffset(start, limit)
            deadline = time.monotonic() + 30
            while end == start and time.monotonic() < deadline:
                time.sleep(0.05)
                end = reader.latestOffset(start, limit)
            assert end != start, "no batch planned"
            got = 0
            for partition in reader.partitions(start, end):
                # Spark's Python worker runs each task on a reader unpickled for it.
                got += sum(b.num_rows for b in pickle.loads(shipped).read(partition))
            opened.append(_opened(proxy) - before)
            rows.append(got)
            start = end
    finally:
        reader.stop()
        sqs_client._CLIENTS.clear()
    assert sum(rows) == PER_BATCH * BATCHES
    # The first batches open the connections (so the proxy does count them) ...
    assert sum(opened[:2]) >= 2, opened
    # ... and the third and later batches, whose receivers delete the previous batch's
    # messages as the second's did, open none: at most two in all, when a loaded machine
    # started the second batch's delete threads too late to overlap (a client that leaks one
    # connection a batch opens four here, one rebuilt per call 24).
    assert sum(opened[2:]) <= 2, opened
