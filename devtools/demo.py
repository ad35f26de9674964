"""``make demo`` (``python -m devtools.demo``): an embedded SQS, a producer, a streaming query,
progress, and a verdict.

Runs on: the demo's driver, from a checkout (a development tool: not in the wheel). Starts moto's
SQS on 127.0.0.1, sends numbered messages at a steady rate while
``spark.readStream.format("sqs")`` writes them to a Parquet sink, prints progress every second,
and finally checks that every sent message is in the sink exactly once and the queue is empty.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from spark_sqs.console import say
from spark_sqs.producer import numbered_entries
from spark_sqs.sqs.client import queue_counts

from .spark import local_session, sqs_stream


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__)
    parser.add_argument("--messages", type=int, default=2000, help="messages to send")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second")
    parser.add_argument("--receivers", type=int, default=2, help="numPartitions")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after seconds")
    parser.add_argument("--workdir", default=None, help="keep output here (default: temp dir)")
    args = parser.parse_args(argv)

    try:
        import boto3

        from .local_sqs import MotoServer
    except ImportError as exc:
        say(f"The demo needs moto[server] ({exc}). Fix: run it as 'make demo' (pinned virtualenv)")
        return 2

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "demo")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "demo")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="spark-sqs-demo-"))
    for sub in ("out", "checkpoint", "journal"):
        shutil.rmtree(workdir / sub, ignore_errors=True)

    say("Starting the embedded SQS (moto) on 127.0.0.1 ...")
    server = MotoServer()
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=server.endpoint)
    queue_url = sqs.create_queue(QueueName="spark-sqs-demo")["QueueUrl"]

    say("Starting Spark (local[2]); the first start takes 15-30 s ...")
    spark = local_session("spark-sqs-demo", quiet_log4j=True)

    sent = _Producer(sqs, queue_url, args.messages, args.rate)
    query = (
        sqs_stream(
            spark,
            server.endpoint,
            queue_url,
            workdir / "journal",
            numPartitions=args.receivers,
            maxMessagesPerTrigger=500,
        )
        .selectExpr(
            "messageId", "body", "sentTimestamp", "messageAttributes['producer'] AS producer"
        )
        .writeStream.format("parquet")
        .option("path", str(workdir / "out"))
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    sent.start()
    ok = False
    try:
        ok = _watch(spark, query, sqs, queue_url, sent, args.messages, args.timeout)
    finally:
        sent.stop()
        query.stop()
    verdict = _verify(spark, workdir / "out", args.messages, sqs, queue_url) if ok else False
    spark.stop()
    server.stop()
    say(f"Output kept in {workdir}")
    return 0 if verdict else 1


class _Producer(threading.Thread):
    def __init__(self, sqs: Any, queue_url: str, total: int, rate: float) -> None:
        super().__init__(name="demo-producer", daemon=True)
        self._sqs, self._url, self._total, self._rate = sqs, queue_url, total, rate
        self._halt = threading.Event()
        self.count = 0

    def run(self) -> None:
        started = time.monotonic()
        while self.count < self._total and not self._halt.is_set():
            batch = numbered_entries(
                self.count,
                min(self.count + 10, self._total),
                text="hello from the demo",
                attributes={"producer": {"DataType": "String", "StringValue": "demo"}},
            )
            self._sqs.send_message_batch(QueueUrl=self._url, Entries=batch)
            self.count += len(batch)
            # A steady rate, as a real producer would send, rather than one burst.
            ahead = self.count / self._rate - (time.monotonic() - started)
            if ahead > 0:
                self._halt.wait(ahead)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def _watch(
    spark: Any,
    query: Any,
    sqs: Any,
    queue_url: str,
    producer: _Producer,
    total: int,
    timeout: float,
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query.exception() is not None:
            say(f"\nThe query failed: {query.exception()}")
            return False
        progress = query.recentProgress
        rows = sum(p["numInputRows"] for p in progress)
        batches = sum(1 for p in progress if p["numInputRows"])
        visible, in_flight = queue_counts(sqs, queue_url)
        deleted = producer.count - visible - in_flight
        received = deleted + in_flight
        bar = _bar(deleted / total)
        sys.stdout.write(
            f"\r{bar} sent {producer.count}/{total} | received {received} | written {rows} "
            f"in {batches} batches | acknowledged {deleted} | queued {visible}   "
        )
        sys.stdout.flush()
        if producer.count >= total and visible == 0 and in_flight == 0 and rows >= total:
            say()
            return True
        time.sleep(1.0)
    say("\nTimed out before every message was written and acknowledged.")
    return False


def _bar(fraction: float, width: int = 24) -> str:
    filled = int(max(0.0, min(1.0, fraction)) * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def _verify(spark: Any, out: Path, total: int, sqs: Any, queue_url: str) -> bool:
    rows = spark.read.parquet(str(out)).select("body").collect()
    numbers = [json.loads(r.body)["n"] for r in rows]
    missing = sorted(set(range(total)) - set(numbers))
    duplicated = len(numbers) - len(set(numbers))
    left = sum(queue_counts(sqs, queue_url))
    say(
        f"Verdict: sent {total}, in sink {len(numbers)}, missing {len(missing)}, "
        f"duplicated {duplicated}, left in queue {left}"
    )
    ok = not missing and duplicated == 0 and left == 0 and len(numbers) == total
    say("EXACTLY ONCE: every message written once, queue empty." if ok else "FAILED")
    return ok


if __name__ == "__main__":
    sys.exit(main())
