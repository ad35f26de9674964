"""The sink's Python workers under Spark, per write task: its CPU and PySpark's collection after it.

Runs on: the benchmark process (development tool; not in the wheel).

``python -m bench.sink_worker_profile`` writes a cached DataFrame of ``--rows`` rows in
``--partitions`` partitions to one queue on moto (``df.write.format("sqs")``, ``--writes``
times; the queue is deleted and created again under the same name between writes, so its URL,
and so the writers' client, stays the same, as for a streaming sink) in a session whose Python
workers run ``bench.worker_daemon`` (no cProfile). It prints, for the tasks after each worker's
second and the first two writes: the task's CPU, the ``gc.collect()`` PySpark's daemon runs
after it and the objects that collection walked, the CPU of ``collection.freeze_long_lived``
calls, and the botocore clients the tasks created.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def run(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="sink-worker-profile-"))
    os.environ["SPARK_SQS_WORKER_PROFILE"] = str(out)
    os.environ["SPARK_SQS_WORKER_CPROFILE"] = "0"
    for key, value in (
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        os.environ.setdefault(key, value)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from bench import load, servers, sink
    from devtools.spark import local_session

    conf = {"spark.python.daemon.module": "bench.worker_daemon"}
    spark = local_session("sink-worker-profile", f"local[{args.partitions}]", conf)
    moto = servers.start_moto()
    since = time.time()
    try:
        endpoint = moto.value
        bodies = [(load.body(n, args.body_bytes),) for n in range(args.rows)]
        df = spark.createDataFrame(bodies, "body string").repartition(args.partitions).cache()
        df.count()
        for i in range(args.writes):
            sqs = load.client(endpoint)
            url = sqs.create_queue(QueueName="sink-worker-profile")["QueueUrl"]
            if i == 2:
                since = time.time()
            sink.sink(spark, df, endpoint, url, args.in_flight)
            sqs.delete_queue(QueueUrl=url)
    finally:
        spark.stop()
        moto.stop()
    tasks = [
        json.loads(line)
        for path in glob.glob(str(out / "*.jsonl"))
        for line in Path(path).read_text().splitlines()
    ]
    window = [t for t in tasks if t["ended"] > since and t.get("task", 0) > 2]
    if not window:
        return {"tasks": 0, "folder": str(out)}
    return {
        "tasks": len(window),
        "workers": len({t["pid"] for t in tasks}),
        "rows_per_task": args.rows / args.partitions,
        "task_ms_mean": round(1000 * statistics.mean(t["task_cpu_s"] for t in window), 2),
        "gc_ms_mean": round(1000 * statistics.mean(t["gc_cpu_s"] for t in window), 2),
        "gc_objects_median": statistics.median(t["gc_objects"] for t in window),
        "botocore_clients_per_task": statistics.mean(t.get("botocore_clients", 0) for t in window),
        "freeze_calls_ms": [
            round(1000 * t["freeze_cpu_s"], 2) for t in tasks if "freeze_cpu_s" in t
        ],
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "folder": str(out),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=10)
    parser.add_argument("--rows", type=int, default=2000, help="rows a write")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--body-bytes", type=int, default=200)
    print(json.dumps(run(parser.parse_args(argv)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
