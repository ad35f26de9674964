"""The SQS sink's writers: ``df.write.format("sqs")`` and ``df.writeStream.format("sqs")``.

Runs on: driver (``create``: options, queue and schema checks at query start; ``commit``:
counters) and executors (``write``: one partition, through ``sending.Sender``).

Spark creates a writer on the driver, pickles it into every task, and for a streaming query
creates a fresh one again for each micro-batch's commit, so a writer holds only picklable,
immutable state (``WriteTarget``); boto3 clients are made per process on first use.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..connection import Connection
from ..executor import collection
from ..per_process import PerProcess
from ..sqs.client import SqsClient, classify, make_client, queue_attributes, resolve_queue_url
from .errors import OversizeRowError, SinkInputError
from .options import SinkOptions
from .rows import DedupeIds, Entry, Layout, RowConverter
from .sending import SendCounters, Sender

if TYPE_CHECKING:
    from pyspark.sql import Row

logger = logging.getLogger(__name__)

_QUEUE_ATTRIBUTES = ["FifoQueue", "MaximumMessageSize"]


@dataclass(frozen=True)
class QueueInfo:
    url: str
    fifo: bool
    max_message_size: int


@dataclass(frozen=True)
class WriteTarget:
    """Everything a write task needs, checked on the driver at query start."""

    options: SinkOptions
    queue: QueueInfo
    layout: Layout
    dead_letter: QueueInfo | None = None


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    partition: int
    counters: dict[str, int] = field(default_factory=dict)


def _queue_info(client: SqsClient, url: str) -> QueueInfo:
    attrs = queue_attributes(client, url, _QUEUE_ATTRIBUTES)
    return QueueInfo(
        url=url,
        fifo=attrs.get("FifoQueue", "false").lower() == "true",
        max_message_size=int(attrs.get("MaximumMessageSize", 1024 * 1024)),
    )


def prepare(options: SinkOptions, schema: StructType) -> WriteTarget:
    """Connect, read the queue's attributes and check the input columns against it. Any
    problem raises here, before a single message is sent."""
    client = _client(options.connection, 4)
    url = resolve_queue_url(client, options.connection)
    queue = _queue_info(client, url)
    layout = Layout.of(
        schema, fifo=queue.fifo, ignore_extra=options.ignore_extra_columns, queue=url
    )
    dead_letter = None
    if options.oversize_dead_letter_queue_url:
        dead_letter = _queue_info(client, options.oversize_dead_letter_queue_url)
    return WriteTarget(options=options, queue=queue, layout=layout, dead_letter=dead_letter)


class SqsBatchWriter(DataSourceWriter):
    """``df.write.format("sqs")``."""

    def __init__(self, target: WriteTarget, write_id: str) -> None:
        self.target = target
        self.write_id = write_id

    @classmethod
    def create(cls, options: Mapping[str, str], schema: StructType) -> SqsBatchWriter:
        sink = SinkOptions.parse(options)
        target = prepare(sink, schema)
        layout = target.layout
        if (
            target.queue.fifo
            and sink.write_id is None
            and layout.dedupe_id is None
            and layout.message_id is None
        ):
            raise SinkInputError(
                f"Writing to the FIFO queue {target.queue.url} needs the 'writeId' option (or "
                "a 'messageDeduplicationId' column): message deduplication ids are derived "
                "from it, so that running the same write again within 5 minutes sends no "
                "duplicates. Fix: add .option('writeId', '<a name for this write, the same on "
                "every retry>')"
            )
        # Without a writeId (standard queues), a retried task of this write still sends the
        # same ids: this writer, and its id, is pickled once into every task.
        return cls(target, sink.write_id or f"auto-{uuid.uuid4()}")

    def write(self, iterator: Iterator[Row]) -> SinkCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        return write_partition(
            self.target, iterator, f"write:{self.write_id}", partition, f"write {self.write_id}"
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        report(self.target, messages, f"write {self.write_id}", f"write-{self.write_id}")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        report(self.target, messages, f"aborted write {self.write_id}", None)


class SqsStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("sqs")``."""

    def __init__(self, target: WriteTarget) -> None:
        self.target = target

    @classmethod
    def create(cls, options: Mapping[str, str], schema: StructType) -> SqsStreamWriter:
        return cls(prepare(SinkOptions.parse(options), schema))

    def write(self, iterator: Iterator[Row]) -> SinkCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        query = context.getLocalProperty("sql.streaming.queryId") if context else None
        batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        if not query or batch is None:
            raise SinkInputError(
                "The SQS stream writer cannot see the query id and batch id of this task "
                "(Spark local properties 'sql.streaming.queryId', 'streaming.sql.batchId'), "
                "from which deduplication ids are derived. Fix: run it from "
                "df.writeStream; for a batch write use df.write with 'writeId'"
            )
        partition = context.partitionId()  # type: ignore[union-attr]
        return write_partition(
            self.target, iterator, f"query:{query}:batch:{batch}", partition, f"batch {batch}"
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        report(self.target, messages, f"batch {batchId}", f"batch-{batchId:010d}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        report(self.target, messages, f"aborted batch {batchId}", None)


def write_partition(
    target: WriteTarget, rows: Iterator[Row], scope: str, partition: int, what: str
) -> SinkCommitMessage:
    """Send one partition's rows; runs in a Spark task."""
    options = target.options
    client = _client(options.connection, options.max_in_flight_calls)
    # The worker now has what it keeps for its life (its client): PySpark's collection after
    # each task need not walk it again (executor/collection.py).
    collection.freeze_long_lived()
    converter = RowConverter(
        target.layout,
        fifo=target.queue.fifo,
        dedupe=DedupeIds(scope, partition),
        max_message_size=target.queue.max_message_size,
        oversize_allowed=target.dead_letter is not None,
        where=f"partition {partition} of {what}",
        dedupe_attribute=options.dedupe_attribute,
    )
    sender = Sender(
        client,
        target.queue.url,
        fifo=target.queue.fifo,
        max_in_flight=options.max_in_flight_calls,
        max_attempts=options.max_send_attempts,
    )
    counters = sender.counters

    def entries() -> Iterator[Entry]:
        for position, row in enumerate(rows):
            counters.rows += 1
            entry = converter.convert(position, row)
            if entry.size > target.queue.max_message_size:
                _dead_letter(client, target, entry, converter.where)
                counters.deadLettered += 1
                continue
            yield entry

    started = time.monotonic()
    sender.send(entries())
    counters.dedupeAttributeSkipped = converter.dedupe_attribute_skipped
    logger.debug(
        "%s: sent %d of %d rows in %.2f s (%d calls, %d retried)",
        converter.where,
        counters.sent,
        counters.rows,
        time.monotonic() - started,
        counters.calls,
        counters.retried,
    )
    return SinkCommitMessage(partition=partition, counters=counters.as_dict())


def _dead_letter(client: SqsClient, target: WriteTarget, entry: Entry, where: str) -> None:
    dlq = target.dead_letter
    assert dlq is not None
    if entry.size > dlq.max_message_size:
        raise OversizeRowError(
            f"Row {entry.position} (0-based) of {where} is {entry.size} bytes, larger than "
            f"the MaximumMessageSize of both the queue ({target.queue.max_message_size}) and "
            f"'oversizeDeadLetterQueueUrl' ({dlq.max_message_size}). Fix: shorten or split "
            "the row, or raise the dead-letter queue's MaximumMessageSize (at most 1 MiB)"
        )
    request: dict[str, Any] = {"QueueUrl": dlq.url, "MessageBody": entry.body}
    if entry.attributes:
        request["MessageAttributes"] = entry.attributes
    if dlq.fifo:
        request["MessageGroupId"] = entry.group_id or "spark-sqs-oversize"
        request["MessageDeduplicationId"] = entry.dedupe_id
    try:
        client.send_message(**request)
    except Exception as exc:
        raise classify(exc, "SendMessage", dlq.url) from None
    logger.warning(
        "row %d of %s (%d bytes) is larger than MaximumMessageSize %d of %s: sent to %s",
        entry.position,
        where,
        entry.size,
        target.queue.max_message_size,
        target.queue.url,
        dlq.url,
    )


def report(
    target: WriteTarget,
    messages: list[WriterCommitMessage | None],
    what: str,
    metrics_name: str | None,
) -> dict[str, Any]:
    """Sum the tasks' counters; one INFO line, and a metrics file with ``metricsLocation``."""
    totals = SendCounters()
    tasks = 0
    for message in messages:
        if isinstance(message, SinkCommitMessage):
            tasks += 1
            totals.add(SendCounters(**message.counters))
    summary: dict[str, Any] = {
        "what": what,
        "queueUrl": target.queue.url,
        "tasks": tasks,
        **totals.as_dict(),
        "committedAt": time.time(),
    }
    log = logger.warning if metrics_name is None else logger.info
    log(
        "SQS sink %s: %d rows, sent %d, retried %d (throttled %d), failed attempts %d, "
        "dead-lettered %d, in %d calls by %d tasks",
        what,
        totals.rows,
        totals.sent,
        totals.retried,
        totals.throttled,
        totals.failed,
        totals.deadLettered,
        totals.calls,
        tasks,
    )
    location = target.options.metrics_location
    if location and metrics_name:
        try:
            os.makedirs(location, exist_ok=True)
            path = os.path.join(location, f"{metrics_name}.json")
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "w") as out:
                json.dump(summary, out, sort_keys=True)
            os.replace(tmp, path)
        except OSError as exc:
            # Counters are for people; losing one file must not fail a committed write.
            logger.warning("could not write the SQS sink metrics to %s: %s", location, exc)
    return summary


_CLIENTS: PerProcess[tuple[Connection, int], SqsClient] = PerProcess()


def _client(connection: Connection, in_flight: int) -> SqsClient:
    """One client per connection and pool size per process (Python workers are reused across
    tasks, and a client per task is slow); a pool connection per call in flight."""
    # Requests are built from rows checked by RowConverter (types, ranges, sizes): botocore's
    # validation of every entry again would only cost CPU on each call.
    return _CLIENTS.get_or_build(
        (connection, in_flight),
        lambda: make_client(
            connection, max_pool_connections=max(16, in_flight + 2), parameter_validation=False
        ),
    )
