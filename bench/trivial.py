"""A trivial Python streaming source: the floor of what any Python source costs per micro-batch.

Every ``latestOffset`` call announces one more batch of ``rows`` rows; ``read`` yields them as
one ``pyarrow.RecordBatch`` (the same path the SQS source uses). No I/O at all, so its per-batch
time is Spark's and PySpark's own cost of a Python source.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import LongType, StringType, StructField, StructType

SCHEMA = StructType([StructField("n", LongType()), StructField("body", StringType())])


class _Range(InputPartition):
    def __init__(self, start: int, rows: int) -> None:
        self.start = start
        self.rows = rows


class TrivialStreamReader(DataSourceStreamReader):
    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.batch = 0

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        self.batch += 1
        return {"batch": self.batch}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [_Range(start["batch"] * self.rows, self.rows * (end["batch"] - start["batch"]))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        numbers = list(range(partition.start, partition.start + partition.rows))
        yield pa.RecordBatch.from_arrays(
            [pa.array(numbers, pa.int64()), pa.array([f'{{"n": {n}}}' for n in numbers])],
            names=["n", "body"],
        )

    def commit(self, end: dict) -> None:
        pass


class TrivialDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_trivial"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> TrivialStreamReader:
        return TrivialStreamReader(int(self.options.get("rows", "10")))
