"""The data source and its stream reader. Runs on: driver (planning, acknowledgement) and
executors (``read``).

Spark runs ``initialOffset``, ``latestOffset``, ``partitions`` and ``commit`` on one long-lived
reader instance in a Python process on the driver; ``read`` runs on executors on pickled copies
of another instance. So the driver-side state below is created lazily on first use and is left
out of pickles, and everything a receiver needs travels in its ``ReceiverPartition``.

The protocol, per micro-batch N:

1. ``latestOffset(start)``: every batch up to ``start`` is in Spark's commit log, so their
   messages are deleted (cumulative, idempotent). If the queue has visible messages, the next
   batch number is recorded in the journal state and returned.
2. ``partitions(start, end)``: one receiver per partition; journaled receivers of a replayed
   batch are always included.
3. ``read`` on executors: replay the journal entry, or receive, journal, then yield.
4. ``commit(end)``: acknowledges too, but Spark calls it late or never (PLATFORM.md), so step 1
   is what guarantees progress.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from . import offsets
from .acknowledgement import Acknowledger, BatchCaller
from .client import make_client, queue_attributes, resolve_queue_url
from .errors import InvalidOptionError, SqsSourceError
from .heartbeat import Heartbeat
from .journal import Journal, JournalState
from .options import SqsOptions
from .planning import ReceiverPartition, plan
from .receiver import read_partition
from .schema import SCHEMA

logger = logging.getLogger(__name__)

_BACKLOG_ATTRIBUTES = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
]


class SqsDataSource(DataSource):
    """``spark.readStream.format("sqs")``: exactly-once streaming from an SQS queue."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)  # type: ignore[arg-type]
        # Parsed here so that a bad option fails load(), before any query starts.
        self.sqs_options = SqsOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return "sqs"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> SqsStreamReader:
        if schema != SCHEMA:
            raise InvalidOptionError(
                "The SQS source has a fixed schema and does not accept a user-specified one. "
                "Fix: remove .schema(...) from spark.readStream and parse 'body' with "
                "from_json() or similar instead"
            )
        return SqsStreamReader(self.sqs_options)


class SqsStreamReader(DataSourceStreamReader):
    def __init__(self, options: SqsOptions) -> None:
        self.options = options
        self._driver: _DriverState | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the options only; clients, threads and locks stay on the driver.
        return {"options": self.options, "_driver": None}

    def _state(self) -> _DriverState:
        if self._driver is None:
            self._driver = _DriverState.start(self.options)
        return self._driver

    # -- driver ---------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        return offsets.make(self._state().fresh_start())

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        return self._state().latest_offset(start)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return list(self._state().plan(start, end))

    def commit(self, end: dict) -> None:
        self._state().acknowledge(offsets.batch_of(end))

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()

    # -- executors ------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ReceiverPartition)
        return read_partition(partition)


