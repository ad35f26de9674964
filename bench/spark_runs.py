"""Streaming queries for the benchmarks: the SQS source at steady state and draining a backlog,
the per-batch cost against a trivial Python source, end-to-end latency and peak memory.

All queries run in one SparkSession (``local[N]``: receivers are I/O-bound tasks, so N can exceed
the cores). Throughput is taken from Spark's own progress reports (trigger start plus trigger
duration per micro-batch), so query start-up never counts.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import load
from bench.stats import Batch, batches_from_progress, drain_rate, median, percentile, rate_in_window

logger = logging.getLogger("bench")


def session(cores: int) -> Any:
    from bench.trivial import TrivialDataSource
    from devtools.spark import local_session

    spark = local_session(
        "spark-sqs-bench",
        f"local[{cores}]",
        {
            "spark.sql.streaming.numRecentProgressUpdates": "2000",
            "spark.sql.streaming.stopTimeout": "60s",
        },
    )
    spark.dataSource.register(TrivialDataSource)
    return spark


class Workdir:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="spark-sqs-bench-"))

    def fresh(self, name: str) -> Path:
        path = self.root / f"{name}-{uuid.uuid4().hex[:8]}"
        path.mkdir(parents=True)
        return path

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def source_stream(spark: Any, endpoint: str, queue_url: str, journal: Path, **options: Any) -> Any:
    from devtools.spark import sqs_stream

    return sqs_stream(spark, endpoint, queue_url, journal, region=load.REGION, **options)


def _start_noop(df: Any, checkpoint: Path) -> Any:
    return (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0 seconds")
        .start()
    )


def _rows_so_far(query: Any) -> int:
    return sum(b.rows for b in batches_from_progress(query.recentProgress))


def _stop(query: Any) -> list[Batch]:
    batches = batches_from_progress(query.recentProgress)
    try:
        query.stop()
    except Exception:  # noqa: BLE001 - a benchmark records what it has
        logger.warning("stopping the query failed", exc_info=True)
    if query.exception() is not None:
        raise RuntimeError(f"query failed: {query.exception()}")
    return batches


@dataclass
class SourceRun:
    rate: float
    rows: int
    seconds: float
    batches: int
    median_batch_ms: float
    detail: dict[str, Any] = field(default_factory=dict)


def source_steady(
    spark: Any,
    workdir: Workdir,
    endpoint: str,
    queue_url: str,
    receivers: int,
    per_receiver: int,
    warmup: float,
    window: float,
    **options: Any,
) -> SourceRun:
    """Run the source on a queue kept fed by a producer; the rate over ``window`` seconds that
    follow the first non-empty batch plus ``warmup``."""
    query = _start_source(
        spark, workdir, "steady", endpoint, queue_url, receivers, per_receiver, **options
    )
    try:
        deadline = time.monotonic() + 180
        while _rows_so_far(query) == 0:
            if query.exception() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no data within 180 s: {query.exception()}")
            time.sleep(0.5)
        start = time.time() + warmup
        time.sleep(warmup + window)
        end = time.time()
    finally:
        batches = _stop(query)
    rate, rows = rate_in_window(batches, start, end)
    inside = [b for b in batches if b.start >= start and b.end <= end and b.rows > 0]
    return SourceRun(
        rate=rate,
        rows=rows,
        seconds=(inside[-1].end - inside[0].start) if inside else 0.0,
        batches=len(inside),
        median_batch_ms=median(b.durations_ms.get("triggerExecution", 0) for b in inside),
        detail={"durations": _median_durations(inside)},
    )


def source_drain(
    spark: Any,
    workdir: Workdir,
    endpoint: str,
    queue_url: str,
    receivers: int,
    per_receiver: int,
    expected: int,
    timeout: float,
    **options: Any,
) -> SourceRun:
    """Run the source until it has delivered ``expected`` messages (a pre-filled backlog)."""
    query = _start_source(
        spark, workdir, "drain", endpoint, queue_url, receivers, per_receiver, **options
    )
    try:
        deadline = time.monotonic() + timeout
        while _rows_so_far(query) < expected:
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            if time.monotonic() > deadline:
                logger.warning("drain timed out with %d of %d", _rows_so_far(query), expected)
                break
            time.sleep(0.5)
    finally:
        batches = _stop(query)
    rate, rows, span = drain_rate(batches)
    full = [b for b in batches if b.rows > 0]
    return SourceRun(
        rate=rate,
        rows=rows,
        seconds=span,
        batches=len(full),
        median_batch_ms=median(b.durations_ms.get("triggerExecution", 0) for b in full),
        detail={
            "durations": _median_durations(full),
            # The backlog comes in batches of maxMessagesPerTrigger, the last one excepted.
            "batch_rows": [b.rows for b in full],
        },
    )


def _start_source(
    spark: Any,
    workdir: Workdir,
    kind: str,
    endpoint: str,
    queue_url: str,
    receivers: int,
    per_receiver: int,
    **options: Any,
) -> Any:
    """The source with ``receivers`` receivers of ``per_receiver`` messages each, into noop."""
    base = workdir.fresh(kind)
    df = source_stream(
        spark,
        endpoint,
        queue_url,
        base / "journal",
        numPartitions=receivers,
        maxMessagesPerTrigger=per_receiver * receivers,
        **options,
    )
    return _start_noop(df, base / "checkpoint")


def _median_durations(batches: list[Batch]) -> dict[str, float]:
    keys = sorted({k for b in batches for k in b.durations_ms})
    return {k: median(b.durations_ms.get(k, 0) for b in batches) for k in keys}


# -- per-batch overhead -------------------------------------------------------------------------


def batch_overhead(
    spark: Any,
    workdir: Workdir,
    endpoint: str,
    queue_url: str,
    rows: int,
    seconds: float,
) -> dict[str, Any]:
    """Median per-batch time of the trivial source and of the SQS source (1 receiver, ``rows``
    messages per batch, a producer keeping the queue fed), with Spark's breakdown."""
    out: dict[str, Any] = {}
    base = workdir.fresh("trivial")
    df = spark.readStream.format("bench_trivial").option("rows", str(rows)).load()
    query = _start_noop(df, base / "checkpoint")
    time.sleep(seconds)
    trivial = _stop(query)[3:]  # the first batches include query start-up
    out["trivial"] = _overhead_summary(trivial)
    base = workdir.fresh("overhead")
    df = source_stream(
        spark, endpoint, queue_url, base / "journal", numPartitions=1, maxMessagesPerTrigger=rows
    )
    query = _start_noop(df, base / "checkpoint")
    time.sleep(seconds)
    sqs = [b for b in _stop(query) if b.rows > 0][3:]
    out["sqs"] = _overhead_summary(sqs)
    return out


