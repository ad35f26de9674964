"""Shared fixtures: one moto server and one SparkSession per test session, a queue per test."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

# Executors are Python worker processes started by the JVM: they inherit this environment, so it
# must be complete before the SparkSession starts.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("AWS_PROFILE", None)
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

REGION = "us-east-1"


@pytest.fixture(autouse=True)
def fresh_duplicate_window() -> Iterator[None]:
    """Receivers run in this process in unit tests: each test starts with workers that have
    read no duplicate window yet (tests reuse journal locations and message ids)."""
    from spark_sqs.executor import duplicates

    duplicates.forget_all()
    yield


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    from devtools.local_sqs import MotoServer

    server = MotoServer()
    yield server.endpoint
    server.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from devtools.spark import local_session

    session = local_session(
        "spark-sqs-tests",
        "local[2,3]",
        {
            "spark.sql.streaming.stopTimeout": "30s",
            # Idle queries report progress every second, so tests can watch them idle.
            "spark.sql.streaming.noDataProgressEventInterval": "1s",
        },
    )
    yield session
    session.stop()


@pytest.fixture
def mocked_sqs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An SQS client on moto's in-process ``mock_aws`` (no server: driver-side code only),
    with test credentials in the environment for clients the code under test creates."""
    import boto3
    from moto import mock_aws

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        yield boto3.client("sqs", region_name=REGION)


@pytest.fixture
def sqs(moto_endpoint: str) -> Any:
    import boto3

    return boto3.client("sqs", region_name=REGION, endpoint_url=moto_endpoint)


@pytest.fixture
def s3(moto_endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", region_name=REGION, endpoint_url=moto_endpoint)


@pytest.fixture(params=["local", "s3"])
def journal_location(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A fresh journal location, once on local files and once on moto's S3 server: every
    protocol rule is tested on both stores."""
    if request.param == "local":
        return str(tmp_path / "journal")
    endpoint = request.getfixturevalue("moto_endpoint")
    s3 = request.getfixturevalue("s3")
    try:
        s3.create_bucket(Bucket="journals")
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    host = endpoint.split("://", 1)[1]
    return f"s3://journals/{uuid.uuid4().hex}?endpoint_override={host}&scheme=http"


@pytest.fixture
def queue_url(sqs: Any) -> Iterator[str]:
    from tests.helpers import temporary_queue

    yield from temporary_queue(sqs)


@pytest.fixture
def fifo_queue_url(sqs: Any) -> Iterator[str]:
    from tests.helpers import temporary_queue

    yield from temporary_queue(sqs, ".fifo", FifoQueue="true", ContentBasedDeduplication="true")


@pytest.fixture
def source(request: pytest.FixtureRequest, spark: Any, moto_endpoint: str, tmp_path: Any) -> Any:
    """``source(**options)``: ``spark.readStream.format("sqs")`` on the test server and this
    test's queue (``queue_url`` unless ``queue`` is given), journaled in ``tmp_path/journal``
    unless ``journal`` is given."""
    from tests.helpers import sqs_stream

    def stream(*, queue: str | None = None, journal: Any = None, **options: Any) -> Any:
        url = queue if queue is not None else request.getfixturevalue("queue_url")
        location = str(journal if journal is not None else tmp_path / "journal")
        return sqs_stream(spark, moto_endpoint, url, location, **options)

    return stream


@pytest.fixture
def deliver(spark: Any, moto_endpoint: str, sqs: Any, queue_url: str, tmp_path: Any) -> Any:
    """``deliver(**options)``: run the source on this test's queue into a memory sink until
    the queue is empty (and ``until()`` holds); the rows it delivered."""
    from tests.helpers import drain_and_stop, sqs_stream, start_query

    def run(until: Any = None, **options: Any) -> list:
        name = f"delivered_{uuid.uuid4().hex}"
        df = sqs_stream(spark, moto_endpoint, queue_url, str(tmp_path / "journal"), **options)
        query = start_query(df, "memory", tmp_path / "ckpt", queryName=name)
        drain_and_stop(query, sqs, queue_url, timeout=240, until=until)
        return spark.table(name).collect()

    return run
