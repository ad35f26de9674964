"""The source's hot path without Spark: the driver's per-batch work and a receiver's ``read()``,
called in one process exactly as Spark calls them, timed and profiled with cProfile.

``python -m bench.hotpath --endpoint URL --out DIR`` fills a queue, then loops
``latestOffset`` (acknowledges the previous batch: the deletes) -> ``partitions`` -> ``read`` of
every partition until all messages are delivered and acknowledged, and writes ``hotpath.json``
(receiver messages/s, driver ms per batch) and ``hotpath.prof``/``hotpath-top.txt``.

Run it with a different ``PYTHONPATH`` to measure another version of ``spark_sqs`` (the runner
measures the branch's base commit this way, for before/after numbers in the same run).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import load
from bench.stats import median

# Where profiled time goes, by the file a function lives in.
_BUCKETS = (
    ("spark_sqs", "/spark_sqs/"),
    ("pyarrow", "/pyarrow/"),
    ("botocore/boto3", "/botocore/"),
    ("botocore/boto3", "/boto3/"),
    ("urllib3/http.client", "/urllib3/"),
    ("urllib3/http.client", "/http/client.py"),
    ("json", "/json/"),
    ("socket wait", "socket"),
    ("threads (waiting on pool)", "threading.py"),
)


def bucket(filename: str, function: str) -> str:
    text = f"{filename}:{function}"
    if "recv_into" in function or "'poll'" in function or "select" in function:
        return "socket wait"
    if "acquire" in function:
        return "threads (waiting on pool)"
    for name, needle in _BUCKETS:
        if needle in text:
            return name
    return "other"


def run(endpoint: str, messages: int, per_batch: int, receivers: int, body_bytes: int) -> dict:
    import spark_sqs
    from spark_sqs.options import SqsOptions
    from spark_sqs.source import SqsStreamReader

    sqs = load.client(endpoint, pool=16)
    url = sqs.create_queue(QueueName=f"hotpath-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    fill_seconds = load.fill(endpoint, url, messages, body_bytes)
    journal = tempfile.mkdtemp(prefix="hotpath-journal-")
    options = SqsOptions.parse(
        {
            "queueUrl": url,
            "endpointUrl": endpoint,
            "region": load.REGION,
            "journalLocation": journal,
            "numPartitions": str(receivers),
            "maxMessagesPerTrigger": str(per_batch * receivers),
        }
    )
    reader = SqsStreamReader(options)
    # read() runs on a pickled copy in Spark: do the same, so no driver state leaks into it.
    import pickle

    executor_reader = pickle.loads(pickle.dumps(reader))
    limit = reader.getDefaultReadLimit()
    start = reader.initialOffset()
    delivered = 0
    driver_ms: list[float] = []
    read_seconds = 0.0
    batches = 0
    profile = cProfile.Profile()
    began = time.perf_counter()
    with ThreadPoolExecutor(receivers) as pool:
        profile.enable()
        while True:
            t0 = time.perf_counter()
            end = reader.latestOffset(start, limit)
            if end == start:
                if delivered >= messages:
                    break
                time.sleep(0.05)
                continue
            partitions = reader.partitions(start, end)
            t1 = time.perf_counter()

            def read(p: Any) -> int:
                return sum(b.num_rows for b in executor_reader.read(p))

            # One receiver runs on this thread, so that cProfile (which follows only the
            # thread it was enabled on) sees inside read().
            counts = [read(p) for p in partitions] if receivers == 1 else pool.map(read, partitions)
            delivered += sum(counts)
            t2 = time.perf_counter()
            driver_ms.append((t1 - t0) * 1000)
            read_seconds += t2 - t1
            batches += 1
            start = end
        # The last batch's deletes happened in the final latestOffset above.
        profile.disable()
    total = time.perf_counter() - began
    reader.stop()
    stats = pstats.Stats(profile)
    by_bucket: dict[str, float] = {}
    for (filename, _, function), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        key = bucket(filename, function)
        by_bucket[key] = by_bucket.get(key, 0.0) + tottime
    top = io.StringIO()
    pstats.Stats(profile, stream=top).sort_stats("tottime").print_stats(25)
    return {
        "spark_sqs": str(Path(spark_sqs.__file__).parent),
        "messages": delivered,
        "batches": batches,
        "per_batch": per_batch,
        "receivers": receivers,
        "fill_seconds": fill_seconds,
        "total_seconds": total,
        "end_to_end_rate": delivered / total if total else 0.0,
        "receiver_rate": delivered / read_seconds if read_seconds else 0.0,
        "driver_ms_median": median(driver_ms[1:] or driver_ms),
        "driver_ms_total": sum(driver_ms),
        "profile_seconds_by_bucket": dict(sorted(by_bucket.items(), key=lambda kv: -kv[1])),
        "_profile": profile,
        "_top": top.getvalue(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--out", required=True, help="directory for hotpath.json/.prof/-top.txt")
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--per-batch", type=int, default=500)
    parser.add_argument("--receivers", type=int, default=1)
    parser.add_argument("--body-bytes", type=int, default=200)
    parser.add_argument("--label", default="after")
    args = parser.parse_args(argv)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    result = run(args.endpoint, args.messages, args.per_batch, args.receivers, args.body_bytes)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result.pop("_profile").dump_stats(str(out / f"hotpath-{args.label}.prof"))
    (out / f"hotpath-{args.label}-top.txt").write_text(result.pop("_top"))
    (out / f"hotpath-{args.label}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
