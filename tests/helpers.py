"""Helpers for integration tests: sending, waiting on conditions, reading sinks."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from spark_sqs.schema import arrow_output_schema
from spark_sqs.sqs.client import queue_counts

# A processing-time trigger under which a query runs one batch, at its start, and no other.
# Spark fires such a trigger at multiples of its interval since the epoch, not from the
# query's start: "1 hour" fires again at the top of the hour, which a test sometimes spans.
# The next multiple of 36,500 days is in 2069.
ONE_BATCH_TRIGGER = "36500 days"


def temporary_queue(sqs: Any, suffix: str = "", **attributes: str) -> Iterator[str]:
    """A new queue for one test (a fixture's body), deleted after it if the test left it."""
    name = f"q-{uuid.uuid4().hex[:12]}{suffix}"
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    yield url
    try:
        sqs.delete_queue(QueueUrl=url)
    except Exception:
        pass


def wait_until(
    condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.2
) -> Any:
    """Poll ``condition`` until it returns a truthy value or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def send_numbered(sqs: Any, queue_url: str, count: int, start: int = 0, **extra: Any) -> list[int]:
    """Send messages whose body is JSON with a sequence number ``n``, with one attribute of
    each SQS data type."""
    numbers = list(range(start, start + count))
    for i in range(0, count, 10):
        chunk = numbers[i : i + 10]
        entries = []
        for n in chunk:
            entry: dict[str, Any] = {
                "Id": str(n),
                "MessageBody": json.dumps({"n": n, "text": f"message {n} \u00e9\u4e2d\U0001f600"}),
                "MessageAttributes": {
                    "kind": {"DataType": "String", "StringValue": "test"},
                    "number": {"DataType": "Number", "StringValue": str(n)},
                    "blob": {"DataType": "Binary", "BinaryValue": n.to_bytes(4, "big")},
                },
            }
            entry.update(extra)
            entries.append(entry)
        response = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
        assert not response.get("Failed"), response.get("Failed")
    return numbers


def process_all_available(query: Any, timeout: float) -> None:
    """``query.processAllAvailable()`` with a timeout, failing with the query's error."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            query.processAllAvailable()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        query.stop()
        raise AssertionError(f"query did not process all available data within {timeout:.0f}s")
    if errors:
        raise errors[0]


def sqs_stream(spark: Any, endpoint: str, queue_url: str, journal: str, **options: Any) -> Any:
    """``spark.readStream.format("sqs")`` on the test server, with extra options."""
    reader = (
        spark.readStream.format("sqs")
        .option("queueUrl", queue_url)
        .option("endpointUrl", endpoint)
        .option("journalLocation", journal)
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def start_and_fail(
    spark: Any, options: dict[str, str], checkpoint: str, timeout: float = 180
) -> str:
    """Start a query on the SQS source with ``options`` into a no-op sink; it must fail within
    ``timeout`` seconds. Returns the failure's text."""
    reader = spark.readStream.format("sqs")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = reader.load().writeStream.format("noop").option("checkpointLocation", checkpoint)
    started = query.start()
    try:
        finished = started.awaitTermination(timeout)
    except Exception as exc:  # noqa: BLE001 - the failure is what the caller checks
        return str(exc)
    finally:
        started.stop()
    raise AssertionError(
        "the query should have failed" if finished else f"the query still ran after {timeout:.0f}s"
    )


def body_numbers(rows: Any) -> list[int]:
    """The sorted sequence numbers carried in the bodies of ``send_numbered`` messages."""
    return sorted(json.loads(r.body)["n"] for r in rows)


def drain_and_stop(
    query: Any,
    sqs: Any,
    queue_url: str,
    timeout: float,
    until: Callable[[], Any] | None = None,
) -> None:
    """Run ``query`` until it has processed everything, wait for the queue to be empty (the
    last batch acknowledged) and for ``until``, and stop it whatever happens."""
    try:
        process_all_available(query, timeout=timeout)
        wait_until(lambda: queue_counts(sqs, queue_url) == (0, 0), 60, "an empty queue")
        if until is not None:
            wait_until(until, 60, "the query's work after the last acknowledgement")
    finally:
        query.stop()


def drain_to_parquet(
    df: Any, out: Any, checkpoint: Any, sqs: Any, queue_url: str, timeout: float
) -> Any:
    """Run ``df`` into Parquet files at ``out`` until everything is processed and the queue is
    empty; the stopped query."""
    query = start_query(df, "parquet", checkpoint, path=out)
    drain_and_stop(query, sqs, queue_url, timeout=timeout)
    return query


class HoldingSink:
    """``foreachBatch`` sink keeping each batch's rows by batch id (a replay replaces its first
    attempt, as an idempotent sink does). The first non-empty batch waits in the sink, after
    its rows were journaled and before Spark commits it, until ``release()``."""

    def __init__(self) -> None:
        self.batches: dict[int, list[int]] = {}
        self.holding = threading.Event()
        self._release = threading.Event()
        self._held = False
        self._lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        numbers = [json.loads(r.body)["n"] for r in df.select("body").collect()]
        if not numbers:
            return
        with self._lock:
            self.batches[batch_id] = numbers
            hold, self._held = not self._held, True
        if hold:
            self.holding.set()
            assert self._release.wait(180), "the test never released the sink"

    def release(self) -> None:
        self._release.set()

    def numbers(self) -> list[int]:
        with self._lock:
            return sorted(n for rows in self.batches.values() for n in rows)

    def held_numbers(self) -> list[int]:
        with self._lock:
            return sorted(self.batches[min(self.batches)])


def extended_sqs_client(endpoint: str | None, bucket: str, region: str = "us-east-1") -> Any:
    """An SQS client of the ``amazon-sqs-extended-client`` package that offloads every body to
    S3 ``bucket`` (``always_through_s3``), as a producer using that library does.

    Importing the package replaces ``boto3.Session`` process-wide; that is undone at once, so
    only this client has the extended behaviour.
    """
    import boto3
    import boto3.session

    saved = (boto3.session.Session, boto3.Session, boto3.DEFAULT_SESSION)
    try:
        from sqs_extended_client.client import SQSExtendedClientSession
    finally:
        boto3.session.Session, boto3.Session, boto3.DEFAULT_SESSION = saved
    session = SQSExtendedClientSession(region_name=region)
    sqs = session.client("sqs", endpoint_url=endpoint)
    sqs.large_payload_support = bucket
    sqs.always_through_s3 = True
    # The library's own S3 client ignores endpoint overrides; point it at the same server.
    sqs.s3_client = session.client("s3", endpoint_url=endpoint)
    return sqs


def start_query(
    df: Any, sink: Any, checkpoint: Any, trigger: dict[str, Any] | None = None, **options: Any
) -> Any:
    """``df.writeStream`` into ``sink`` (a format name such as "parquet", "memory" or "noop",
    or a ``foreachBatch`` function), checkpointed at ``checkpoint``, with ``trigger`` (the
    keywords of ``DataStreamWriter.trigger``), started. ``queryName`` names the query; every
    other keyword is a writer option (``path=...``)."""
    writer = df.writeStream
    if trigger is not None:
        writer = writer.trigger(**trigger)
    writer = writer.foreachBatch(sink) if callable(sink) else writer.format(sink)
    if "queryName" in options:
        writer = writer.queryName(options.pop("queryName"))
    for key, value in options.items():
        writer = writer.option(key, str(value))
    return writer.option("checkpointLocation", str(checkpoint)).start()


def expire_visibility(queue_url: str) -> int:
    """Make every in-flight message of ``queue_url`` visible now, in the moto server this
    process runs: what the visibility timeout does once it passes, without waiting for it (a
    batch that outlived the timeout has its messages extended by at least 15 minutes by the
    heartbeat). Returns how many messages were in flight."""
    from moto.sqs.models import sqs_backends

    name = queue_url.rstrip("/").rsplit("/", 1)[-1]
    count = 0
    for regions in sqs_backends.values():
        for backend in regions.values():
            queue = backend.queues.get(name)
            if queue is None:
                continue
            for message in queue._messages:
                if not message.visible:
                    message.visible_at = 0.0
                    count += 1
    return count


class CopiesAfterDelete:
    """Server side (moto runs in this process): the first delete of each message puts a copy
    back, with the same MessageId and no receipt handle, as SQS does when a delete reached one
    of its servers and another server still holds a copy (moto never does). With ``held``, the
    copies stay hidden until ``release``: SQS handing them out later, all at once."""

    def __init__(self, *, held: bool = False) -> None:
        self.held = held
        self.copies: list[Any] = []
        self._copied: set[str] = set()
        self._lock = threading.Lock()

    def __enter__(self) -> CopiesAfterDelete:
        import copy

        from moto.sqs.models import Queue

        self._original = original = Queue.delete_message

        def delete_message(queue: Any, receipt_handle: str) -> None:
            found = [m for m in queue._messages if m.receipt_handle == receipt_handle]
            original(queue, receipt_handle)
            for message in found:
                if message in queue._messages:
                    continue  # a stale handle: nothing was deleted
                with self._lock:
                    if message.id in self._copied:
                        continue
                    self._copied.add(message.id)
                    ghost = copy.copy(message)
                    ghost._old_receipt_handles = []
                    ghost.receipt_handle = None
                    ghost.visible_at = float("inf") if self.held else 0.0
                    self.copies.append(ghost)
                queue._messages.append(ghost)

        Queue.delete_message = delete_message
        return self

    def __exit__(self, *exc: object) -> None:
        from moto.sqs.models import Queue

        Queue.delete_message = self._original

    def release(self) -> int:
        """Stop making copies; make the held ones visible. Returns how many."""
        self.__exit__()
        with self._lock:
            for ghost in self.copies:
                ghost.visible_at = 0.0
            return len(self.copies)

    def count(self) -> int:
        with self._lock:
            return len(self.copies)


def collect(batches: Iterator[pa.RecordBatch]) -> pa.Table:
    """What a reader yielded, as one table of the source's schema."""
    return pa.Table.from_batches(list(batches), schema=arrow_output_schema())
