"""The source works from a Spark Connect client: registered and streamed through
``SparkSession.builder.remote("local[2]")`` (a local Spark Connect server; Databricks serverless
and standard-access clusters use Spark Connect too, but were not tested), and
``spark_sqs.observe_lag`` puts rows and lag in the progress the client reads."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("grpc") is None, reason="needs the pyspark[connect] extra"
    ),
]

CLIENT = """
import json, sys
import boto3
from pyspark.sql import SparkSession
from spark_sqs import SqsDataSource, observe_lag, observed_lag

endpoint, queue_url, work = sys.argv[1:4]
spark = SparkSession.builder.remote("local[2]").getOrCreate()
assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
spark.dataSource.register(SqsDataSource)
query = (
    observe_lag(
        spark.readStream.format("sqs")
        .option("queueUrl", queue_url)
        .option("endpointUrl", endpoint)
        .option("journalLocation", f"{work}/journal")
        .load()
    )
    .writeStream.format("parquet")
    .option("path", f"{work}/out")
    .option("checkpointLocation", f"{work}/checkpoint")
    .start()
)
query.processAllAvailable()
print("observed", json.dumps([observed_lag(p) for p in query.recentProgress]))
query.stop()
bodies = [json.loads(r.body)["n"] for r in spark.read.parquet(f"{work}/out").collect()]
print("numbers", sorted(bodies))
spark.stop()
"""


def test_streaming_from_a_spark_connect_client(moto_endpoint, sqs, queue_url, tmp_path: Path):
    from spark_sqs.sqs.client import queue_counts
    from tests.helpers import send_numbered

    send_numbered(sqs, queue_url, 30)
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent(CLIENT))
    result = subprocess.run(
        [sys.executable, str(script), moto_endpoint, queue_url, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"numbers {list(range(30))}" in result.stdout
    line = next(x for x in result.stdout.splitlines() if x.startswith("observed "))
    observed = [m for m in json.loads(line.split(" ", 1)[1]) if m and m["rows"]]
    assert sum(m["rows"] for m in observed) == 30, observed
    assert all(0 <= m["medianMessageAgeMs"] <= m["oldestMessageAgeMs"] for m in observed)
    assert queue_counts(sqs, queue_url) == (0, 0)
