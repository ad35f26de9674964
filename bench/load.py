"""Load for the benchmarks: a depth-keeping producer, a backlog filler, and the baseline consumer.

The baseline is the consumer a user would otherwise write by hand: ``threads`` threads, each
looping ``ReceiveMessage`` (10 messages, long poll) then ``DeleteMessageBatch`` of what it got.
It does no other work per message, which makes it an upper bound for any consumer that also has
to record what it received.

Message bodies are JSON with the send time (``t``, epoch seconds) and a sequence number, padded
to ``body_bytes``, so sinks can measure end-to-end latency.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config

from spark_sqs.sqs.client import queue_counts

REGION = "us-east-1"


def client(endpoint: str, pool: int = 10) -> Any:
    return boto3.client(
        "sqs",
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(
            max_pool_connections=pool,
            retries={"mode": "standard", "max_attempts": 5},
            read_timeout=60,
        ),
    )


def body(n: int, body_bytes: int) -> str:
    text = json.dumps({"n": n, "t": time.time()})
    if len(text) < body_bytes:
        text = text[:-1] + ', "pad": "' + "x" * max(0, body_bytes - len(text) - 11) + '"}'
    return text


def send_batch(sqs: Any, queue_url: str, start: int, count: int, body_bytes: int) -> None:
    entries = [{"Id": str(i), "MessageBody": body(start + i, body_bytes)} for i in range(count)]
    response = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    if response.get("Failed"):
        raise RuntimeError(f"SendMessageBatch failed: {response['Failed'][:1]}")


def fill(endpoint: str, queue_url: str, count: int, body_bytes: int, threads: int = 8) -> float:
    """Send ``count`` messages as fast as the server takes them; returns seconds taken."""
    sqs = client(endpoint, pool=threads)
    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        futures = [
            pool.submit(send_batch, sqs, queue_url, n, min(10, count - n), body_bytes)
            for n in range(0, count, 10)
        ]
        for f in futures:
            f.result()
    return time.monotonic() - started


def wait_empty(endpoint: str, queue_url: str, timeout: float = 120.0) -> bool:
    sqs = client(endpoint)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if queue_counts(sqs, queue_url) == (0, 0):
            return True
        time.sleep(0.5)
    return False


@dataclass
class ConsumerResult:
    received: int = 0
    deleted: int = 0
    # (monotonic time, messages deleted by that call) for every delete call
    events: list[tuple[float, int]] = field(default_factory=list)
    errors: int = 0


def receive_and_delete(sqs: Any, queue_url: str, wait: int) -> tuple[int, int]:
    """The plain consumer's step: one ``ReceiveMessage`` of up to 10 (every attribute), then
    one ``DeleteMessageBatch`` of what it returned. Returns (received, deleted)."""
    messages = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=wait,
        MessageSystemAttributeNames=["All"],
        MessageAttributeNames=["All"],
    ).get("Messages", [])
    if not messages:
        return 0, 0
    response = sqs.delete_message_batch(
        QueueUrl=queue_url,
        Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ],
    )
    return len(messages), len(response.get("Successful", []))


class BaselineConsumer:
    """Threads of receive-10-then-delete-batch, with one client per thread."""

    def __init__(self, endpoint: str, queue_url: str, threads: int, wait_seconds: int = 1) -> None:
        self._endpoint = endpoint
        self._queue_url = queue_url
        self._threads = threads
        self._wait = wait_seconds
        self._stop = threading.Event()
        self._guard = threading.Lock()
        self.result = ConsumerResult()
        self._workers: list[threading.Thread] = []

    def start(self) -> None:
        for _ in range(self._threads):
            worker = threading.Thread(target=self._run, daemon=True)
            worker.start()
            self._workers.append(worker)

    def stop(self) -> ConsumerResult:
        self._stop.set()
        for worker in self._workers:
            worker.join(60)
        return self.result

    def deleted(self) -> int:
        with self._guard:
            return self.result.deleted

    def _run(self) -> None:
        sqs = client(self._endpoint, pool=2)
        while not self._stop.is_set():
            try:
                received, done = receive_and_delete(sqs, self._queue_url, self._wait)
                if not received:
                    continue
                now = time.monotonic()
                with self._guard:
                    self.result.received += received
                    self.result.deleted += done
                    self.result.events.append((now, done))
            except Exception:  # noqa: BLE001 - counted; a benchmark keeps going
                with self._guard:
                    self.result.errors += 1
                time.sleep(0.05)


def _consume(
    endpoint: str, queue_url: str, wait: int, flags: tuple[Any, Any, Any], deleted: Any
) -> None:
    """One process of ``ProcessConsumer``: the plain consumer's loop, on one thread, from when
    every process has its client (its imports and client are start-up, not per message)."""
    go, stop, ready = flags
    sqs = client(endpoint, pool=2)
    with ready.get_lock():
        ready.value += 1
    go.wait()
    while not stop.is_set():
        try:
            _, done = receive_and_delete(sqs, queue_url, wait)
            with deleted.get_lock():
                deleted.value += done
        except Exception:  # noqa: BLE001 - a benchmark keeps going
            time.sleep(0.05)


class ProcessConsumer:
    """The plain consumer's loop in ``processes`` processes of one thread each, as Spark runs
    its receivers (one Python worker each) where ``BaselineConsumer`` runs threads of one
    process: the same SQS calls, so what the source's workers spend above it is their own work
    and Spark's, not the cost of many processes. Spawned: ``multiprocessing`` in their command
    lines (and their resource tracker's) tells them apart in ``bench.run.cpu_snapshot``."""

    def __init__(
        self, endpoint: str, queue_url: str, processes: int, wait_seconds: int = 1
    ) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._go, self._stop = context.Event(), context.Event()
        self._ready = context.Value("q", 0)
        self._deleted = context.Value("q", 0)
        flags = (self._go, self._stop, self._ready)
        self._processes = [
            context.Process(
                target=_consume,
                args=(endpoint, queue_url, wait_seconds, flags, self._deleted),
                daemon=True,
            )
            for _ in range(processes)
        ]

    def start(self, timeout: float = 300.0) -> None:
        """Start the processes and let them consume once all have their clients."""
        for process in self._processes:
            process.start()
        deadline = time.monotonic() + timeout
        while self._ready.value < len(self._processes):
            if time.monotonic() > deadline or not all(p.is_alive() for p in self._processes):
                self.stop()
                raise RuntimeError("the plain consumer's processes did not start")
            time.sleep(0.05)
        self._go.set()

    def stop(self) -> None:
        self._stop.set()
        for process in self._processes:
            process.join(60)
            if process.is_alive():
                process.kill()

    def deleted(self) -> int:
        with self._deleted.get_lock():
            return int(self._deleted.value)


class DepthKeeper:
    """Keeps about ``depth`` messages visible while a consumer runs (moto steady state)."""

    def __init__(
        self, endpoint: str, queue_url: str, depth: int, body_bytes: int, threads: int = 4
    ) -> None:
        self._endpoint = endpoint
        self._queue_url = queue_url
        self._depth = depth
        self._body = body_bytes
        self._threads = threads
        self._stop = threading.Event()
        self._visible = 0
        self._guard = threading.Lock()
        self._next = 0
        self.sent = 0
        self.depth_samples: list[int] = []
        self._workers: list[threading.Thread] = []

    def start(self) -> None:
        self._workers = [threading.Thread(target=self._watch, daemon=True)]
        self._workers += [
            threading.Thread(target=self._send, daemon=True) for _ in range(self._threads)
        ]
        for worker in self._workers:
            worker.start()

    def stop(self) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(30)

    def _watch(self) -> None:
        sqs = client(self._endpoint)
        while not self._stop.is_set():
            try:
                depth, _ = queue_counts(sqs, self._queue_url)
                with self._guard:
                    self._visible = depth
                self.depth_samples.append(depth)
            except Exception:  # noqa: BLE001 - the next poll retries
                pass
            self._stop.wait(0.1)

    def _send(self) -> None:
        sqs = client(self._endpoint)
        while not self._stop.is_set():
            with self._guard:
                if self._visible >= self._depth:
                    start = None
                else:
                    start = self._next
                    self._next += 10
                    # Counted as sent now so that the other threads do not overshoot.
                    self._visible += 10
            if start is None:
                self._stop.wait(0.02)
                continue
            try:
                send_batch(sqs, self._queue_url, start, 10, self._body)
                with self._guard:
                    self.sent += 10
            except Exception:  # noqa: BLE001 - the next round retries
                time.sleep(0.05)


def _produce_main(argv: list[str]) -> int:
    """``python -m bench.load produce ...``: a DepthKeeper in its own process until stdin
    closes; prints ``READY 1`` once started and ``SENT <n> <median depth>`` at the end."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--queue-url", required=True)
    parser.add_argument("--depth", type=int, default=200)
    parser.add_argument("--body-bytes", type=int, default=200)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args(argv)
    keeper = DepthKeeper(args.endpoint, args.queue_url, args.depth, args.body_bytes, args.threads)
    keeper.start()
    print("READY 1", flush=True)
    sys.stdin.read()
    keeper.stop()
    samples = sorted(keeper.depth_samples) or [0]
    print(f"SENT {keeper.sent} {samples[len(samples) // 2]}", flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["produce"]:
        raise SystemExit(_produce_main(sys.argv[2:]))
    raise SystemExit("usage: python -m bench.load produce --endpoint URL --queue-url URL")
