"""A streaming query of an earlier spark-sqs in its own process, for the upgrade test.

Which ``spark_sqs`` runs is decided by ``PYTHONPATH``: the test puts an extracted earlier
version first, and the driver, Spark's streaming-source process and the executors (Python
workers inherit the variable) import it from there. The child records what the driver and the
executors imported in ``control/imported.json``.

The sink writes each micro-batch to ``out/batch=<id>``, and runs a batch it already has before
skipping its write (``write_sink``: Iceberg's streaming write, or a foreachBatch that checks the
id after computing), so a replay that received other messages than its first attempt loses
them. After each batch it wrote, it creates ``control/sunk-<id>``. How the run ends
(``--ending``):

- ``killed``: the default trigger; once the sink wrote a batch numbered ``--hold-from`` or
  more, it waits there (``control/at-after-sink``) for the test's SIGKILL: that batch is in
  Spark's offset log and in the sink, not in the commit log.
- ``stopped``: a processing-time trigger whose next firing is decades away, so the query runs
  exactly one batch, at its start; it is stopped cleanly when ``control/stop`` appears. That
  batch is in the commit log, and not acknowledged: the source acknowledges a batch when it
  plans the next one, which this run never does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_sink(spark: Any, out: str, written: Callable[[int], None]) -> Any:
    """The foreachBatch sink of both versions' runs (see the module docstring)."""

    def sink(df: Any, batch_id: int) -> None:
        rows = df.select("messageId", "body").collect()
        if not rows or Path(f"{out}/batch={batch_id}/_SUCCESS").exists():
            return
        spark.createDataFrame(rows).write.mode("overwrite").parquet(f"{out}/batch={batch_id}")
        written(batch_id)

    return sink


def _imported(_: Any) -> dict[str, Any]:
    """Runs on an executor: which spark_sqs its Python worker imports."""
    import spark_sqs

    try:
        from spark_sqs.journal.meta import FORMAT_VERSION
    except ImportError:  # a version from before the journal's records had modules of their own
        from spark_sqs.journal.entries import FORMAT_VERSION  # type: ignore[attr-defined,no-redef]

    return {"file": spark_sqs.__file__, "format": FORMAT_VERSION, "pid": os.getpid()}


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("endpoint", "queue-url", "journal", "checkpoint", "out", "control"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--ending", choices=("killed", "stopped"), required=True)
    parser.add_argument("--hold-from", type=int, default=1)
    parser.add_argument("--visibility", default="5")
    parser.add_argument("--max-messages", default="10")
    parser.add_argument("--num-partitions", default="2")
    args = parser.parse_args()
    control = Path(args.control)

    from devtools.spark import local_session, sqs_stream
    from tests.helpers import ONE_BATCH_TRIGGER

    spark = local_session("spark-sqs-upgrade-test")
    (control / "imported.json").write_text(
        json.dumps(
            {
                "driver": _imported(None),
                "executors": spark.sparkContext.parallelize(range(2), 2).map(_imported).collect(),
            }
        )
    )

    def written(batch_id: int) -> None:
        (control / f"sunk-{batch_id}").write_text("")
        if args.ending == "killed" and batch_id >= args.hold_from:
            (control / "at-after-sink").write_text(str(os.getpid()))
            while True:  # until the test kills the process
                time.sleep(1)

    stream = sqs_stream(
        spark,
        args.endpoint,
        args.queue_url,
        args.journal,
        visibilityTimeout=args.visibility,
        maxMessagesPerTrigger=args.max_messages,
        numPartitions=args.num_partitions,
    )
    query = (
        stream.writeStream.foreachBatch(write_sink(spark, args.out, written))
        .trigger(processingTime="0 seconds" if args.ending == "killed" else ONE_BATCH_TRIGGER)
        .option("checkpointLocation", args.checkpoint)
        .start()
    )
    while not (control / "stop").exists():
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr)
            sys.exit(2)
        time.sleep(0.2)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
