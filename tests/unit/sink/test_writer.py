"""A sink task in a Python worker: its client is the process's, and the worker's long-lived
objects are frozen once the client exists (executor/collection.py), as a receiver's are."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import ANY, Stubber
from pyspark.sql import Row

from spark_sqs.executor import collection
from spark_sqs.sink import writer
from spark_sqs.sink.options import SinkOptions
from spark_sqs.sink.rows import Layout
from tests.fakes import stub_sqs_client

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/q"


def _target() -> writer.WriteTarget:
    options = SinkOptions.parse({"queueUrl": URL, "region": "us-east-1"})
    return writer.WriteTarget(
        options=options,
        queue=writer.QueueInfo(url=URL, fifo=False, max_message_size=262144),
        layout=Layout(body=0),
    )


def test_a_write_task_freezes_the_worker_once_its_client_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []
    client = stub_sqs_client(attempts=1)

    def process_client(*_: Any) -> Any:
        events.append("client")
        return client

    monkeypatch.setattr(writer, "_client", process_client)
    monkeypatch.setattr(collection, "freeze_long_lived", lambda: events.append("freeze") or True)
    ok = {
        "Successful": [
            {"Id": str(i), "MessageId": f"m{i}", "MD5OfMessageBody": "x"} for i in range(3)
        ],
        "Failed": [],
    }
    with Stubber(client) as stub:
        for _ in range(2):
            stub.add_response("send_message_batch", ok, {"QueueUrl": URL, "Entries": ANY})
        for task in range(2):
            rows = iter([Row(body=f"b{task}-{i}") for i in range(3)])
            message = writer.write_partition(_target(), rows, "scope", task, "test")
            assert message.counters["sent"] == 3
        stub.assert_no_pending_responses()
    # Each task asks; collection.py decides which tasks of the process freeze.
    assert events == ["client", "freeze", "client", "freeze"]
