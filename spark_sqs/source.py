"""The data source and its stream reader: the entry points Spark calls. Runs on: driver
(``initialOffset``, ``latestOffset``, ``partitions``, ``commit``) and executors (``read``).

Spark runs the driver calls on one long-lived reader instance in a Python process on the driver;
``read`` runs on executors on pickled copies of another instance. So the reader is thin: its
driver calls go to a ``spark_sqs.driver.coordinator.Coordinator``, created lazily on first use and
left out of pickles, and ``read`` goes to ``spark_sqs.executor.receiver.read_partition``; everything
a receiver needs travels in its ``ReceiverPartition`` (``spark_sqs.driver.planning``).

The protocol, per micro-batch N (docs/design.md has the whole story):

1. ``latestOffset(start)`` (``driver/coordinator.py``): every batch up to ``start`` is in Spark's
   commit log, so their messages are acknowledged (``acknowledgement/``, cumulative,
   idempotent). If the queue has visible messages (``driver/queues.py``) and flow control allows
   a batch (``driver/flow_control.py``), or journaled batches unknown to Spark wait to be
   delivered, the next batch number is recorded in the journal state and returned
   (``driver/offsets.py``).
2. ``partitions(start, end)`` (``driver/planning.py``): one receiver per partition; journaled
   receivers of a replayed batch are always included, and batches unknown to Spark's offset log
   are adopted into it.
3. ``read`` on executors (``executor/receiver.py``): replay the journal entry, or receive,
   journal, then yield; and delete the committed entries assigned to the receiver
   (``acknowledgement/assigned.py``).
4. ``commit(end)``: acknowledges too, but Spark calls it late or never (docs/design.md, "Facts
   the design rests on"), so step 1 is what guarantees progress. Meanwhile
   ``driver/heartbeat.py`` keeps unacknowledged messages invisible.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from . import _compat

# First: fails with the fix when PySpark or its streaming Python Data Source API is missing,
# before the imports below fail on it with a bare ImportError.
_compat.require_streaming_data_source_api()

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from .driver.coordinator import Coordinator
from .driver.flow_control import ReadLimit, default_read_limit
from .driver.planning import ReceiverPartition
from .errors import InvalidOptionError
from .executor.receiver import read_partition
from .logs import route_to_stderr
from .options import SqsOptions
from .schema import spark_schema


class SqsDataSource(DataSource):
    """``spark.readStream.format("sqs")``: exactly-once streaming from an SQS queue."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)  # type: ignore[arg-type]
        # Parsed on first use: the same class serves df.write/writeStream.format("sqs"), whose
        # options are the sink's (spark_sqs.sink.options).
        self._sqs_options: SqsOptions | None = None

    @property
    def sqs_options(self) -> SqsOptions:
        if self._sqs_options is None:
            self._sqs_options = SqsOptions.parse(self.options)
        return self._sqs_options

    @classmethod
    def name(cls) -> str:
        return "sqs"

    def schema(self) -> StructType:
        # Spark asks for the schema at load() (never for a write): a bad option fails there,
        # before any query starts. messageFormat=sns adds the SNS columns.
        return spark_schema(self.sqs_options.sns)

    def streamReader(self, schema: StructType) -> SqsStreamReader:
        if schema != spark_schema(self.sqs_options.sns):
            raise InvalidOptionError(
                "The SQS source has a fixed schema and does not accept a user-specified one. "
                "Fix: remove .schema(...) from spark.readStream and parse 'body' with "
                "from_json() or similar instead"
            )
        return SqsStreamReader(self.sqs_options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """``df.write.format("sqs")``: see docs/sink.md."""
        from .sink.writer import SqsBatchWriter

        return SqsBatchWriter.create(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """``df.writeStream.format("sqs")``: see docs/sink.md."""
        from .sink.writer import SqsStreamWriter

        return SqsStreamWriter.create(self.options, schema)


try:  # Spark 4.2+
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    _READER_BASES: tuple[type, ...] = (DataSourceStreamReader, SupportsTriggerAvailableNow)
except ImportError:  # Spark 4.0/4.1
    _READER_BASES = (DataSourceStreamReader,)


class SqsStreamReader(*_READER_BASES):  # type: ignore[misc]
    def __init__(self, options: SqsOptions) -> None:
        self.options = options
        self._driver: Coordinator | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the options only; clients, threads and locks stay on the driver.
        return {"options": self.options, "_driver": None}

    def _state(self) -> Coordinator:
        if self._driver is None:
            route_to_stderr(self.options.log_level)
            self._driver = Coordinator.start(self.options)
        return self._driver

    # -- driver ---------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        return self._state().initial_offset()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        return self._state().latest_offset(start, limit)

    def getDefaultReadLimit(self) -> ReadLimit | None:
        return default_read_limit(self.options)

    def prepareForTriggerAvailableNow(self) -> None:
        self._state().prepare_available_now()

    def reportLatestOffset(self) -> dict | None:
        return self._state().report()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return list(self._state().plan(start, end))

    def commit(self, end: dict) -> None:
        self._state().commit(end)

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()

    # -- executors ------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReceiverPartition)
        return read_partition(partition)
