"""The sink's per-task SendMessageBatch engine: batching, retries, throttling, FIFO order."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import ANY, Stubber

from spark_sqs.errors import QueueNotFoundError
from spark_sqs.sink.errors import SinkSendError
from spark_sqs.sink.rows import Entry
from spark_sqs.sink.sending import Sender
from tests.fakes import FakeFifoSqs, stub_sqs_client

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/q"
FIFO_URL = URL + ".fifo"


def _client() -> Any:
    # No botocore retries: the engine's own retries are under test.
    return stub_sqs_client(attempts=1)


def _entries(n: int, size: int = 10, groups: int = 0) -> list[Entry]:
    return [
        Entry(
            position=i,
            body=f"m{i}",
            size=size,
            group_id=f"g{i % groups}" if groups else None,
            dedupe_id=f"d{i}" if groups else None,
        )
        for i in range(n)
    ]


def _ok(count: int) -> dict:
    return {
        "Successful": [
            {"Id": str(i), "MessageId": f"id{i}", "MD5OfMessageBody": "x"} for i in range(count)
        ],
        "Failed": [],
    }


def _sender(client: Any, **kwargs: Any) -> Sender:
    kwargs.setdefault("max_in_flight", 1)
    kwargs.setdefault("backoff_base", 0.001)
    kwargs.setdefault("fifo", False)
    return Sender(client, FIFO_URL if kwargs["fifo"] else URL, **kwargs)


def test_standard_entries_go_ten_per_call():
    client = _client()
    with Stubber(client) as stub:
        for count in (10, 10, 5):
            stub.add_response("send_message_batch", _ok(count), {"QueueUrl": URL, "Entries": ANY})
        counters = _sender(client).send(_entries(25))
        stub.assert_no_pending_responses()
    assert (counters.sent, counters.calls, counters.retried) == (25, 3, 0)


def test_a_call_carries_at_most_the_batch_byte_limit():
    client = _client()
    with Stubber(client) as stub:
        for count in (2, 2, 1):
            stub.add_response("send_message_batch", _ok(count))
        counters = _sender(client, max_batch_bytes=1000).send(_entries(5, size=400))
        stub.assert_no_pending_responses()
    assert counters.sent == 5 and counters.calls == 3


def test_failed_entries_are_retried_alone():
    client = _client()
    first = _ok(3)
    first["Successful"].pop(1)
    first["Failed"] = [{"Id": "1", "Code": "InternalError", "SenderFault": False}]
    with Stubber(client) as stub:
        stub.add_response("send_message_batch", first)
        retry = {
            "QueueUrl": URL,
            "Entries": [
                {
                    "Id": "0",
                    "MessageBody": "m1",
                }
            ],
        }
        stub.add_response("send_message_batch", _ok(1), retry)
        counters = _sender(client).send(_entries(3))
        stub.assert_no_pending_responses()
    assert (counters.sent, counters.retried, counters.failed) == (3, 1, 1)


def test_sender_fault_fails_the_task_naming_the_row():
    client = _client()
    response = _ok(2)
    response["Successful"].pop(1)
    response["Failed"] = [
        {"Id": "1", "Code": "InvalidMessageContents", "SenderFault": True, "Message": "bad"}
    ]
    with Stubber(client) as stub:
        stub.add_response("send_message_batch", response)
        with pytest.raises(SinkSendError, match=r"position 1 .*InvalidMessageContents"):
            _sender(client).send(_entries(2))


def test_throttling_is_absorbed_beyond_max_attempts():
    client = _client()
    with Stubber(client) as stub:
        for _ in range(3):
            stub.add_client_error(
                "send_message_batch", service_error_code="ThrottlingException", http_status_code=400
            )
        stub.add_response("send_message_batch", _ok(2))
        counters = _sender(client, max_attempts=2).send(_entries(2))
        stub.assert_no_pending_responses()
    assert counters.sent == 2 and counters.throttled == 6 and counters.retried == 6


def test_an_entry_failing_every_attempt_fails_the_task_retriably():
    client = _client()
    with Stubber(client) as stub:
        for _ in range(3):
            stub.add_client_error(
                "send_message_batch", service_error_code="InternalError", http_status_code=500
            )
        with pytest.raises(SinkSendError, match="after 3 attempts") as failure:
            _sender(client, max_attempts=3).send(_entries(1))
    assert failure.value.retriable


def test_a_missing_queue_fails_at_once():
    client = _client()
    with Stubber(client) as stub:
        stub.add_client_error(
            "send_message_batch",
            service_error_code="AWS.SimpleQueueService.NonExistentQueue",
            http_status_code=400,
        )
        with pytest.raises(QueueNotFoundError):
            _sender(client).send(_entries(3))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fifo_groups_stay_in_order_through_failures(seed):
    fake = FakeFifoSqs(fail_rate=0.2, seed=seed)
    entries = _entries(400, groups=7)
    counters = Sender(
        fake, FIFO_URL, fifo=True, max_in_flight=4, max_attempts=50, backoff_base=0.001
    ).send(entries)
    assert counters.sent == 400 and counters.retried > 0
    expected = {f"g{g}": [e.position for e in entries if e.group_id == f"g{g}"] for g in range(7)}
    assert fake.accepted == expected, "each group exactly once and in input order"
    assert fake.overlap == [], "a group never has two calls in flight"
    assert fake.max_concurrent > 1, "different groups are sent in parallel"


def test_fifo_requests_carry_group_and_deduplication_ids():
    client = _client()
    with Stubber(client) as stub:
        expected = {
            "QueueUrl": FIFO_URL,
            "Entries": [
                {
                    "Id": "0",
                    "MessageBody": "m0",
                    "MessageGroupId": "g0",
                    "MessageDeduplicationId": "d0",
                },
                {
                    "Id": "1",
                    "MessageBody": "m1",
                    "MessageGroupId": "g1",
                    "MessageDeduplicationId": "d1",
                },
            ],
        }
        stub.add_response("send_message_batch", _ok(2), expected)
        _sender(client, fifo=True).send(_entries(2, groups=2))
        stub.assert_no_pending_responses()


def test_fifo_look_ahead_finds_other_groups_behind_a_long_run_of_one():
    fake = FakeFifoSqs(fail_rate=0.0, seed=0)
    run = [Entry(position=i, body=f"m{i}", size=10, group_id="big") for i in range(100)]
    others = [
        Entry(position=100 + i, body=f"m{100 + i}", size=10, group_id=f"g{i}") for i in range(9)
    ]
    Sender(fake, FIFO_URL, fifo=True, max_in_flight=1).send(run + others)
    assert sorted(fake.calls[0]) == sorted(["big", *(f"g{i}" for i in range(9))])
    assert fake.accepted["big"] == list(range(100))
