"""Queries with explicit credentials, in their own process so that every process of the query
(Python driver, JVM, streaming source runner, Python workers) writes its output where the
security test can search it.

Credentials come from the environment (``TEST_KEY``, ``TEST_SECRET``, ``TEST_TOKEN``). Writes to
``--out``: ``progress.json`` (every progress report of the query), ``errors.json`` (the texts of
failing cases), ``modes.json`` (permission bits of every journal path while a batch was journaled
and unacknowledged) and ``handles.json`` (the receipt handles journaled, read from the entries).
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("endpoint", "queue-url", "journal", "checkpoint", "out"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--messages", type=int, required=True)
    args = parser.parse_args()
    out = Path(args.out)
    # A permissive umask: the journal must still be private.
    os.umask(0o022)

    import boto3

    from devtools.spark import local_session
    from spark_sqs.journal import Journal

    # Spark's default log level: the test searches everything Spark writes.
    spark = local_session("spark-sqs-security-test", log_level=None)
    credentials = {
        "awsAccessKeyId": os.environ["TEST_KEY"],
        "awsSecretAccessKey": os.environ["TEST_SECRET"],
        "awsSessionToken": os.environ["TEST_TOKEN"],
    }

    def reader(**options: str) -> Any:
        r = spark.readStream.format("sqs")
        for key, value in {
            "queueUrl": args.queue_url,
            "endpointUrl": args.endpoint,
            "journalLocation": args.journal,
            "numPartitions": "2",
            "maxMessagesPerTrigger": "20",
            **credentials,
            **options,
        }.items():
            r = r.option(key, value)
        return r

    journal = Journal(args.journal)
    handles: list[str] = []
    modes: dict[str, tuple[int, bool]] = {}

    def sink(df: Any, batch_id: int) -> None:
        df.write.mode("overwrite").parquet(f"{out}/sink/batch={batch_id}")
        # The batch is journaled and not yet acknowledged: its entries exist now.
        for batch in journal.batches.list():
            for receipts in journal.entries.batch_receipts(
                batch, journal.batches.live_receivers(batch) or ()
            ):
                handles.extend(receipts.receipt_handles)
        for path in [Path(args.journal), *Path(args.journal).rglob("*")]:
            mode = stat.S_IMODE(path.stat().st_mode)
            modes[str(path.relative_to(args.journal))] = (mode, path.is_dir())

    query = (
        reader()
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )
    sqs = boto3.client(
        "sqs",
        region_name="us-east-1",
        endpoint_url=args.endpoint,
        aws_access_key_id=credentials["awsAccessKeyId"],
        aws_secret_access_key=credentials["awsSecretAccessKey"],
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr)
            sys.exit(2)
        attrs = sqs.get_queue_attributes(QueueUrl=args.queue_url, AttributeNames=["All"])
        counts = attrs["Attributes"]
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        if (
            rows >= args.messages
            and counts["ApproximateNumberOfMessages"] == "0"
            and counts["ApproximateNumberOfMessagesNotVisible"] == "0"
        ):
            break
        time.sleep(0.5)
    else:
        print("timed out", file=sys.stderr)
        sys.exit(3)
    progress = [json.loads(p.json) for p in query.recentProgress]
    query.stop()

    errors: list[str] = []
    # A query that fails at start: a queue that does not exist.
    missing = args.queue_url.rsplit("/", 1)[0] + "/no-such-queue"
    failing = (
        reader(queueUrl=missing, journalLocation=f"{args.journal}-missing")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", f"{args.checkpoint}-missing")
        .start()
    )
    try:
        failing.awaitTermination(120)
        errors.append("NO FAILURE")
    except Exception as exc:  # noqa: BLE001 - its text is what the test searches
        errors.append(str(exc))
    # Option errors at load() with the credentials among the options.
    for bad in ({"numPartitions": "zero"}, {"awsAccessKeyId": " "}, {"roleArn": "nope"}):
        try:
            reader(**bad).load()
            errors.append("NO FAILURE")
        except Exception as exc:  # noqa: BLE001
            errors.append(str(exc))
    spark.stop()

    (out / "progress.json").write_text(json.dumps(progress))
    (out / "errors.json").write_text(json.dumps(errors))
    (out / "modes.json").write_text(json.dumps(modes))
    (out / "handles.json").write_text(json.dumps(handles))


if __name__ == "__main__":
    main()
