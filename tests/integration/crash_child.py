"""A streaming query in its own process, for crash tests. The test kills it with SIGKILL.

The sink writes each micro-batch to ``out/batch=<id>``, as one of three kinds of sink
(``--sink``): ``overwrite`` (a replayed batch replaces its first attempt), ``write-then-skip``
(runs the batch, then skips the write if the batch id is done: Iceberg's streaming write, or a
foreachBatch that checks the id after computing) and ``skip-before-run`` (skips a done batch
before running it: the file sink, Delta's txnVersion). It pauses at points named by files in
``control``:

- ``hold-before-sink``: after the batch was read (so journaled), before anything is written;
- ``hold-after-sink``: after the batch was written, before Spark commits it.

On reaching a point it writes a marker file (``at-before-sink``, ``at-after-sink``). The query
stops cleanly when ``control/stop`` appears.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("endpoint", "queue-url", "journal", "checkpoint", "out", "control"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--visibility", default="5")
    parser.add_argument("--num-partitions", default="2")
    parser.add_argument("--max-messages", default="20")
    parser.add_argument(
        "--sink", default="overwrite", choices=("overwrite", "write-then-skip", "skip-before-run")
    )
    args = parser.parse_args()
    control = Path(args.control)

    from devtools.spark import local_session, sqs_stream

    spark = local_session("spark-sqs-crash-test")

    def pause(point: str) -> None:
        if (control / f"hold-{point}").exists():
            (control / f"at-{point}").write_text(str(os.getpid()))
            while (control / f"hold-{point}").exists():
                time.sleep(0.1)

    def done(batch_id: int) -> bool:
        return Path(f"{args.out}/batch={batch_id}/_SUCCESS").exists()

    def sink(df, batch_id: int) -> None:  # noqa: ANN001
        if args.sink == "skip-before-run" and done(batch_id):
            return
        rows = df.select("messageId", "body").collect()
        if not rows or (args.sink == "write-then-skip" and done(batch_id)):
            return
        pause("before-sink")
        spark.createDataFrame(rows).write.mode("overwrite").parquet(f"{args.out}/batch={batch_id}")
        pause("after-sink")

    query = (
        sqs_stream(
            spark,
            args.endpoint,
            args.queue_url,
            args.journal,
            visibilityTimeout=args.visibility,
            maxMessagesPerTrigger=args.max_messages,
            numPartitions=args.num_partitions,
            # The tests kill the driver up to three times on one batch; each run that read it
            # counts as an attempt (docs/operations.md, poison messages), and the default
            # poisonMessagePolicy=fail refuses a batch after maxBatchAttempts (3) of them.
            maxBatchAttempts=10,
        )
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", args.checkpoint)
        .start()
    )
    (control / "started").write_text(str(os.getpid()))
    while not (control / "stop").exists():
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr)
            sys.exit(2)
        time.sleep(0.2)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