class _DriverState:
    """Everything the driver-side reader keeps between calls."""

    def __init__(self, options: SqsOptions, client: Any, queue_url: str, journal: Journal) -> None:
        self.options = options
        self.client = client
        self.queue_url = queue_url
        self.journal = journal
        self.journal_state = journal.read_state()
        self.lock = threading.Lock()
        caller = BatchCaller(client, queue_url)
        self.heartbeat = Heartbeat(
            journal,
            caller,
            visibility_timeout=options.visibility_timeout,
            interval=options.heartbeat_interval,
        )
        self.acknowledger = Acknowledger(
            journal,
            caller,
            delete=options.delete_on_commit,
            on_acked=self._record_acked,
            visibility_timeout=options.visibility_timeout,
            dedupe_window=options.dedupe_window,
            heartbeat=self.heartbeat,
        )
        self.acknowledger.start(self.journal_state.acked_batch, journal.batches())
        self.heartbeat.start()
        self._initial_called = False
        self._planned_this_run = False
        self._last_poll = float("-inf")
        self._poll_due = True
        self._visible = 0
        self.backlog: dict[str, int] = {}

    @classmethod
    def start(cls, options: SqsOptions) -> _DriverState:
        """Connect and check everything a person might have to fix, at query start."""
        client = make_client(options, max_pool_connections=32)
        queue_url = resolve_queue_url(client, options)
        # Proves the queue exists and the credentials may read it before any batch runs.
        queue_attributes(client, queue_url, ["QueueArn"])
        journal = Journal(options.journal_location, options)
        journal.probe_writable()
        journal.check_owner(queue_url)
        state = cls(options, client, queue_url, journal)
        logger.info(
            "SQS source started on %s: journal %s, planned batch %d, acknowledged batch %d, "
            "%d batches awaiting acknowledgement",
            queue_url,
            options.journal_location,
            state.journal_state.planned_batch,
            state.journal_state.acked_batch,
            len(state.acknowledger.pending),
        )
        return state

    def close(self) -> None:
        self.heartbeat.stop()

    # -- offsets --------------------------------------------------------------------------------

    def fresh_start(self) -> int:
        """The initial offset: only asked for a new checkpoint, or when Spark restarts a query
        whose first batch never committed (and then replays it from this offset)."""
        with self.lock:
            self._initial_called = True
            if self.journal_state.initial_batch is None:
                self._write_state(initial=self.journal_state.planned_batch)
            assert self.journal_state.initial_batch is not None
            return self.journal_state.initial_batch

    def latest_offset(self, start: Mapping[str, Any] | None) -> dict:
        with self.lock:
            planned = self.journal_state.planned_batch
            # Spark calls latestOffset only once every batch it planned is committed; Spark
            # 4.0/4.1 pass no start, and then every batch we planned is that batch.
            committed = offsets.batch_of(start) if start is not None else planned
            orphans = self._orphans(start, committed)
            if orphans:
                # Adopted before acknowledging: on Spark 4.0/4.1 `committed` covers them too.
                new_batch = max(planned, committed) + 1
                self._adopt(orphans, new_batch)
                self._write_state(planned=new_batch)
                self._acknowledge(committed)
                return offsets.make(new_batch)
            self._acknowledge(committed)
            current = offsets.make(committed if start is not None else planned)
            if not self._queue_has_messages():
                return current
            new_batch = max(planned, committed) + 1
            self._write_state(planned=new_batch)
            return offsets.make(new_batch)

    def _orphans(self, start: Mapping[str, Any] | None, committed: int) -> list[int]:
        """Journaled batches that Spark's offset log does not know: they were planned for
        another checkpoint (the journal outlived it) or never logged. Spark replays every
        logged, uncommitted batch before it asks for the latest offset, so at this point any
        pending batch beyond ``start`` is one. Their messages never reached this query's sink."""
        if self._planned_this_run:
            return []
        if start is not None:
            return [b for b in self.acknowledger.pending if b > committed]
        # Spark 4.0/4.1: no start. Only a new checkpoint (initialOffset asked, nothing
        # replayed) can leave pending batches that Spark never committed.
        return self.acknowledger.pending if self._initial_called else []

    def _adopt(self, orphans: list[int], batch: int) -> None:
        """Deliver the orphans' journaled messages in ``batch``: they were received and
        journaled (some maybe already deleted from SQS), but never committed by this query."""
        receiver = max(self.options.num_partitions, 10000)
        for orphan in orphans:
            adopted = self.journal.adopt(orphan, batch, receiver)
            receiver += adopted
            self.acknowledger.forget(orphan)
            logger.warning(
                "batch %d: %d journal entries of batch %d, which this checkpoint never "
                "committed, are delivered in batch %d",
                orphan,
                adopted,
                orphan,
                batch,
            )
        self.acknowledger.track(batch)

    def plan(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> list[ReceiverPartition]:
        with self.lock:
            batch = offsets.batch_of(end)
            if batch <= offsets.batch_of(start):
                return []
            if batch > self.journal_state.planned_batch:
                self._write_state(planned=batch)
            self._planned_this_run = True
            journaled = self.journal.receivers(batch)
            self.acknowledger.track(batch)
            drop_ids = self.acknowledger.drop_ids(batch)
            # The queue is asked again after every batch, rather than after queuePollInterval.
            self._poll_due = True
            parts = plan(
                batch,
                self.options.max_messages_per_trigger,
                self.queue_url,
                self.options,
                journaled,
                drop_ids,
            )
            logger.info(
                "batch %d: %d receivers (%d replaying from the journal), %d ids to drop",
                batch,
                len(parts),
                len(journaled),
                len(drop_ids),
            )
            return parts

    def acknowledge(self, batch: int) -> None:
        with self.lock:
            self._acknowledge(batch)

    # -- internals ------------------------------------------------------------------------------

    def _acknowledge(self, batch: int) -> None:
        # Transient failures are retried inside; what escapes (access denied, queue deleted,
        # journal unreadable) needs a person, and stopping beats redelivering everything.
        self.acknowledger.acknowledge_through(batch)

    def _record_acked(self, batch: int) -> None:
        self._write_state(acked=batch)

    def _write_state(
        self, *, planned: int | None = None, acked: int | None = None, initial: int | None = None
    ) -> None:
        state = JournalState(
            planned_batch=self.journal_state.planned_batch if planned is None else planned,
            acked_batch=self.journal_state.acked_batch if acked is None else acked,
            initial_batch=self.journal_state.initial_batch if initial is None else initial,
        )
        self.journal.write_state(state)
        self.journal_state = state

    def _queue_has_messages(self) -> bool:
        now = time.monotonic()
        if self._poll_due or now - self._last_poll >= self.options.queue_poll_interval:
            self._last_poll = now
            self._poll_due = False
            try:
                attrs = queue_attributes(self.client, self.queue_url, _BACKLOG_ATTRIBUTES)
            except SqsSourceError as exc:
                if not exc.retriable:
                    raise
                logger.warning("checking the queue for messages failed, will retry: %s", exc)
                return False
            self.backlog = {k: int(v) for k, v in attrs.items()}
            self._visible = self.backlog.get("ApproximateNumberOfMessages", 0)
        return self._visible > 0
