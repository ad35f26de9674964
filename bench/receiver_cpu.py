"""CPU per message of one receiver's ``read()`` in one process, split by SQS call.

``python -m bench.receiver_cpu --endpoint URL`` fills a queue, then runs the driver's
``latestOffset`` -> ``partitions`` and a pickled reader's ``read()`` (as Spark's Python worker
does) one batch at a time, and prints the process CPU time spent in ``read()`` per message,
and the part of it spent in each SQS call (thread CPU time, so the deletes' threads count).
The first batch (client creation, imports) is not counted. Run it with ``PYTHONPATH`` at another
checkout for a before/after in the same minutes; the server runs in its own process (e.g.
``python -m bench.servers moto``), so its CPU is not counted.

This is where a receiver's CPU goes without Spark; ``make bench``'s CPU section
(``bench.per_message.cpu_point``) measures the Python workers under Spark.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import tempfile
import threading
import time
import uuid
from collections import Counter
from typing import Any

from bench import load


class _TimedClient:
    """An SQS client that adds the thread CPU time of each call to ``seconds[action]``."""

    def __init__(self, client: Any, seconds: Counter, calls: Counter) -> None:
        self._client = client
        self._seconds = seconds
        self._calls = calls
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._client, name)
        if not callable(call):
            return call

        def timed(**kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return call(**kwargs)
            finally:
                with self._lock:
                    self._seconds[name] += time.thread_time() - started
                    self._calls[name] += 1

        return timed


def run(endpoint: str, messages: int, per_batch: int, body_bytes: int) -> dict[str, Any]:
    import spark_sqs
    from spark_sqs.executor import receiver
    from spark_sqs.options import SqsOptions
    from spark_sqs.source import SqsStreamReader

    sqs = load.client(endpoint)
    url = sqs.create_queue(QueueName=f"receiver-cpu-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    load.fill(endpoint, url, messages, body_bytes)
    options = SqsOptions.parse(
        {
            "queueUrl": url,
            "endpointUrl": endpoint,
            "region": load.REGION,
            "journalLocation": tempfile.mkdtemp(prefix="receiver-cpu-"),
            "numPartitions": "1",
            "maxMessagesPerTrigger": str(per_batch),
        }
    )
    seconds: Counter = Counter()
    calls: Counter = Counter()
    cached = receiver.cached_client
    clients: dict[Any, _TimedClient] = {}

    def timed_client(connection: Any, **kwargs: Any) -> _TimedClient:
        key = (connection, tuple(sorted(kwargs.items())))
        if key not in clients:
            clients[key] = _TimedClient(cached(connection, **kwargs), seconds, calls)
        return clients[key]

    receiver.cached_client = timed_client  # type: ignore[assignment]
    try:
        reader = SqsStreamReader(options)
        executor_reader = pickle.loads(pickle.dumps(reader))
        limit = reader.getDefaultReadLimit()
        start = reader.initialOffset()
        delivered = counted = batches = 0
        cpu = 0.0
        while delivered < messages:
            end = reader.latestOffset(start, limit)
            if end == start:
                time.sleep(0.05)
                continue
            partitions = reader.partitions(start, end)
            if batches == 0:
                seconds.clear()
                calls.clear()
            began = time.process_time()
            rows = sum(b.num_rows for p in partitions for b in executor_reader.read(p))
            if batches:
                cpu += time.process_time() - began
                counted += rows
            delivered += rows
            batches += 1
            start = end
        reader.latestOffset(start, limit)
        reader.stop()
    finally:
        receiver.cached_client = cached  # type: ignore[assignment]
    per_message = 1000.0 / max(1, counted)
    return {
        "spark_sqs": os.path.dirname(spark_sqs.__file__),
        "messages_counted": counted,
        "batches_counted": batches - 1,
        "per_batch": per_batch,
        "read_cpu_ms_per_message": round(cpu * per_message, 4),
        "sqs_calls_cpu_ms_per_message": {k: round(v * per_message, 4) for k, v in seconds.items()},
        "sqs_calls": dict(calls),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--per-batch", type=int, default=500)
    parser.add_argument("--body-bytes", type=int, default=200)
    args = parser.parse_args(argv)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    print(json.dumps(run(args.endpoint, args.messages, args.per_batch, args.body_bytes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