def _overhead_summary(batches: list[Batch]) -> dict[str, Any]:
    return {
        "batches": len(batches),
        "rows_per_batch": median(b.rows for b in batches) if batches else 0,
        "median_ms": median(b.durations_ms.get("triggerExecution", 0) for b in batches),
        "p90_ms": percentile((b.durations_ms.get("triggerExecution", 0) for b in batches), 90),
        "durations": _median_durations(batches),
    }


# -- latency ------------------------------------------------------------------------------------


class _LatencySink:
    """foreachBatch sink on the driver: send time (in the body) to the time the sink sees it."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self._guard = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql.functions import get_json_object

        sent = [r[0] for r in df.select(get_json_object("body", "$.t")).collect()]
        now = time.time()
        with self._guard:
            self.latencies.extend(now - float(t) for t in sent if t is not None)


class PacedProducer:
    """Sends ``rate`` messages per second, each stamped with its send time: one ``SendMessage``
    per message, or with ``batch`` > 1 one ``SendMessageBatch`` of ``batch`` every ``batch``
    messages' time (as AWS recommends to producers). One thread per ``PER_THREAD`` send calls
    a second, each with its own client and an even share of the rate: one thread cannot make
    200 calls a second."""

    PER_THREAD = 40.0

    def __init__(
        self, endpoint: str, queue_url: str, rate: float, body_bytes: int, batch: int = 1
    ) -> None:
        self._endpoint = endpoint
        self._queue_url = queue_url
        self._batch = batch
        threads = max(1, math.ceil(rate / batch / self.PER_THREAD))
        self._interval = batch * threads / rate
        self._body = body_bytes
        self._stop = threading.Event()
        self._guard = threading.Lock()
        self.sent = 0
        self.seconds = 0.0
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def start(self) -> None:
        self._started = time.monotonic()
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        self.seconds = time.monotonic() - self._started

    def _next(self) -> int:
        with self._guard:
            first, self.sent = self.sent, self.sent + self._batch
            return first

    def _run(self) -> None:
        sqs = load.client(self._endpoint)
        next_at = time.monotonic()
        while not self._stop.is_set():
            first = self._next()
            if self._batch == 1:
                sqs.send_message(QueueUrl=self._queue_url, MessageBody=load.body(first, self._body))
            else:
                load.send_batch(sqs, self._queue_url, first, self._batch, self._body)
            next_at += self._interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)


def latency(
    spark: Any,
    workdir: Workdir,
    endpoint: str,
    queue_url: str,
    rate: float,
    seconds: float,
    options: dict[str, Any],
    batch: int = 1,
) -> dict[str, Any]:
    """Send time to the time a ``foreachBatch`` sink sees the row, with the micro-batches'
    sizes and why their receivers stopped (the batches' metrics, ``receiveStops``)."""
    base = workdir.fresh("latency")
    sink = _LatencySink()
    df = source_stream(spark, endpoint, queue_url, base / "journal", **options)
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(base / "checkpoint"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    producer = PacedProducer(endpoint, queue_url, rate, 0, batch)
    # Let the query start before the clock runs: start-up is not latency.
    deadline = time.monotonic() + 120
    while not query.recentProgress and time.monotonic() < deadline:
        time.sleep(0.5)
    load_before = os.getloadavg()
    producer.start()
    time.sleep(seconds)
    producer.stop()
    load_after = os.getloadavg()
    # Every sent message must reach the sink: a receiver may still be collecting.
    deadline = time.monotonic() + 60
    while len(sink.latencies) < producer.sent and time.monotonic() < deadline:
        time.sleep(0.5)
    batches = [b for b in _stop(query) if b.rows > 0]
    values = sink.latencies[len(sink.latencies) // 10 :]  # drop the warm-up tenth
    return {
        **_latency_summary(values, producer.sent),
        "sent_per_second": producer.sent / producer.seconds if producer.seconds else 0.0,
        "delivered": len(sink.latencies),
        "batches": len(batches),
        "median_batch_rows": median(b.rows for b in batches) if batches else 0,
        "median_batch_ms": median(b.durations_ms.get("triggerExecution", 0) for b in batches)
        if batches
        else 0,
        "receive_stops": _receive_stops(base / "journal"),
        "load_average_1m": [round(load_before[0], 2), round(load_after[0], 2)],
    }


def _receive_stops(journal: Path) -> dict[str, int]:
    """Why the receivers of the acknowledged batches stopped, summed (their metrics files)."""
    from spark_sqs.journal import Journal

    out: dict[str, int] = {}
    try:
        for metrics in Journal(str(journal)).metrics.read():
            for reason, count in (metrics.get("receiveStops") or {}).items():
                out[reason] = out.get(reason, 0) + count
    except Exception:  # noqa: BLE001 - a version without the counters, or no journal
        logger.warning("could not read the batches' metrics", exc_info=True)
    return dict(sorted(out.items()))


def baseline_latency(
    endpoint: str, queue_url: str, rate: float, seconds: float, threads: int = 1, batch: int = 1
) -> dict[str, Any]:
    """The same measurement for the boto3 baseline: send time to receive time."""
    consumer = _LatencyBaseline(endpoint, queue_url, threads)
    consumer.start()
    producer = PacedProducer(endpoint, queue_url, rate, 0, batch)
    load_before = os.getloadavg()
    producer.start()
    time.sleep(seconds)
    producer.stop()
    load_after = os.getloadavg()
    time.sleep(3)
    consumer.stop()
    values = consumer.latencies[len(consumer.latencies) // 10 :]
    return {
        **_latency_summary(values, producer.sent),
        "sent_per_second": producer.sent / producer.seconds if producer.seconds else 0.0,
        "load_average_1m": [round(load_before[0], 2), round(load_after[0], 2)],
    }


class _LatencyBaseline(load.BaselineConsumer):
    def __init__(self, endpoint: str, queue_url: str, threads: int) -> None:
        super().__init__(endpoint, queue_url, threads)
        self.latencies: list[float] = []

    def _run(self) -> None:
        sqs = load.client(self._endpoint, pool=2)
        while not self._stop.is_set():
            messages = sqs.receive_message(
                QueueUrl=self._queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
            ).get("Messages", [])
            now = time.time()
            for m in messages:
                self.latencies.append(now - json.loads(m["Body"])["t"])
            if messages:
                sqs.delete_message_batch(
                    QueueUrl=self._queue_url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(messages)
                    ],
                )


def _latency_summary(values: list[float], sent: int) -> dict[str, Any]:
    return {
        "sent": sent,
        "measured": len(values),
        "p50_ms": percentile(values, 50) * 1000,
        "p99_ms": percentile(values, 99) * 1000,
        "max_ms": max(values) * 1000 if values else float("nan"),
    }


# -- memory -------------------------------------------------------------------------------------


class MemorySampler:
    """Peak RSS, sampled every ``interval`` s, of this process (the PySpark driver), the JVM, the
    driver's Python source runner and the executors' Python workers."""

    def __init__(self, spark: Any, interval: float = 0.1) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process(os.getpid())
        gateway = getattr(spark.sparkContext._gateway, "proc", None)
        self._jvm = psutil.Process(gateway.pid) if gateway is not None else None
        self._interval = interval
        self._stop = threading.Event()
        self.peak: dict[str, int] = {}
        self.start_rss: dict[str, int] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> dict[str, int]:
        out = {"driver_python": self._me.memory_info().rss}
        workers: list[int] = []
        runner = 0
        if self._jvm is not None:
            try:
                out["jvm"] = self._jvm.memory_info().rss
                for child in self._jvm.children(recursive=True):
                    try:
                        cmd = " ".join(child.cmdline())
                        rss = child.memory_info().rss
                        name = child.name()
                    except (self._psutil.NoSuchProcess, self._psutil.AccessDenied):
                        continue
                    if "python" not in name.lower():
                        # The JVM itself is a child of the spark-submit launcher, and its
                        # command line names the Python executable too.
                        if self._jvm.pid != child.pid and "java" in name.lower():
                            out["jvm"] = max(out.get("jvm", 0), rss)
                        continue
                    if "python_streaming_source_runner" in cmd:
                        runner = max(runner, rss)
                    else:
                        workers.append(rss)
            except self._psutil.NoSuchProcess:
                pass
        out["source_runner"] = runner
        out["worker_max"] = max(workers, default=0)
        out["workers_total"] = sum(workers)
        return out

    def start(self) -> None:
        self.start_rss = self.sample()
        self._thread.start()

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join(10)
        return self.peak

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, value in self.sample().items():
                self.peak[key] = max(self.peak.get(key, 0), value)
            self._stop.wait(self._interval)


def run_dict(run: SourceRun) -> dict[str, Any]:
    return asdict(run)
