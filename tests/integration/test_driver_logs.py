"""The source's log lines reach the driver's log: PySpark runs the source's driver-side calls in
a process of its own (``python_streaming_source_runner``) whose stderr Spark copies to the
driver's stderr. A driver program in a subprocess (its own JVM, so its stderr is what this test
reads) runs a query with ``logLevel``; the per-batch INFO line arrives, with time, level and
logger, and a DEBUG line only at DEBUG. Nothing in the driver program configures logging."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import send_numbered

pytestmark = pytest.mark.integration

DRIVER = """
import sys, time
import boto3
from devtools.spark import local_session
from spark_sqs.sqs.client import queue_counts

endpoint, queue_url, work, level = sys.argv[1:5]
spark = local_session("driver-logs", "local[2]")
query = (
    spark.readStream.format("sqs")
    .option("queueUrl", queue_url)
    .option("endpointUrl", endpoint)
    .option("journalLocation", f"{work}/journal")
    .option("logLevel", level)
    .load()
    .writeStream.format("noop")
    .option("checkpointLocation", f"{work}/checkpoint")
    .start()
)
query.processAllAvailable()
sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1")
# The batch's counters are logged when it is acknowledged: the driver deletes the last batch
# once the queue is idle.
deadline = time.monotonic() + 120
while queue_counts(sqs, queue_url) != (0, 0) and time.monotonic() < deadline:
    time.sleep(0.5)
query.stop()
spark.stop()
print("done")
"""


def _run_driver(moto_endpoint: str, queue_url: str, work: Path, level: str) -> str:
    script = work / "driver.py"
    script.write_text(textwrap.dedent(DRIVER))
    root = Path(__file__).resolve().parents[2]
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
    )
    result = subprocess.run(
        [sys.executable, str(script), moto_endpoint, queue_url, str(work), level],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=root,
    )
    assert result.returncode == 0 and "done" in result.stdout, result.stderr[-3000:]
    return result.stderr


def test_the_batch_line_reaches_the_driver_stderr_at_the_chosen_level(
    moto_endpoint, sqs, queue_url, tmp_path
):
    send_numbered(sqs, queue_url, 12)
    stderr = _run_driver(moto_endpoint, queue_url, tmp_path, "DEBUG")
    lines = [line for line in stderr.splitlines() if " spark_sqs." in line]
    batch = [line for line in lines if "INFO spark_sqs.driver.metrics: batch " in line]
    assert batch, stderr[-3000:]
    assert sum(int(line.split("received ")[1].split(",")[0]) for line in batch) == 12
    # Time, level and logger, as the handler formats them.
    assert batch[0][:4].isdigit() and batch[0][4] == "-", batch[0]
    assert any(" DEBUG spark_sqs." in line for line in lines), lines[:20]
