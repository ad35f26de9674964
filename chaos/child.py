"""The query under test: ``readStream.format("sqs")`` into a Parquet file sink or, with
``--sink sqs``, into a second queue with ``writeStream.format("sqs")`` (the sink round trip), or,
with ``--sink write-then-skip``, into a ``foreachBatch`` that writes every batch and then skips
the commit of a batch id it already has (as Iceberg's streaming write does), in its own process
so the harness can SIGKILL it (Python driver, JVM and Python workers together). A few messages
stall their micro-batch past the visibility timeout (``--stall-every``).

On ``local[2,4]`` by default; with ``--master spark://...`` the driver runs here and the
executors on the harness's standalone cluster (``chaos/cluster.py``), with ``--spark-conf``.

Writes ``<control>/started`` once the query runs, exits 0 when ``<control>/stop`` appears (after
stopping the query), and exits 2 if the query fails. A SIGTERM (sent also when the harness
dies) kills its whole process group: the driver's JVM and Spark's Python processes with it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import time
import uuid
import zlib
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("endpoint", "queue-url", "journal", "checkpoint", "out", "control"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--visibility", default="10")
    parser.add_argument("--receivers", default="2")
    parser.add_argument("--max-per-trigger", default="200")
    parser.add_argument("--delete-after-journal", action="store_true")
    parser.add_argument("--stall-every", type=int, default=0)
    parser.add_argument("--stall-seconds", type=float, default=0.0)
    parser.add_argument("--sink", choices=("parquet", "sqs", "write-then-skip"), default="parquet")
    parser.add_argument("--target-queue-url", default=None, help="with --sink sqs")
    parser.add_argument(
        "--poison-number",
        type=int,
        default=None,
        help="the producer's message number that makes every task holding it fail",
    )
    parser.add_argument("--dead-letter-url", default=None, help="with --poison-number")
    parser.add_argument("--message-format", choices=("raw", "sns"), default="raw")
    # Up to 4 attempts per task: receivers fail when faults outlast botocore's retries.
    parser.add_argument("--master", default="local[2,4]")
    parser.add_argument("--spark-conf", default="{}", help="more Spark configuration, as JSON")
    args = parser.parse_args()
    control = Path(args.control)
    # The harness's SIGTERM, or its death (PR_SET_PDEATHSIG): take the JVM and Spark's Python
    # processes of this session along, as the harness's own SIGKILL of the session does.
    signal.signal(signal.SIGTERM, lambda *_: os.killpg(0, signal.SIGKILL))
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    from pyspark.sql.functions import udf

    from devtools.spark import local_session, sqs_stream

    spark = local_session(
        "spark-sqs-chaos",
        args.master,
        # Keep one metadata file per batch: the harness checks FIFO order batch by batch.
        {
            "spark.sql.streaming.fileSink.log.compactInterval": "1000000",
            **json.loads(args.spark_conf),
        },
    )

    stall_every, stall_seconds = args.stall_every, args.stall_seconds
    poison = args.poison_number
    stalled = str(Path(args.out).parent / "stalled")

    @udf("string")
    def pass_through(message_id, body):  # no type hints: PySpark reads them as a pandas UDF
        if poison is not None and json.loads(body).get("n") == poison:
            raise ValueError(f"message {poison} cannot be processed (the harness's poison)")
        # About one message in stall_every makes its micro-batch outlast the visibility timeout
        # (once, across all runs), so the heartbeat has to keep the batch's messages hidden.
        if stall_every and zlib.crc32(message_id.encode()) % stall_every == 0:
            os.makedirs(stalled, exist_ok=True)
            try:
                os.close(os.open(f"{stalled}/{message_id}", os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return body
            time.sleep(stall_seconds)
        return body

    if poison is None:
        # Every killed run that read a batch counts as an attempt of it (docs/operations.md):
        # with the default of 3 and poisonMessagePolicy=fail the kills alone would stop it.
        poison_options = {"maxBatchAttempts": "1000"}
    else:
        # Killed runs count too: they narrow batches that did not fail, which must be safe.
        poison_options = {
            "poisonMessagePolicy": "deadLetter",
            "deadLetterQueueUrl": args.dead_letter_url,
            "maxBatchAttempts": "3",
        }
    stream = sqs_stream(
        spark,
        args.endpoint,
        args.queue_url,
        args.journal,
        visibilityTimeout=args.visibility,
        numPartitions=args.receivers,
        maxMessagesPerTrigger=args.max_per_trigger,
        deleteAfterJournal=str(args.delete_after_journal).lower(),
        messageFormat=args.message_format,
        **poison_options,
    )
    if args.message_format == "sns":
        # The harness knows the ids SNS gave its publishes, and the body is the SNS Message.
        stream = stream.drop("messageId").withColumnRenamed("snsMessageId", "messageId")
    stream = stream.select(
        "messageId", pass_through("messageId", "body").alias("body"), "messageGroupId"
    )
    if args.sink == "sqs":
        # The round trip: the sink derives each message's deduplication id from the source's
        # messageId, so a replayed batch or a retried task sends ids SQS has already seen.
        writer = (
            stream.writeStream.format("sqs")
            .option("queueUrl", args.target_queue_url)
            .option("endpointUrl", args.endpoint)
            .option("metricsLocation", str(Path(args.out).parent / "sink-metrics"))
        )
    elif args.sink == "write-then-skip":
        writer = stream.writeStream.foreachBatch(write_then_skip(Path(args.out)))
    else:
        writer = stream.writeStream.format("parquet").option("path", args.out)
    query = (
        writer.option("checkpointLocation", args.checkpoint)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    (control / "started").write_text(str(os.getpid()))
    while not (control / "stop").exists():
        failure = query.exception()
        if failure is not None:
            logging.getLogger("chaos.child").error("query failed: %s", failure)
            return 2
        time.sleep(0.2)
    query.stop()
    spark.stop()
    return 0


def write_then_skip(out: Path):  # noqa: ANN201 - a foreachBatch function
    """A sink that runs every batch's tasks, then skips the commit of a batch id it has, as
    Iceberg's streaming write (and any foreachBatch that checks the id after writing) does. A
    replayed batch's receivers therefore run, and whatever they deliver is dropped if the batch
    was committed before: they must deliver what the first attempt did.

    Executors write the batch's files into ``attempts/<id>-<uuid>``; the driver then commits by
    renaming that folder to ``batches/<id>`` (atomic), unless ``batches/<id>`` exists. A run
    killed between the two leaves an attempt folder that nothing reads."""
    attempts, batches, skipped = out / "attempts", out / "batches", out / "skipped"
    for folder in (attempts, batches, skipped):
        folder.mkdir(parents=True, exist_ok=True)

    def sink(df, batch_id: int) -> None:  # noqa: ANN001
        attempt = attempts / f"{batch_id}-{uuid.uuid4().hex}"
        df.write.parquet(attempt.as_uri())
        if (batches / str(batch_id)).exists():
            (skipped / attempt.name).write_text("")
            shutil.rmtree(attempt, ignore_errors=True)
            return
        os.rename(attempt, batches / str(batch_id))

    return sink


if __name__ == "__main__":
    sys.exit(main())
