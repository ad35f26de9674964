"""Where the receivers' Python workers spend their CPU under Spark, per task and per message.

Runs on: the benchmark process (development tool; not in the wheel).

``python -m bench.worker_profile --receivers 16`` runs the CPU section's source drain
(``bench.per_message.cpu_point``: a backlog on LocalStack, or moto, through the delay proxy,
``receivers`` x ``--per-receiver`` messages a batch, local journal, or with ``--s3-journal``
one on moto's S3 behind its delay proxy) in a Spark session whose
Python workers run ``bench.worker_daemon``: a cProfile (CPU clock) and the CPU time of each
task and of the daemon's ``gc.collect()`` after it, and how many botocore clients and sessions,
thread pools and threads each task created. It prints a summary of the tasks after each
worker's first (imports, clients) and the first batch: CPU per task and per message, split
into the reader's ``read()``, Spark's per-task work around it and the collection, and the
functions with the most CPU; the raw files stay in ``--out``.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import logging
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger("bench")


def run(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out or tempfile.mkdtemp(prefix="worker-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    # The JVM, and through it every Python worker, inherits this.
    os.environ["SPARK_SQS_WORKER_PROFILE"] = str(out)
    os.environ["SPARK_SQS_WORKER_CPROFILE"] = "0" if args.no_cprofile else "1"
    from bench import load, per_message, run, spark_runs
    from devtools.spark import local_session
    from spark_sqs import SqsDataSource  # noqa: F401 - fails early without the package

    conf = {"spark.python.daemon.module": "bench.worker_daemon"}
    spark = local_session("spark-sqs-worker-profile", f"local[{max(2, args.receivers)}]", conf)
    wd = spark_runs.Workdir()
    eps = run.Endpoints(args.delay_ms / 1000, wd.root)
    try:
        server = "localstack" if eps.localstack is not None and not args.moto else "moto"
        consumer_ep, setup_ep = eps.get(server, True)
        per_batch = args.receivers * args.per_receiver
        url = run.new_queue(setup_ep, "profile")
        load.fill(setup_ep, url, per_batch * (args.batches + 2), args.body_bytes)
        journal: Any = wd.fresh("profile") / "journal"
        if args.s3_journal:
            # On moto's S3 behind its delay proxy, as the cost section's journal.
            per_message.journal_bucket(eps.moto.value)
            journal = per_message.journal_location(eps.moto_proxy.value)
        df = spark_runs.source_stream(
            spark,
            consumer_ep,
            url,
            journal,
            numPartitions=args.receivers,
            maxMessagesPerTrigger=per_batch,
        )
        base = wd.fresh("checkpoint")
        query = spark_runs._start_noop(df, base)
        try:
            first = per_message.next_batch(query, -1, 300)
            # Tasks that end after this are the window's (a worker's first task is left out
            # in the summary anyway).
            window_start = time.time()
            sampler = run.CpuSampler(*eps.pids(server))
            end = first
            for _ in range(args.batches):
                end = per_message.next_batch(query, end.batch_id, 300)
            messages = per_message.rows_between(
                per_message._batches(query), first.batch_id, end.batch_id
            )
            cpu = sampler.stop(messages)
        finally:
            spark_runs._stop(query)
        run.delete_queue(setup_ep, url)
    finally:
        eps.stop()
        spark.stop()
        wd.cleanup()
    summary = summarise(out, window_start, messages, args.top)
    summary.update(
        server=server,
        receivers=args.receivers,
        per_receiver=args.per_receiver,
        journal="s3" if args.s3_journal else "local",
        messages=messages,
        sampled_cpu_ms_per_message=cpu,
        load_average=[round(x, 2) for x in os.getloadavg()],
        folder=str(out),
    )
    return summary


def summarise(folder: Path, since: float, messages: int, top: int) -> dict[str, Any]:
    """The window's tasks (after ``since``, each worker's first left out) from ``folder``."""
    tasks = []
    for path in glob.glob(str(folder / "*.jsonl")):
        for line in Path(path).read_text().splitlines():
            tasks.append(json.loads(line))
    window = [t for t in tasks if t.get("task", 0) > 1 and t["ended"] > since]
    if not window:
        return {"tasks": 0}
    profiles = [folder / f"{t['pid']}-{t['task']}.prof" for t in window]
    profiles = [p for p in profiles if p.exists()]
    stats = pstats.Stats(*map(str, profiles), stream=io.StringIO()) if profiles else None
    read_cpu = sum(t["read_cpu_s"] for t in window)
    task_cpu = sum(t["task_cpu_s"] for t in window)
    gc_cpu = sum(t["gc_cpu_s"] for t in window)
    per_task_messages = messages / len(window) if messages else 0
    text = io.StringIO()
    if stats is not None:
        stats.stream = text  # type: ignore[attr-defined]
        stats.sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top)
    counts = {
        k: sum(t.get(k, 0) for t in window)
        for k in ("botocore_sessions", "botocore_clients", "thread_pools", "threads_started")
    }
    return {
        "tasks": len(window),
        "worker_pids": len({t["pid"] for t in tasks}),
        "tasks_per_worker_max": max(t["task"] for t in tasks),
        "messages_per_task": round(per_task_messages, 1),
        "ms_per_task": {
            "task (worker main)": round(1000 * task_cpu / len(window), 2),
            "of which read() generator": round(1000 * read_cpu / len(window), 2),
            "Spark's around read() (unpickling, Arrow to the JVM)": round(
                1000 * (task_cpu - read_cpu) / len(window), 2
            ),
            "gc.collect after the task": round(1000 * gc_cpu / len(window), 2),
            "task median": round(1000 * statistics.median(t["task_cpu_s"] for t in window), 2),
            "gc median": round(1000 * statistics.median(t["gc_cpu_s"] for t in window), 2),
        },
        "gc_objects_median": statistics.median(t["gc_objects"] for t in window),
        "created_per_task": {k: round(v / len(window), 2) for k, v in counts.items()},
        "profile": text.getvalue(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--receivers", type=int, default=16)
    parser.add_argument("--per-receiver", type=int, default=500)
    parser.add_argument("--batches", type=int, default=3, help="batches after the first")
    parser.add_argument("--body-bytes", type=int, default=200)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--moto", action="store_true", help="moto even if LocalStack runs")
    parser.add_argument("--top", type=int, default=40, help="functions listed")
    parser.add_argument("--out", default="", help="folder for the raw files")
    parser.add_argument("--no-cprofile", action="store_true", help="times and counts only")
    parser.add_argument("--s3-journal", action="store_true", help="on moto's S3 (via the proxy)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    summary = run(args)
    profile = summary.pop("profile", "")
    print(json.dumps(summary, indent=1))
    print(profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
