"""``python -m bench.sink``: the SQS sink against a plain boto3 ``SendMessageBatch`` loop.

Both send the same number of messages (same body size) into a fresh standard queue on the same
moto server, through the delay proxy (20 ms per request by default, as within an AWS region),
at equal concurrency: the baseline runs ``partitions x in-flight`` threads, each looping
``SendMessageBatch`` of 10; the sink runs ``df.write.format("sqs")`` over ``partitions``
partitions with ``maxInFlightCalls=in-flight``. Runs alternate and repeat; the report is the
median throughput of each and their ratio (target: at least 0.8). The sink's time is the
wall time of ``save()``, Spark's job overhead included.

moto scans every stored message on each send, so each run starts from an empty queue and the
message count is kept small: read the ratio, not the absolute rates (2 shared cores).

``compare`` is the measurement itself; ``make bench`` (``bench/run.py``, section ``sink``) runs
it against LocalStack as well.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import threading
import time
import uuid
from typing import Any

from bench import load, servers

logger = logging.getLogger("bench.sink")


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.sink", description=__doc__)
    p.add_argument("--messages", type=int, default=4000, help="messages per run")
    p.add_argument("--partitions", type=int, default=2, help="sink tasks")
    p.add_argument("--in-flight", type=int, default=4, help="calls in flight per task")
    p.add_argument("--delay-ms", type=float, default=20.0, help="delay proxy: ms per request")
    p.add_argument("--repeats", type=int, default=3, help="runs of each")
    p.add_argument("--body-bytes", type=int, default=200, help="message body size")
    p.add_argument("--cores", type=int, default=2, help="Spark master local[N]")
    return p.parse_args(argv)


def _new_queue(endpoint: str) -> str:
    return load.client(endpoint).create_queue(QueueName=f"sink-bench-{uuid.uuid4().hex[:10]}")[
        "QueueUrl"
    ]


def _count(endpoint: str, url: str, expected: int, timeout: float = 30.0) -> int:
    """Messages in the queue, polled until ``expected`` (a server's count may lag a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        attrs = load.client(endpoint).get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        count = int(attrs["ApproximateNumberOfMessages"])
        if count >= expected or time.monotonic() >= deadline:
            return count
        time.sleep(0.2)


def baseline(endpoint: str, url: str, messages: int, threads: int, body_bytes: int) -> float:
    """Seconds for ``threads`` threads to send ``messages`` with SendMessageBatch of 10."""
    sqs = load.client(endpoint, pool=threads + 2)
    # Bodies made before the clock starts, as the sink's DataFrame is cached before its run.
    bodies = [load.body(n, body_bytes) for n in range(messages)]
    chunks = list(range(0, messages, 10))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not chunks:
                    return
                start = chunks.pop()
            count = min(10, messages - start)
            entries = [{"Id": str(i), "MessageBody": bodies[start + i]} for i in range(count)]
            while entries:
                response = sqs.send_message_batch(QueueUrl=url, Entries=entries)
                failed = {f["Id"] for f in response.get("Failed", [])}
                entries = [e for e in entries if e["Id"] in failed]

    started = time.perf_counter()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - started


def sink(spark: Any, df: Any, endpoint: str, url: str, in_flight: int) -> float:
    started = time.perf_counter()
    (
        df.write.format("sqs")
        .mode("append")
        .option("queueUrl", url)
        .option("endpointUrl", endpoint)
        .option("maxInFlightCalls", in_flight)
        .save()
    )
    return time.perf_counter() - started


def compare(
    spark: Any,
    direct: str,
    via: str,
    *,
    messages: int,
    partitions: int,
    in_flight: int,
    repeats: int,
    body_bytes: int,
) -> dict[str, Any]:
    """The sink and the baseline, alternating, ``repeats`` times each; queues are created and
    counted on ``direct``, messages sent through ``via`` (the delay proxy). Raises if a run
    delivers fewer messages than it sent."""
    bodies = [(load.body(n, body_bytes),) for n in range(messages)]
    df = spark.createDataFrame(bodies, "body string").repartition(partitions).cache()
    df.count()
    try:
        # One untimed write first: Python workers and clients start once.
        warm = _new_queue(direct)
        sink(spark, df.limit(20), via, warm, in_flight)
        # What a write costs beyond its sends (Spark's job, the writer's create and commit in
        # Python workers): a 10-row write, best of two. It is a fixed cost per write (per
        # micro-batch in a stream), which is why the ratio grows with the messages per run.
        overhead = min(sink(spark, df.limit(10), via, warm, in_flight) for _ in range(2))
        load.client(direct).delete_queue(QueueUrl=warm)
        threads = partitions * in_flight
        runs: dict[str, list[float]] = {"baseline": [], "sink": []}
        for repeat in range(repeats):
            for kind in ("baseline", "sink"):
                url = _new_queue(direct)
                if kind == "baseline":
                    seconds = baseline(via, url, messages, threads, body_bytes)
                else:
                    seconds = sink(spark, df, via, url, in_flight)
                arrived = _count(direct, url, messages)
                if arrived != messages:
                    raise RuntimeError(f"{kind}: {arrived} of {messages} messages arrived")
                rate = messages / seconds
                runs[kind].append(rate)
                logger.info("run %d %s: %.0f msg/s (%.2f s)", repeat, kind, rate, seconds)
                load.client(direct).delete_queue(QueueUrl=url)
    finally:
        df.unpersist()
    result: dict[str, Any] = {
        "messages": messages,
        "concurrency": f"{partitions} tasks x {in_flight} calls = {threads} threads",
        "partitions": partitions,
        "inFlight": in_flight,
        "bodyBytes": body_bytes,
        "baselineMsgPerSec": round(statistics.median(runs["baseline"]), 1),
        "sinkMsgPerSec": round(statistics.median(runs["sink"]), 1),
        "runs": {k: [round(r, 1) for r in v] for k, v in runs.items()},
        "writeOverheadSeconds": round(overhead, 2),
    }
    result["ratio"] = round(result["sinkMsgPerSec"] / result["baselineMsgPerSec"], 3)
    return result


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # The sink's tasks run in Spark's Python workers, which inherit this environment.
    for key, value in (
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
        ("AWS_DEFAULT_REGION", load.REGION),
    ):
        os.environ.setdefault(key, value)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("spark_sqs").setLevel(logging.WARNING)
    moto = servers.start_moto()
    proxy = servers.start_proxy(moto.value, args.delay_ms / 1000.0)
    direct, via = moto.value, f"http://127.0.0.1:{proxy.value}"
    try:
        from pyspark.sql import SparkSession

        from spark_sqs import SqsDataSource

        spark = (
            SparkSession.builder.master(f"local[{args.cores}]")
            .appName("spark-sqs-sink-bench")
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(SqsDataSource)
        result = compare(
            spark,
            direct,
            via,
            messages=args.messages,
            partitions=args.partitions,
            in_flight=args.in_flight,
            repeats=args.repeats,
            body_bytes=args.body_bytes,
        )
        result["delayMs"] = args.delay_ms
        print(json.dumps(result, indent=2))  # noqa: T201 - the bench's report
        return 0
    finally:
        proxy.stop()
        moto.stop()


if __name__ == "__main__":
    sys.exit(main())
