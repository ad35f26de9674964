"""The simulated SQS and clock: one test per modelled semantic, each failing when it breaks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from sim import Fault, FaultRates, SimClock, SimSqs
from sim.sqs import (
    ATTEMPT_ID_SECONDS,
    DEDUP_SECONDS,
    MAX_VISIBILITY_SECONDS,
    MESSAGE_NOT_INFLIGHT,
    NON_EXISTENT_QUEUE,
    SimSqsClient,
    md5_of_message_attributes,
)
from spark_sqs.errors import TransientSqsError
from spark_sqs.sqs.batching import PERMANENT_ENTRY_CODES
from spark_sqs.sqs.client import classify


def make(fifo: bool = False, seed: int = 0, content_dedup: bool = True, **kwargs: Any):
    sim = SimSqs(seed, **kwargs)
    attributes = {"VisibilityTimeout": "30"}
    if fifo:
        attributes.update(
            FifoQueue="true", ContentBasedDeduplication="true" if content_dedup else "false"
        )
    url = sim.create_queue(QueueName="q.fifo" if fifo else "q", Attributes=attributes)["QueueUrl"]
    return sim, url


def send(sim: SimSqs, url: str, *bodies: str, group: str | None = None) -> list[str]:
    ids = []
    for body in bodies:
        extra = {"MessageGroupId": group} if group else {}
        ids.append(sim.send_message(QueueUrl=url, MessageBody=body, **extra)["MessageId"])
    return ids


def receive(sim: SimSqs, url: str, n: int = 10, vt: int = 30, **extra: Any) -> list[dict]:
    return sim.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=n,
        VisibilityTimeout=vt,
        MessageSystemAttributeNames=["All"],
        **extra,
    ).get("Messages", [])


def code(call) -> str:  # type: ignore[no-untyped-def]
    try:
        call()
    except ClientError as exc:
        return exc.response["Error"]["Code"]
    return "ok"


def counts(sim: SimSqs, url: str) -> tuple[int, int, int]:
    a = sim.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return (
        int(a["ApproximateNumberOfMessages"]),
        int(a["ApproximateNumberOfMessagesNotVisible"]),
        int(a["ApproximateNumberOfMessagesDelayed"]),
    )


# --- clock ----------------------------------------------------------------------------------


def test_clock_moves_only_when_told_and_both_times_together() -> None:
    clock = SimClock(wall_start=1000.0, monotonic_start=5.0)
    assert (clock.time(), clock.monotonic()) == (1000.0, 5.0)
    clock.advance(1.5)
    clock.sleep(2)
    assert (clock.time(), clock.monotonic(), clock.elapsed) == (1003.5, 8.5, 3.5)
    assert clock.time_millis() == 1_003_500
    with pytest.raises(ValueError):
        clock.advance(-1)
    seen: list[float] = []
    clock.on_advance(seen.append)
    clock.advance_to(10)
    clock.advance_to(4)  # already past: no-op
    assert seen == [10.0]


# --- shapes ---------------------------------------------------------------------------------


def test_receive_has_the_boto3_shape() -> None:
    sim, url = make(fifo=True)
    attrs = {"kind": {"DataType": "String", "StringValue": "x"}}
    sent = sim.send_message(
        QueueUrl=url, MessageBody="hello", MessageGroupId="g", MessageAttributes=attrs
    )
    assert set(sent) == {
        "MessageId",
        "MD5OfMessageBody",
        "MD5OfMessageAttributes",
        "SequenceNumber",
        "ResponseMetadata",
    }
    response = sim.receive_message(
        QueueUrl=url, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"]
    )
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    (m,) = response["Messages"]
    assert m["Body"] == "hello" and m["MD5OfBody"] == "5d41402abc4b2a76b9719d911017c592"
    assert m["MessageAttributes"] == attrs
    assert m["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert set(m["Attributes"]) == {
        "SenderId",
        "SentTimestamp",
        "ApproximateReceiveCount",
        "ApproximateFirstReceiveTimestamp",
        "MessageGroupId",
        "MessageDeduplicationId",
        "SequenceNumber",
    }
    assert "Messages" not in sim.receive_message(QueueUrl=url)


def test_md5_of_message_attributes_matches_the_sqs_algorithm() -> None:
    # The value SQS (and moto, and LocalStack: see the conformance test) computes.
    attrs = {
        "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
        "a": {"DataType": "String", "StringValue": "x"},
        "n": {"DataType": "Number", "StringValue": "1"},
    }
    assert md5_of_message_attributes(attrs) == "53974f559c6c7cf8c4df221b4b58d31a"


# --- visibility -----------------------------------------------------------------------------


def test_a_received_message_is_invisible_for_its_visibility_timeout() -> None:
    sim, url = make()
    send(sim, url, "m")
    assert len(receive(sim, url, vt=10)) == 1
    assert counts(sim, url) == (0, 1, 0)
    sim.clock.advance(9.9)
    assert receive(sim, url) == []
    sim.clock.advance(0.1)
    assert counts(sim, url) == (1, 0, 0)
    again = receive(sim, url)
    assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"


def test_the_queue_default_visibility_timeout_applies_without_one() -> None:
    sim, url = make()
    send(sim, url, "m")
    sim.receive_message(QueueUrl=url)
    sim.clock.advance(29)
    assert sim.receive_message(QueueUrl=url).get("Messages") is None
    sim.clock.advance(1)
    assert len(sim.receive_message(QueueUrl=url)["Messages"]) == 1


def test_each_receive_issues_a_new_receipt_handle() -> None:
    sim, url = make()
    send(sim, url, "m")
    handles = []
    for _ in range(3):
        handles.append(receive(sim, url, vt=1)[0]["ReceiptHandle"])
        sim.clock.advance(1)
    assert len(set(handles)) == 3


def test_delay_seconds_hold_a_message_back_and_count_as_delayed() -> None:
    sim, url = make()
    sim.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=5)
    assert counts(sim, url) == (0, 0, 1)
    assert receive(sim, url) == []
    sim.clock.advance(5)
    assert counts(sim, url) == (1, 0, 0)


# --- delete ---------------------------------------------------------------------------------


def test_standard_delete_with_a_stale_handle_succeeds_without_deleting() -> None:
    sim, url = make()
    (mid,) = send(sim, url, "m")
    old = receive(sim, url, vt=1)[0]["ReceiptHandle"]
    sim.clock.advance(1)
    new = receive(sim, url)[0]["ReceiptHandle"]
    sim.delete_message(QueueUrl=url, ReceiptHandle=old)
    assert sim.state(url, mid) == "in_flight"
    assert [m for _, m in sim.stale_deletes(url)] == [mid]
    sim.delete_message(QueueUrl=url, ReceiptHandle=new)
    assert sim.state(url, mid) == "deleted"
    assert [(d.message_id, d.by) for d in sim.deletions(url)] == [(mid, "delete")]


def test_standard_delete_with_the_newest_handle_works_after_its_timeout() -> None:
    sim, url = make()
    (mid,) = send(sim, url, "m")
    handle = receive(sim, url, vt=1)[0]["ReceiptHandle"]
    sim.clock.advance(5)
    sim.delete_message(QueueUrl=url, ReceiptHandle=handle)
    assert sim.state(url, mid) == "deleted"
    # Deleting again is fine on a standard queue.
    sim.delete_message(QueueUrl=url, ReceiptHandle=handle)


def test_a_delete_with_a_lapsed_handle_keeps_the_message_when_the_queue_is_told_to() -> None:
    """``lapsed_delete_keeps`` (the unkind world's ``lapses``): a delete with the newest handle
    "succeeds" within its timeout and deletes; after the timeout lapsed it "succeeds" and keeps
    the message, as when another receive took it meanwhile."""
    sim, url = make(lapsed_delete_keeps=True)
    first, second = send(sim, url, "a", "b")
    handles = {m["MessageId"]: m["ReceiptHandle"] for m in receive(sim, url, vt=5)}
    sim.clock.advance(4)
    sim.delete_message(QueueUrl=url, ReceiptHandle=handles[first])
    assert sim.state(url, first) == "deleted"
    sim.clock.advance(2)
    sim.delete_message(QueueUrl=url, ReceiptHandle=handles[second])
    assert sim.state(url, second) == "visible"
    assert [m for _, m in sim.stale_deletes(url)] == [second]
    assert [m["MessageId"] for m in receive(sim, url)] == [second]


def test_fifo_delete_with_a_superseded_handle_fails() -> None:
    sim, url = make(fifo=True)
    (mid,) = send(sim, url, "m", group="g")
    old = receive(sim, url, vt=1)[0]["ReceiptHandle"]
    sim.clock.advance(1)
    receive(sim, url)
    assert (
        code(lambda: sim.delete_message(QueueUrl=url, ReceiptHandle=old)) == "InvalidParameterValue"
    )
    batch = sim.delete_message_batch(QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": old}])
    assert batch["Successful"] == []
    assert batch["Failed"][0]["Code"] == "InvalidParameterValue"
    assert batch["Failed"][0]["SenderFault"] is True
    assert sim.state(url, mid) == "in_flight"


def test_fifo_delete_with_an_expired_handle_fails_and_a_retry_in_time_succeeds() -> None:
    sim, url = make(fifo=True)
    (mid,) = send(sim, url, "m", group="g")
    handle = receive(sim, url, vt=10)[0]["ReceiptHandle"]
    sim.delete_message(QueueUrl=url, ReceiptHandle=handle)
    sim.clock.advance(5)
    sim.delete_message(QueueUrl=url, ReceiptHandle=handle)  # a retry while the handle lives
    sim.clock.advance(5)
    assert (
        code(lambda: sim.delete_message(QueueUrl=url, ReceiptHandle=handle))
        == "InvalidParameterValue"
    )
    (mid2,) = send(sim, url, "n", group="g")
    handle2 = receive(sim, url, vt=1)[0]["ReceiptHandle"]
    sim.clock.advance(1)
    assert (
        code(lambda: sim.delete_message(QueueUrl=url, ReceiptHandle=handle2))
        == "InvalidParameterValue"
    )
    assert sim.state(url, mid2) == "visible"
    assert sim.state(url, mid) == "deleted"


def test_a_handle_never_issued_is_invalid() -> None:
    sim, url = make()
    assert (
        code(lambda: sim.delete_message(QueueUrl=url, ReceiptHandle="nope"))
        == "ReceiptHandleIsInvalid"
    )
    failed = sim.delete_message_batch(QueueUrl=url, Entries=[{"Id": "x", "ReceiptHandle": "nope"}])[
        "Failed"
    ]
    assert failed == [
        {
            "Id": "x",
            "SenderFault": True,
            "Code": "ReceiptHandleIsInvalid",
            "Message": "The input receipt handle is not a valid receipt handle.",
        }
    ]
    assert all(f["Code"] in PERMANENT_ENTRY_CODES for f in failed)


def test_a_handle_of_another_queue_is_invalid() -> None:
    sim, url = make()
    other = sim.create_queue(QueueName="other")["QueueUrl"]
    send(sim, url, "m")
    handle = receive(sim, url)[0]["ReceiptHandle"]
    assert (
        code(lambda: sim.delete_message(QueueUrl=other, ReceiptHandle=handle))
        == "ReceiptHandleIsInvalid"
    )


# --- change visibility ----------------------------------------------------------------------


def test_change_visibility_extends_and_zero_releases() -> None:
    sim, url = make()
    (mid,) = send(sim, url, "m")
    handle = receive(sim, url, vt=10)[0]["ReceiptHandle"]
    sim.clock.advance(8)
    sim.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=10)
    sim.clock.advance(9)
    assert sim.state(url, mid) == "in_flight"
    sim.change_message_visibility_batch(
        QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": handle, "VisibilityTimeout": 0}]
    )
    assert sim.state(url, mid) == "visible"


def test_change_visibility_with_a_stale_handle_fails() -> None:
    sim, url = make()
    send(sim, url, "m")
    old = receive(sim, url, vt=1)[0]["ReceiptHandle"]
    sim.clock.advance(1)
    receive(sim, url)

    def call() -> Any:
        return sim.change_message_visibility(QueueUrl=url, ReceiptHandle=old, VisibilityTimeout=5)

    assert code(call) == "InvalidParameterValue"
    failed = sim.change_message_visibility_batch(
        QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": old, "VisibilityTimeout": 5}]
    )["Failed"]
    assert failed[0]["Code"] == "InvalidParameterValue" and failed[0]["SenderFault"]


def test_change_visibility_of_a_message_not_in_flight_fails() -> None:
    sim, url = make()
    send(sim, url, "m")
    handle = receive(sim, url, vt=1)[0]["ReceiptHandle"]
    sim.clock.advance(1)
    err = code(
        lambda: sim.change_message_visibility(
            QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=5
        )
    )
    assert err == MESSAGE_NOT_INFLIGHT
    assert err in PERMANENT_ENTRY_CODES


def test_change_visibility_of_a_deleted_message_fails() -> None:
    sim, url = make()
    send(sim, url, "m")
    handle = receive(sim, url)[0]["ReceiptHandle"]
    sim.delete_message(QueueUrl=url, ReceiptHandle=handle)
    assert (
        code(
            lambda: sim.change_message_visibility(
                QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=5
            )
        )
        == "InvalidParameterValue"
    )


def test_invisibility_is_capped_at_twelve_hours_from_the_receive() -> None:
    sim, url = make()
    (mid,) = send(sim, url, "m")
    handle = receive(sim, url, vt=MAX_VISIBILITY_SECONDS)[0]["ReceiptHandle"]
    sim.clock.advance(MAX_VISIBILITY_SECONDS - 100)

    def change(timeout: int) -> str:
        return code(
            lambda: sim.change_message_visibility(
                QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=timeout
            )
        )

    assert change(100) == "ok"
    assert change(101) == "InvalidParameterValue"
    sim.clock.advance(100)
    assert sim.state(url, mid) == "visible"
    # A new receive starts a new 12 hours.
    handle = receive(sim, url, vt=MAX_VISIBILITY_SECONDS)[0]["ReceiptHandle"]
    assert change(MAX_VISIBILITY_SECONDS) == "ok"


def test_out_of_range_parameters_are_rejected() -> None:
    sim, url = make()
    assert code(lambda: receive(sim, url, n=11)) == "InvalidParameterValue"
    assert code(lambda: receive(sim, url, n=0)) == "InvalidParameterValue"
    assert code(lambda: receive(sim, url, vt=MAX_VISIBILITY_SECONDS + 1)) == "InvalidParameterValue"
    assert (
        code(lambda: sim.receive_message(QueueUrl=url, WaitTimeSeconds=21))
        == "InvalidParameterValue"
    )


# --- batches --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        (
            [{"Id": str(i), "ReceiptHandle": "h"} for i in range(11)],
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        ),
        (
            [{"Id": "a", "ReceiptHandle": "h"}] * 2,
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        ),
        ([{"Id": "a b", "ReceiptHandle": "h"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
    ],
)
def test_batch_requests_are_validated(entries: list, expected: str) -> None:
    sim, url = make()
    assert code(lambda: sim.delete_message_batch(QueueUrl=url, Entries=entries)) == expected


def test_a_batch_mixes_successful_and_failed_entries() -> None:
    sim, url = make()
    send(sim, url, "m1", "m2")
    good = [m["ReceiptHandle"] for m in receive(sim, url)]
    response = sim.delete_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "0", "ReceiptHandle": good[0]},
            {"Id": "1", "ReceiptHandle": "bad"},
            {"Id": "2", "ReceiptHandle": good[1]},
        ],
    )
    assert [s["Id"] for s in response["Successful"]] == ["0", "2"]
    assert [f["Id"] for f in response["Failed"]] == ["1"]
    assert counts(sim, url) == (0, 0, 0)


def test_send_batch_reports_a_bad_entry_and_sends_the_rest() -> None:
    sim, url = make(fifo=True)
    response = sim.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "MessageBody": "x", "MessageGroupId": "g"},
            {"Id": "b", "MessageBody": "y"},
        ],
    )
    assert [s["Id"] for s in response["Successful"]] == ["a"]
    assert response["Failed"][0]["Code"] == "MissingParameter"
    assert len(sim.messages(url)) == 1


# --- FIFO -----------------------------------------------------------------------------------


def test_fifo_groups_lock_while_a_message_is_in_flight_and_keep_send_order() -> None:
    sim, url = make(fifo=True)
    send(sim, url, "a1", "a2", group="A")
    send(sim, url, "b1", group="B")
    send(sim, url, "a3", group="A")
    first = receive(sim, url, n=1, vt=5)
    assert [m["Body"] for m in first] == ["a1"]
    assert [m["Body"] for m in receive(sim, url, vt=5)] == ["b1"]
    assert receive(sim, url) == []
    sim.clock.advance(5)  # both time out: redelivered in order, a1 first
    assert [m["Body"] for m in receive(sim, url, n=2)] == ["a1", "a2"]
    bodies = [m["Body"] for m in receive(sim, url)]
    assert bodies == ["b1"]


def test_a_fifo_group_stays_locked_while_any_of_its_messages_is_in_flight() -> None:
    sim, url = make(fifo=True)
    send(sim, url, "a1", "a2", group="A")
    first, _ = receive(sim, url, n=2)
    sim.change_message_visibility(
        QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0
    )
    assert receive(sim, url) == []  # a1 is visible, but a2 is in flight
    sim.clock.advance(30)
    assert [m["Body"] for m in receive(sim, url)] == ["a1", "a2"]


def test_fifo_receive_takes_consecutive_messages_of_a_group() -> None:
    sim, url = make(fifo=True)
    send(sim, url, *(f"a{i}" for i in range(5)), group="A")
    send(sim, url, "b0", group="B")
    got = receive(sim, url, n=10)
    assert [m["Body"] for m in got] == ["a0", "a1", "a2", "a3", "a4", "b0"]
    sequence = [int(m["Attributes"]["SequenceNumber"]) for m in got]
    assert sequence == sorted(sequence)


def test_fifo_content_based_deduplication_for_five_minutes() -> None:
    sim, url = make(fifo=True)
    (first,) = send(sim, url, "same", group="g")
    sim.clock.advance(DEDUP_SECONDS - 1)
    assert send(sim, url, "same", group="other") == [first]
    assert len(sim.messages(url)) == 1
    assert sim.dedup_hits(url) == [(DEDUP_SECONDS - 1, first)]
    # Deleting the message does not end the window.
    sim.delete_message(QueueUrl=url, ReceiptHandle=receive(sim, url)[0]["ReceiptHandle"])
    assert send(sim, url, "same", group="g") == [first]
    sim.clock.advance(1)
    assert send(sim, url, "same", group="g") != [first]
    assert len(sim.messages(url)) == 2


def test_fifo_explicit_deduplication_ids() -> None:
    sim, url = make(fifo=True, content_dedup=False)

    def put(body: str, dedup: str | None) -> Any:
        extra = {"MessageDeduplicationId": dedup} if dedup else {}
        return code(
            lambda: sim.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g", **extra)
        )

    assert put("x", None) == "InvalidParameterValue"
    a = sim.send_message(
        QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d"
    )
    b = sim.send_message(
        QueueUrl=url, MessageBody="y", MessageGroupId="g", MessageDeduplicationId="d"
    )
    assert a["MessageId"] == b["MessageId"] and a["SequenceNumber"] == b["SequenceNumber"]
    assert [m.body for m in sim.messages(url)] == ["x"]


def test_fifo_deduplication_scope_message_group() -> None:
    sim = SimSqs()
    url = sim.create_queue(
        QueueName="s.fifo",
        Attributes={
            "FifoQueue": "true",
            "ContentBasedDeduplication": "true",
            "DeduplicationScope": "messageGroup",
        },
    )["QueueUrl"]
    send(sim, url, "same", group="a")
    send(sim, url, "same", group="b")
    send(sim, url, "same", group="a")
    assert len(sim.messages(url)) == 2


def test_fifo_send_rules() -> None:
    sim, url = make(fifo=True)
    assert code(lambda: sim.send_message(QueueUrl=url, MessageBody="x")) == "MissingParameter"
    assert (
        code(
            lambda: sim.send_message(
                QueueUrl=url, MessageBody="x", MessageGroupId="g", DelaySeconds=3
            )
        )
        == "InvalidParameterValue"
    )
    std, std_url = make()
    assert (
        code(
            lambda: std.send_message(QueueUrl=std_url, MessageBody="x", MessageDeduplicationId="d")
        )
        == "InvalidParameterValue"
    )


# --- ReceiveRequestAttemptId ----------------------------------------------------------------


def attempt(sim: SimSqs, url: str, attempt_id: str, n: int = 2, vt: int = 30) -> list[dict]:
    return receive(sim, url, n=n, vt=vt, ReceiveRequestAttemptId=attempt_id)


def test_a_retried_attempt_id_returns_the_same_messages_and_handles() -> None:
    sim, url = make(fifo=True)
    send(sim, url, "a1", "a2", "a3", group="A")
    first = attempt(sim, url, "r1", vt=10)
    sim.clock.advance(8)
    retry = attempt(sim, url, "r1", vt=10)
    assert [(m["MessageId"], m["ReceiptHandle"]) for m in retry] == [
        (m["MessageId"], m["ReceiptHandle"]) for m in first
    ]
    assert [d.kind for d in sim.deliveries(url)] == ["receive", "receive", "replay", "replay"]
    # The retry restarted the visibility timeout.
    sim.clock.advance(9)
    assert all(sim.state(url, m["MessageId"]) == "in_flight" for m in first)
    assert attempt(sim, url, "r2") == []  # the group is locked


def test_an_attempt_id_after_a_timed_out_receive_still_returns_its_messages() -> None:
    sim, url = make(fifo=True)
    send(sim, url, "a1", group="A")
    first = attempt(sim, url, "r1", vt=1)
    sim.clock.advance(2)
    assert [m["ReceiptHandle"] for m in attempt(sim, url, "r1")] == [first[0]["ReceiptHandle"]]


@pytest.mark.parametrize("touch", ["delete", "change_visibility", "received_again", "expired"])
def test_an_attempt_id_counts_as_new_once_a_message_changed_or_after_five_minutes(
    touch: str,
) -> None:
    sim, url = make(fifo=True)
    send(sim, url, "a1", "a2", group="A")
    send(sim, url, "b1", group="B")
    first = attempt(sim, url, "r1", n=1, vt=1)
    handle = first[0]["ReceiptHandle"]
    if touch == "delete":
        sim.delete_message(QueueUrl=url, ReceiptHandle=handle)
    elif touch == "change_visibility":
        sim.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
    elif touch == "received_again":
        sim.clock.advance(1)
        receive(sim, url, n=1, vt=1)
    else:
        sim.clock.advance(ATTEMPT_ID_SECONDS)
    retry = attempt(sim, url, "r1", n=1)
    assert [m["ReceiptHandle"] for m in retry] != [handle]
    assert all(d.kind == "receive" for d in sim.deliveries(url))


def test_attempt_ids_are_ignored_on_standard_queues() -> None:
    sim, url = make()
    send(sim, url, "m1", "m2")
    assert len(attempt(sim, url, "r", n=1)) == 1
    assert len(attempt(sim, url, "r", n=1)) == 1
    assert counts(sim, url) == (0, 2, 0)


def test_an_empty_receive_is_not_remembered_for_its_attempt_id() -> None:
    sim, url = make(fifo=True)
    assert attempt(sim, url, "r1") == []
    send(sim, url, "a1", group="A")
    assert [m["Body"] for m in attempt(sim, url, "r1")] == ["a1"]


# --- in-flight limit ------------------------------------------------------------------------


def test_the_in_flight_limit() -> None:
    sim, url = make(inflight_limit=3)
    send(sim, url, *(f"m{i}" for i in range(5)))
    assert len(receive(sim, url, n=2)) == 2
    assert len(receive(sim, url, n=5)) == 1  # capped by what is left under the limit
    assert code(lambda: receive(sim, url)) == "OverLimit"
    before = sim.clock.elapsed
    long_poll = sim.receive_message(QueueUrl=url, WaitTimeSeconds=20)
    assert "Messages" not in long_poll
    assert sim.clock.elapsed == before + 20


def test_the_in_flight_limit_defaults_to_120000() -> None:
    assert SimSqs().inflight_limit == 120_000


# --- long polling ---------------------------------------------------------------------------


def test_a_long_poll_advances_the_clock_to_the_next_visible_message() -> None:
    sim, url = make()
    send(sim, url, "m")
    receive(sim, url, vt=7)
    got = sim.receive_message(QueueUrl=url, WaitTimeSeconds=20)["Messages"]
    assert [m["Body"] for m in got] == ["m"]
    assert sim.clock.elapsed == 7


def test_a_long_poll_of_an_empty_queue_waits_its_whole_time() -> None:
    sim, url = make()
    assert "Messages" not in sim.receive_message(QueueUrl=url, WaitTimeSeconds=20)
    assert sim.clock.elapsed == 20


def test_a_long_poll_can_be_told_not_to_move_the_clock() -> None:
    sim, url = make(long_poll_advances_clock=False)
    send(sim, url, "m")
    receive(sim, url, vt=7)
    assert "Messages" not in sim.receive_message(QueueUrl=url, WaitTimeSeconds=20)
    assert sim.clock.elapsed == 0


def test_a_long_poll_with_messages_visible_does_not_wait() -> None:
    sim, url = make()
    send(sim, url, "m")
    assert sim.receive_message(QueueUrl=url, WaitTimeSeconds=20)["Messages"]
    assert sim.clock.elapsed == 0


# --- standard queues: order, duplicates, short polls ----------------------------------------


def test_standard_queues_deliver_everything_in_roughly_send_order() -> None:
    sim, url = make(seed=3)
    sent = send(sim, url, *(f"m{i}" for i in range(30)))
    got = []
    while batch := receive(sim, url, n=5):
        got.extend(m["MessageId"] for m in batch)
    assert sorted(got) == sorted(sent)
    assert got != sent  # best-effort order, shuffled within a window
    first_batch = set(got[:5])
    assert first_batch <= set(sent[:10])


def test_duplicate_deliveries_hand_out_a_message_in_flight_again() -> None:
    sim, url = make(seed=1, duplicate_probability=1.0)
    (mid,) = send(sim, url, "m")
    old = receive(sim, url)[0]["ReceiptHandle"]
    dup = receive(sim, url)
    assert [m["MessageId"] for m in dup] == [mid]
    assert dup[0]["ReceiptHandle"] != old
    assert dup[0]["Attributes"]["ApproximateReceiveCount"] == "2"
    assert [d.kind for d in sim.deliveries(url)] == ["receive", "duplicate"]
    # The first consumer's handle is now stale: its delete leaves the message in place.
    sim.delete_message(QueueUrl=url, ReceiptHandle=old)
    assert sim.state(url, mid) == "in_flight"


def test_no_duplicates_by_default_and_never_on_fifo() -> None:
    sim, url = make()
    send(sim, url, "m")
    receive(sim, url)
    assert receive(sim, url) == []
    fifo, furl = make(fifo=True, duplicate_probability=1.0)
    send(fifo, furl, "m", group="g")
    receive(fifo, furl)
    assert receive(fifo, furl) == []
    with pytest.raises(ValueError):
        fifo.force_duplicate(furl, fifo.messages(furl)[0].message_id)


def test_a_forced_duplicate_is_delivered_on_the_next_receive() -> None:
    sim, url = make()
    (mid,) = send(sim, url, "m")
    receive(sim, url)
    sim.force_duplicate(url, mid)
    assert [m["MessageId"] for m in receive(sim, url)] == [mid]
    assert receive(sim, url) == []


def test_short_polls_may_miss_messages_when_asked_to() -> None:
    sim, url = make(seed=2, short_poll_miss=1.0)
    send(sim, url, *(f"m{i}" for i in range(10)))
    sizes = [len(receive(sim, url, n=10, vt=0)) for _ in range(20)]
    assert max(sizes) < 10 and 0 in sizes
    long = sim.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    assert len(long["Messages"]) == 10


# --- attributes, queues ---------------------------------------------------------------------


def test_get_queue_attributes_counts_and_names() -> None:
    sim, url = make()
    send(sim, url, "a", "b", "c")
    sim.send_message(QueueUrl=url, MessageBody="d", DelaySeconds=60)
    receive(sim, url, n=1)
    assert counts(sim, url) == (2, 1, 1)
    one = sim.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])
    assert one["Attributes"] == {"VisibilityTimeout": "30"}
    assert (
        code(lambda: sim.get_queue_attributes(QueueUrl=url, AttributeNames=["Nope"]))
        == "InvalidAttributeName"
    )


def test_get_queue_url_and_missing_queues() -> None:
    sim, url = make()
    assert sim.get_queue_url(QueueName="q")["QueueUrl"] == url
    with pytest.raises(ClientError) as raised:
        sim.get_queue_url(QueueName="missing")
    assert raised.value.response["Error"]["Code"] == NON_EXISTENT_QUEUE
    assert raised.value.response["Error"]["QueryErrorCode"] == "QueueDoesNotExist"
    assert (
        classify(raised.value, "GetQueueUrl", "missing").__class__.__name__ == "QueueNotFoundError"
    )
    assert code(lambda: receive(sim, url.replace("/q", "/missing"))) == NON_EXISTENT_QUEUE


def test_purge_removes_everything_once_a_minute() -> None:
    sim, url = make()
    send(sim, url, "a", "b")
    receive(sim, url, n=1)
    sim.purge_queue(QueueUrl=url)
    assert counts(sim, url) == (0, 0, 0)
    assert {d.by for d in sim.deletions(url)} == {"purge"}
    assert (
        code(lambda: sim.purge_queue(QueueUrl=url)) == "AWS.SimpleQueueService.PurgeQueueInProgress"
    )
    sim.clock.advance(60)
    sim.purge_queue(QueueUrl=url)


def test_messages_expire_after_the_retention_period() -> None:
    sim = SimSqs()
    url = sim.create_queue(QueueName="r", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
    (mid,) = send(sim, url, "m")
    sim.clock.advance(60)
    assert receive(sim, url) == []
    assert sim.deletions(url)[0].by == "retention" and sim.state(url, mid) == "deleted"


def test_redrive_moves_a_message_received_too_often_to_the_dead_letter_queue() -> None:
    sim = SimSqs()
    dlq = sim.create_queue(QueueName="dlq")["QueueUrl"]
    arn = sim.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 2})
    url = sim.create_queue(QueueName="src", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    (mid,) = send(sim, url, "poison")
    for _ in range(2):
        assert receive(sim, url, vt=1)
        sim.clock.advance(1)
    assert receive(sim, url) == []
    assert sim.state(url, mid) == "deleted" and sim.deletions(url)[0].by == "redrive"
    assert [m["MessageId"] for m in receive(sim, dlq)] == [mid]


def test_message_size_and_contents_are_checked() -> None:
    sim, url = make()
    assert (
        code(lambda: sim.send_message(QueueUrl=url, MessageBody="x" * (1024 * 1024 + 1)))
        == "InvalidParameterValue"
    )
    assert (
        code(lambda: sim.send_message(QueueUrl=url, MessageBody="bad \x00"))
        == "InvalidMessageContents"
    )
    assert code(lambda: sim.send_message(QueueUrl=url, MessageBody="")) == "MissingParameter"


# --- faults ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "fault_code", "status"),
    [
        ("throttle", "RequestThrottled", 400),
        ("throttle", "Throttling", 400),
        ("server_error", "InternalError", 500),
    ],
)
def test_throttling_and_5xx_fail_before_the_effect(kind: str, fault_code: str, status: int) -> None:
    sim, url = make()
    sim.inject(Fault("SendMessage", kind, code=fault_code))
    with pytest.raises(ClientError) as raised:
        sim.send_message(QueueUrl=url, MessageBody="m")
    assert raised.value.response["Error"]["Code"] == fault_code
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert sim.messages(url) == []
    assert isinstance(classify(raised.value, "SendMessage", url), TransientSqsError)


def test_a_connection_error_fails_before_the_effect() -> None:
    sim, url = make()
    sim.inject(Fault("SendMessage", "connection_error"))
    with pytest.raises(EndpointConnectionError):
        sim.send_message(QueueUrl=url, MessageBody="m")
    assert sim.messages(url) == []


def test_a_lost_response_happens_after_the_effect() -> None:
    sim, url = make()
    send(sim, url, "m")
    sim.inject(Fault("ReceiveMessage", "lost_response"))
    with pytest.raises(ReadTimeoutError):
        receive(sim, url)
    assert sim.in_flight(url) and sim.receive_counts(url) == {sim.messages(url)[0].message_id: 1}
    handle = sim.messages(url)[0].receipt.handle  # type: ignore[union-attr]
    sim.inject(Fault("DeleteMessageBatch", "lost_response"))
    with pytest.raises(ReadTimeoutError):
        sim.delete_message_batch(QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": handle}])
    assert sim.live(url) == []
    assert "lost response (effect applied)" in sim.format_trace()


def test_scripted_faults_match_operation_queue_and_count() -> None:
    sim, url = make()
    other = sim.create_queue(QueueName="other")["QueueUrl"]
    sim.inject(Fault("*", "server_error", queue_url=url, count=2))
    send(sim, other, "fine")
    for _ in range(2):
        assert code(lambda: sim.get_queue_attributes(QueueUrl=url)) == "InternalError"
    assert code(lambda: sim.get_queue_attributes(QueueUrl=url)) == "ok"


def faulty_run(seed: int) -> tuple[list[str], str]:
    sim, url = make(
        seed=seed,
        fault_rates=FaultRates(
            throttle=0.1, server_error=0.1, connection_error=0.05, lost_response=0.1
        ),
    )
    outcomes = []
    for i in range(60):
        try:
            if i % 3 == 0:
                sim.send_message(QueueUrl=url, MessageBody=f"m{i}")
            else:
                for m in receive(sim, url, n=2, vt=1):
                    sim.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            outcomes.append("ok")
        except ClientError as exc:
            outcomes.append(exc.response["Error"]["Code"])
        except (ReadTimeoutError, EndpointConnectionError) as exc:
            outcomes.append(type(exc).__name__)
        sim.clock.advance(0.5)
    return outcomes, sim.format_trace()


def test_a_seed_replays_exactly_and_another_seed_differs() -> None:
    first, second, other = faulty_run(11), faulty_run(11), faulty_run(12)
    assert first == second
    assert first != other
    kinds = set(first[0])
    assert {"ok", "ReadTimeoutError"} <= kinds and kinds & {"RequestThrottled", "Throttling"}


def test_fault_draws_do_not_change_what_the_queue_does() -> None:
    # The fault stream is separate: a run whose every fault missed hands out the same messages.
    plain, url = make(seed=5)
    missed, url2 = make(seed=5, fault_rates=FaultRates(throttle=1e-12))
    for sim, u in ((plain, url), (missed, url2)):
        send(sim, u, *(f"m{i}" for i in range(20)))
    assert [m["Body"] for m in receive(plain, url, n=10)] == [
        m["Body"] for m in receive(missed, url2, n=10)
    ]


def test_rate_faults_spare_queue_creation() -> None:
    sim = SimSqs(fault_rates=FaultRates(server_error=1.0))
    url = sim.create_queue(QueueName="q")["QueueUrl"]
    assert code(lambda: sim.send_message(QueueUrl=url, MessageBody="m")) == "InternalError"


# --- the retrying client --------------------------------------------------------------------


def test_the_client_retries_like_botocore_and_reports_retries() -> None:
    sim, url = make()
    sim.inject(Fault("SendMessage", "throttle", count=2))
    client = sim.client(total_max_attempts=3)
    response = client.send_message(QueueUrl=url, MessageBody="m")
    assert response["ResponseMetadata"]["RetryAttempts"] == 2
    assert len(sim.messages(url)) == 1
    sim.inject(Fault("SendMessage", "throttle", count=3))
    assert code(lambda: client.send_message(QueueUrl=url, MessageBody="m")) == "RequestThrottled"


def test_the_client_does_not_retry_client_errors() -> None:
    sim, url = make()
    client = sim.client(total_max_attempts=5)
    assert (
        code(lambda: client.delete_message(QueueUrl=url, ReceiptHandle="x"))
        == "ReceiptHandleIsInvalid"
    )
    assert sim.calls["DeleteMessage"] == 1


def test_a_retried_lost_receive_gets_other_messages_on_standard_queues() -> None:
    sim, url = make()
    send(sim, url, "a", "b")
    sim.inject(Fault("ReceiveMessage", "lost_response"))
    got = sim.client(total_max_attempts=2).receive_message(QueueUrl=url, MaxNumberOfMessages=1)
    assert len(got["Messages"]) == 1
    assert counts(sim, url) == (0, 2, 0)  # the lost receive's message stays in flight


def test_a_retried_lost_fifo_receive_with_an_attempt_id_gets_the_same_messages() -> None:
    sim, url = make(fifo=True)
    send(sim, url, "a1", "a2", group="A")
    sim.inject(Fault("ReceiveMessage", "lost_response"))
    got = sim.client(total_max_attempts=2).receive_message(
        QueueUrl=url, MaxNumberOfMessages=2, ReceiveRequestAttemptId="r"
    )
    assert [m["Body"] for m in got["Messages"]] == ["a1", "a2"]
    assert all(m.receive_count == 1 for m in sim.messages(url))


def test_the_client_backs_off_on_the_given_clock() -> None:
    sim, url = make()
    sim.inject(Fault("GetQueueUrl", "server_error", count=2))
    sim.client(total_max_attempts=3, sleep=sim.clock.sleep).get_queue_url(QueueName="q")
    assert 0 < sim.clock.elapsed <= 1 + 2
    assert SimSqsClient.retriable(ReadTimeoutError(endpoint_url="x"))


# --- trace and inspection -------------------------------------------------------------------


def test_the_trace_records_every_call_with_its_outcome() -> None:
    sim, url = make()
    send(sim, url, "m")
    receive(sim, url)
    sim.inject(Fault("GetQueueAttributes", "throttle"))
    code(lambda: sim.get_queue_attributes(QueueUrl=url))
    code(lambda: sim.delete_message(QueueUrl=url, ReceiptHandle="x"))
    lines = [(e.operation, e.outcome) for e in sim.trace]
    assert lines == [
        ("CreateQueue", "ok"),
        ("SendMessage", "ok"),
        ("ReceiveMessage", "ok"),
        ("GetQueueAttributes", "fault throttle"),
        ("DeleteMessage", "error ReceiptHandleIsInvalid"),
    ]
    assert sim.calls == {
        "CreateQueue": 1,
        "SendMessage": 1,
        "ReceiveMessage": 1,
        "GetQueueAttributes": 1,
        "DeleteMessage": 1,
    }
    assert "got [" in sim.format_trace(last=3).splitlines()[0]


def test_inspection_reports_sends_receives_and_deletions_with_times() -> None:
    sim, url = make()
    ids = send(sim, url, "a", "b")
    sim.clock.advance(1)
    got = receive(sim, url, n=1, vt=1)
    sim.clock.advance(1)
    sim.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    assert [m.message_id for m in sim.messages(url)] == ids
    assert [(d.at, d.message_id, d.by) for d in sim.deletions(url)] == [
        (2.0, got[0]["MessageId"], "delete")
    ]
    assert sum(sim.receive_counts(url).values()) == 1
    assert [d.at for d in sim.deliveries(url)] == [1.0]
    assert [m.message_id for m in sim.visible(url)] == [i for i in ids if i != got[0]["MessageId"]]


def test_a_seed_replays_exactly_in_another_process_with_another_hash_seed() -> None:
    import hashlib
    import os
    import subprocess
    import sys

    script = (
        "import hashlib; from tests.sim.test_sim_sqs import faulty_run; "
        "print(hashlib.sha256(repr(faulty_run(11)).encode()).hexdigest())"
    )
    here = hashlib.sha256(repr(faulty_run(11)).encode()).hexdigest()
    for hash_seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=True,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        )
        assert out.stdout.strip() == here
