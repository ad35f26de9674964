"""The receivers' memory bound (``maxBytesPerReceiver``) measured through Spark with 1 MiB bodies.

A receiver stops receiving once the messages it holds reach its byte limit, so it holds less
than the limit plus one receive call (10 messages of at most 1 MiB); converting them to the
journal's Arrow table and journaling it cost about as much again. So a Python worker's RSS
should stay within twice the limit plus a fixed overhead (the worker's own footprint, and one
call's messages twice). This benchmark measures it: for each limit, a fresh queue is filled
with messages whose bodies are SQS's largest (1 MiB), ``spark.readStream.format("sqs")``
drains it into a ``noop`` sink, and the RSS of every Python worker the JVM started is sampled
every 50 ms (psutil). The fixed overhead is the largest worker's RSS before the run, after a
warm-up query. A baseline run without a byte limit (``maxMessagesPerTrigger`` alone, at the
share the largest limit would allow and twice that) shows what the bound replaces: there the
worker grows with the share.

How: moto runs as a threaded HTTP server in this process (Spark's executors reach it over
127.0.0.1), the journal is a local directory. Runs on: the driver process of the benchmark only
(not in the wheel).

``python -m bench.receiver_memory [--caps 16m,64m] [--receivers 2] [--batches 2] [--quick]``
writes ``bench/results/receiver-memory.json`` and ``receiver-memory.md``. RSS is reported,
never asserted (tests/unit/executor/test_receiver.py and tests/unit/test_memory.py assert the
deterministic bounds: bytes received per receiver, bytes read for receipts).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger("bench.receiver_memory")
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
MIB = 1 << 20
BODY = MIB  # SQS's largest message (moto accepts it too)
CALL = 10 * BODY  # one ReceiveMessage call's worth at that size


@dataclass(frozen=True)
class Run:
    name: str
    cap: int | None  # maxBytesPerReceiver; None: no byte limit (the baseline)
    per_receiver: int  # messages each receiver may receive per batch (maxMessagesPerTrigger / n)
    delete_after_journal: bool = False


def runs(caps: list[int], baseline: bool) -> list[Run]:
    out = [Run(f"maxBytesPerReceiver={c // MIB}m", c, 1000) for c in caps]
    # deleteAfterJournal journals each call as a part, then writes the entry from the parts
    # one at a time and reads it back to yield it.
    out.append(
        Run(f"maxBytesPerReceiver={max(caps) // MIB}m, deleteAfterJournal", max(caps), 1000, True)
    )
    if baseline:
        # Without a byte limit, at the share the largest limit allows (and twice that): what a
        # plan of an earlier version (no byte limit) holds at 1 MiB bodies.
        share = max(caps) // BODY
        out += [
            Run(f"no byte limit, {n} x 1 MiB per receiver", None, n) for n in (share, 2 * share)
        ]
    return out


def byte_size(text: str) -> int:
    from spark_sqs.option_table import convert
    from spark_sqs.options import SOURCE

    return int(convert(SOURCE.spec("maxBytesPerReceiver"), text, side="source"))


def bound(cap: int, overhead: int) -> int:
    """What the worker's RSS should stay within: twice the limit, and a fixed overhead: the
    worker's own footprint, twice the call that crosses the limit (its messages and their
    table), and about three times one call while boto3 parses it (the response's bytes, its
    decoded text, the parsed strings)."""
    return 2 * cap + overhead + 5 * CALL


def _fill(endpoint: str, queue_url: str, count: int) -> None:
    from bench import load

    sqs = load.client(endpoint, pool=4)
    body = "m" * BODY

    def send(n: int) -> None:
        sqs.send_message(QueueUrl=queue_url, MessageBody=f"{n:08d}" + body[8:])

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(send, range(count)))


def run_one(
    spark: Any, endpoint: str, workdir: Path, run: Run, receivers: int, batches: int
) -> dict[str, Any]:
    from bench import load
    from bench.spark_runs import MemorySampler, source_stream
    from bench.stats import batches_from_progress

    held = (run.cap // BODY + 10) if run.cap is not None else run.per_receiver
    count = receivers * held * batches
    sqs = load.client(endpoint)
    url = sqs.create_queue(QueueName=f"memory-{uuid.uuid4().hex[:10]}")["QueueUrl"]
    _fill(endpoint, url, count)
    base = workdir / uuid.uuid4().hex[:8]
    options: dict[str, Any] = {
        "numPartitions": receivers,
        "maxMessagesPerTrigger": receivers * run.per_receiver,
        "maxInFlightMessages": 120_000,
    }
    options["maxBytesPerReceiver"] = run.cap if run.cap is not None else "64g"
    if run.delete_after_journal:
        options["deleteAfterJournal"] = "true"
    df = source_stream(spark, endpoint, url, base / "journal", **options)
    sampler = MemorySampler(spark, interval=0.05)
    sampler.start()
    overhead = sampler.start_rss.get("worker_max", 0)
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(base / "checkpoint"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    started = time.monotonic()
    try:
        while sum(b.rows for b in batches_from_progress(query.recentProgress)) < count:
            if query.exception() is not None:
                raise RuntimeError(f"{run.name}: the query failed: {query.exception()}")
            if time.monotonic() - started > 900:
                raise RuntimeError(f"{run.name}: not drained in 900 s")
            time.sleep(0.5)
        progress = batches_from_progress(query.recentProgress)
    finally:
        query.stop()
        peak = sampler.stop()
        shutil.rmtree(base, ignore_errors=True)
        sqs.delete_queue(QueueUrl=url)
    rows = [b.rows for b in progress if b.rows]
    worker = peak.get("worker_max", 0)
    out: dict[str, Any] = {
        "name": run.name,
        "cap_bytes": run.cap,
        "delete_after_journal": run.delete_after_journal,
        "messages": count,
        "rows_per_batch": rows,
        "worker_overhead_bytes": overhead,
        "worker_peak_bytes": worker,
        "worker_peak_above_overhead_bytes": worker - overhead,
        "source_runner_peak_bytes": peak.get("source_runner", 0),
        "seconds": round(time.monotonic() - started, 1),
    }
    if run.cap is not None:
        out["bound_bytes"] = bound(run.cap, overhead)
        out["within_bound"] = worker <= out["bound_bytes"]
        out["above_overhead_per_cap"] = round((worker - overhead) / run.cap, 2)
    else:
        share = run.per_receiver * BODY
        out["share_bytes"] = share
        out["above_overhead_per_share"] = round((worker - overhead) / share, 2)
    return out


def slope_and_intercept(results: list[dict[str, Any]]) -> dict[str, float] | None:
    """A least-squares line through (messages a receiver may hold, worker peak) of the runs
    with a byte limit: the slope is the RSS each held byte costs (twice: the messages and
    their Arrow table), the intercept the fixed overhead (the worker, the receive call's
    transient buffers)."""
    points = [
        (r["cap_bytes"] + CALL, r["worker_peak_bytes"])
        for r in results
        if r["cap_bytes"] and not r["delete_after_journal"]
    ]
    if len(points) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var
    return {"slope": round(slope, 2), "intercept_mib": round((mean_y - slope * mean_x) / MIB)}


def _mib(value: Any) -> str:
    return f"{value / MIB:,.0f}" if isinstance(value, (int, float)) else "-"


def markdown(result: dict[str, Any]) -> str:
    p = result["parameters"]
    lines = [
        "# Receiver memory: a Python worker's RSS against maxBytesPerReceiver",
        "",
        f"Measured {result['when']} on {result['machine']}: `python -m bench.receiver_memory`, "
        f"{p['receivers']} receivers (`local[{p['receivers']}]`), bodies of 1 MiB, "
        f"{p['batches']} batches per run drained into a `noop` sink, RSS sampled every 50 ms "
        f"(psutil). Overhead: the largest Python worker's RSS before the run (after a warm-up "
        "query). Bound: 2 x limit + overhead + 5 x one call of 10 MiB (the call that crosses "
        "the limit, twice; boto3's parsing of one call, three times). Load average at the end: "
        f"{p['load_average']:.1f}. Took {p['seconds']} s.",
        "",
        "| run | messages | rows per batch | overhead MiB | worker peak MiB | peak - overhead "
        "MiB | bound MiB | within | (peak - overhead) / limit or share |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["runs"]:
        ratio = r.get("above_overhead_per_cap", r.get("above_overhead_per_share"))
        lines.append(
            f"| {r['name']} | {r['messages']} | {', '.join(map(str, r['rows_per_batch']))} | "
            f"{_mib(r['worker_overhead_bytes'])} | {_mib(r['worker_peak_bytes'])} | "
            f"{_mib(r['worker_peak_above_overhead_bytes'])} | {_mib(r.get('bound_bytes'))} | "
            f"{'yes' if r.get('within_bound') else ('no' if 'within_bound' in r else '-')} | "
            f"{ratio} |"
        )
    fit = result.get("fit")
    if fit:
        lines += [
            "",
            f"Least-squares fit of the worker's peak against what a receiver may hold (limit + "
            f"10 MiB): {fit['slope']} bytes of RSS per byte held, plus {fit['intercept_mib']} "
            "MiB fixed.",
        ]
    lines.append("")
    return "\n".join(lines)


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.receiver_memory")
    parser.add_argument("--caps", default="16m,64m", help="maxBytesPerReceiver values")
    parser.add_argument("--receivers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=2, help="batches per run")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unbounded runs")
    parser.add_argument("--quick", action="store_true", help="one limit of 16m, no baseline")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    if args.quick:
        args.caps, args.no_baseline = "16m", True
    return args


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for key, value in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(key, value)
    # Executors are Python workers the JVM starts: they inherit this environment.
    os.environ["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = os.environ.get("PYSPARK_DRIVER_PYTHON") or sys.executable

    from bench.spark_runs import session
    from devtools.local_sqs import MotoServer

    caps = [byte_size(c.strip()) for c in args.caps.split(",") if c.strip()]
    server = MotoServer()
    workdir = Path(tempfile.mkdtemp(prefix="spark-sqs-memory-"))
    results = []
    started = time.monotonic()
    try:
        for run in runs(caps, baseline=not args.no_baseline):
            # A session of its own: a Python worker keeps the heap its largest batch needed
            # (CPython and glibc return little of it), so workers of an earlier run would carry
            # that run's high-water mark into this one's overhead.
            spark = session(args.receivers)
            try:
                # A small run first, not reported: it starts the Python workers and the JVM's
                # code paths, so the overhead measured next is a warm worker's.
                run_one(spark, server.endpoint, workdir, Run("warm-up", 1 * MIB, 1000), 2, 1)
                logger.info("run: %s", run.name)
                results.append(
                    run_one(spark, server.endpoint, workdir, run, args.receivers, args.batches)
                )
                logger.info("%s", json.dumps(results[-1]))
            finally:
                spark.stop()
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    fit = slope_and_intercept(results)
    result = {
        "when": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": f"{os.cpu_count()} cores, {platform.platform(terse=True)}, moto",
        "parameters": {
            "caps": caps,
            "receivers": args.receivers,
            "batches": args.batches,
            "load_average": os.getloadavg()[0],
            "seconds": round(time.monotonic() - started),
        },
        "runs": results,
        "fit": fit,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "receiver-memory.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "receiver-memory.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
