"""Conformance: the same SQS scenarios against the simulated SQS, moto and LocalStack.

Each scenario returns a small dict of observed facts. ``EXPECTED`` holds what AWS does (as
documented, and as the simulator models it); ``KNOWN_DIVERGENCES`` lists, per backend, the
facts where that backend is known to answer differently, with the reason. A backend must
match ``EXPECTED`` except for its listed divergences, and must show each listed divergence
(so the table cannot go stale silently: a fixed emulator fails the test until the table is
updated). docs/simulation.md shows the same table.

moto here is the project's test server (``spark_sqs.local_sqs.MotoServer``), which patches
moto's receipt-handle checks to be strict; LocalStack runs from ``.venv-localstack``
(``make conformance`` builds it) and is skipped when that virtualenv is absent.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sim import SimSqs
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
LOCALSTACK_PYTHON = ROOT / ".venv-localstack" / "bin" / "python"
BACKENDS = ("sim", "moto", "localstack")


@dataclass
class Backend:
    name: str
    sqs: Any
    wait: Callable[[Callable[[], Any], float, str], Any]

    def queue(self, fifo: bool = False, content_dedup: bool = True) -> str:
        name = f"conf-{uuid.uuid4().hex[:12]}" + (".fifo" if fifo else "")
        attributes = {"VisibilityTimeout": "30"}
        if fifo:
            attributes["FifoQueue"] = "true"
            attributes["ContentBasedDeduplication"] = "true" if content_dedup else "false"
        return self.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]

    def receive(self, url: str, n: int = 10, vt: int = 30, **extra: Any) -> list[dict[str, Any]]:
        response = self.sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=n,
            VisibilityTimeout=vt,
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["All"],
            **extra,
        )
        return response.get("Messages", [])

    def counts(self, url: str) -> tuple[int, int]:
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return (
            int(attrs["ApproximateNumberOfMessages"]),
            int(attrs["ApproximateNumberOfMessagesNotVisible"]),
        )

    def receive_again(self, url: str, vt: int = 1) -> dict[str, Any]:
        """Wait until the visibility timeout lapses and the message is received again."""
        got = self.wait(lambda: self.receive(url, 1, vt), 30, "the message to reappear")
        return got[0]


def sim_wait(sim: SimSqs) -> Callable[[Callable[[], Any], float, str], Any]:
    def wait(condition: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = sim.clock.elapsed + timeout
        while True:
            value = condition()
            if value:
                return value
            if sim.clock.elapsed >= deadline:
                raise AssertionError(f"simulated time ran out waiting for {what}")
            sim.clock.advance(0.25)

    return wait


def real_wait(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    return wait_until(condition, timeout, what, interval=0.1)


@pytest.fixture(scope="module")
def localstack_endpoint() -> Iterator[str]:
    if not LOCALSTACK_PYTHON.exists():
        if os.environ.get("CONFORMANCE_REQUIRE_LOCALSTACK"):
            pytest.fail(f"{LOCALSTACK_PYTHON} is missing; `make conformance` builds it")
        pytest.skip(
            "LocalStack conformance needs .venv-localstack (Python 3.13, a few minutes to build): "
            "run `make conformance` to build it and run this test against LocalStack"
        )
    from bench.servers import LocalStack

    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"conformance-localstack-{os.getpid()}.log"
    server = LocalStack(LOCALSTACK_PYTHON, log)
    yield server.endpoint
    server.stop()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    import boto3
    from botocore.config import Config

    if request.param == "sim":
        sim = SimSqs(seed=19)
        return Backend("sim", sim.client(), sim_wait(sim))
    endpoint = request.getfixturevalue(
        "moto_endpoint" if request.param == "moto" else "localstack_endpoint"
    )
    client = boto3.client(
        "sqs",
        region_name="us-east-1",
        endpoint_url=endpoint,
        config=Config(retries={"total_max_attempts": 1}),
    )
    return Backend(request.param, client, real_wait)


def code_of(call: Callable[[], Any]) -> str:
    """ "ok" if ``call`` succeeds, else the error code botocore reports."""
    try:
        call()
    except ClientError as exc:
        return str(exc.response["Error"]["Code"])
    return "ok"


def batch_outcome(response: dict[str, Any]) -> str:
    if response.get("Failed"):
        failed = response["Failed"][0]
        return f"{failed['Code']} sender_fault={failed.get('SenderFault')}"
    return "ok"


# --- scenarios -------------------------------------------------------------------------------


def receive_visibility_delete(b: Backend) -> dict[str, Any]:
    url = b.queue()
    b.sqs.send_message(QueueUrl=url, MessageBody="m1")
    first = b.receive(url, vt=1)
    hidden = b.receive(url)
    again = b.receive_again(url, vt=30)
    deleted = code_of(
        lambda: b.sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    )
    return {
        "first_receive": [m["Body"] for m in first],
        "while_invisible": len(hidden),
        "same_message_again": again["MessageId"] == first[0]["MessageId"],
        "new_handle_per_receive": again["ReceiptHandle"] != first[0]["ReceiptHandle"],
        "receive_count": again["Attributes"]["ApproximateReceiveCount"],
        "delete": deleted,
        "counts_after_delete": b.counts(url),
    }


def stale_handle_standard(b: Backend) -> dict[str, Any]:
    url = b.queue()
    b.sqs.send_message(QueueUrl=url, MessageBody="m1")
    old = b.receive(url, vt=1)[0]["ReceiptHandle"]
    new = b.receive_again(url, vt=30)["ReceiptHandle"]
    delete_old = code_of(lambda: b.sqs.delete_message(QueueUrl=url, ReceiptHandle=old))
    after_stale_delete = b.counts(url)
    change_old = code_of(
        lambda: b.sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=old, VisibilityTimeout=5
        )
    )
    delete_new = code_of(lambda: b.sqs.delete_message(QueueUrl=url, ReceiptHandle=new))
    return {
        "delete_with_stale_handle": delete_old,
        "counts_after_stale_delete": after_stale_delete,
        "change_visibility_with_stale_handle": change_old,
        "delete_with_newest_handle": delete_new,
        "counts_at_end": b.counts(url),
    }


def stale_handle_fifo(b: Backend) -> dict[str, Any]:
    url = b.queue(fifo=True)
    b.sqs.send_message(QueueUrl=url, MessageBody="m1", MessageGroupId="g")
    old = b.receive(url, vt=1)[0]["ReceiptHandle"]
    new = b.receive_again(url, vt=30)["ReceiptHandle"]
    delete_old = code_of(lambda: b.sqs.delete_message(QueueUrl=url, ReceiptHandle=old))
    after_stale_delete = b.counts(url)
    batch = b.sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": "stale", "ReceiptHandle": old}]
    )
    delete_new = code_of(lambda: b.sqs.delete_message(QueueUrl=url, ReceiptHandle=new))
    return {
        "delete_with_stale_handle": delete_old,
        "counts_after_stale_delete": after_stale_delete,
        "batch_delete_with_stale_handle": batch_outcome(batch),
        "delete_with_newest_handle": delete_new,
        "counts_at_end": b.counts(url),
    }


def expired_handle_fifo(b: Backend) -> dict[str, Any]:
    """A FIFO handle whose visibility timeout lapsed, the message not received again."""
    url = b.queue(fifo=True)
    b.sqs.send_message(QueueUrl=url, MessageBody="m1", MessageGroupId="g")
    handle = b.receive(url, vt=1)[0]["ReceiptHandle"]
    b.wait(lambda: b.counts(url) == (1, 0), 30, "the message to be visible again")
    return {
        "delete_with_expired_handle": code_of(
            lambda: b.sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)
        ),
        "counts_after": b.counts(url),
    }


def change_visibility_not_in_flight(b: Backend) -> dict[str, Any]:
    url = b.queue()
    b.sqs.send_message(QueueUrl=url, MessageBody="m1")
    handle = b.receive(url, vt=1)[0]["ReceiptHandle"]
    b.wait(lambda: b.counts(url) == (1, 0), 30, "the message to be visible again")
    return {
        "change_visibility_after_timeout": code_of(
            lambda: b.sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=30
            )
        ),
    }


def change_visibility_in_flight(b: Backend) -> dict[str, Any]:
    url = b.queue()
    b.sqs.send_message(QueueUrl=url, MessageBody="m1")
    handle = b.receive(url, vt=30)[0]["ReceiptHandle"]
    release = b.sqs.change_message_visibility_batch(
        QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": handle, "VisibilityTimeout": 0}]
    )
    back = b.receive(url)
    return {
        "release_by_visibility_zero": batch_outcome(release),
        "visible_again_at_once": [m["Body"] for m in back],
    }


def bogus_handle(b: Backend) -> dict[str, Any]:
    url = b.queue()
    b.sqs.send_message(QueueUrl=url, MessageBody="m1")
    b.receive(url)
    bogus = "not-a-handle"
    return {
        "delete": code_of(lambda: b.sqs.delete_message(QueueUrl=url, ReceiptHandle=bogus)),
        "batch_delete": batch_outcome(
            b.sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "x", "ReceiptHandle": bogus}])
        ),
        "change_visibility": code_of(
            lambda: b.sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=bogus, VisibilityTimeout=5
            )
        ),
    }


def fifo_group_locking_and_order(b: Backend) -> dict[str, Any]:
    url = b.queue(fifo=True)
    for body, group in (("a1", "A"), ("a2", "A"), ("a3", "A"), ("b1", "B")):
        b.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)
    first = b.receive(url, 1)
    second = b.receive(url, 10)
    third = b.receive(url, 10)
    b.sqs.delete_message(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"])
    fourth = b.receive(url, 10)
    for m in second + fourth:
        b.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    # A group is locked while any of its messages is in flight, not only its oldest.
    for body in ("c1", "c2"):
        b.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="C")
    c1, _ = b.receive(url, 2)
    b.sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=c1["ReceiptHandle"], VisibilityTimeout=0
    )
    return {
        "first_receive": [m["Body"] for m in first],
        "group_a_locked": [m["Body"] for m in second],
        "both_locked": [m["Body"] for m in third],
        "after_delete_in_order": [m["Body"] for m in fourth],
        "locked_by_a_later_message": [m["Body"] for m in b.receive(url, 10)],
    }


def fifo_dedup(b: Backend) -> dict[str, Any]:
    url = b.queue(fifo=True)
    one = b.sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    two = b.sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    three = b.sqs.send_message(
        QueueUrl=url, MessageBody="other", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    four = b.sqs.send_message(
        QueueUrl=url, MessageBody="different body", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    got = b.receive(url, 10)
    for m in got:
        b.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    five = b.sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    explicit_url = b.queue(fifo=True, content_dedup=False)
    missing = code_of(
        lambda: b.sqs.send_message(QueueUrl=explicit_url, MessageBody="x", MessageGroupId="g")
    )
    return {
        "content_based_same_id": one["MessageId"] == two["MessageId"],
        "explicit_same_id": three["MessageId"] == four["MessageId"],
        "received": [m["Body"] for m in got],
        "deduplicated_after_delete": five["MessageId"] == one["MessageId"],
        "counts_at_end": b.counts(url),
        "no_dedup_id_without_content_based": missing,
    }


def receive_request_attempt_id(b: Backend) -> dict[str, Any]:
    url = b.queue(fifo=True)
    for body in ("a1", "a2", "a3"):
        b.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="A")
    first = b.receive(url, 2, ReceiveRequestAttemptId="attempt-1")
    retry = b.receive(url, 2, ReceiveRequestAttemptId="attempt-1")
    fresh = b.receive(url, 2, ReceiveRequestAttemptId="attempt-2")
    return {
        "first": [m["Body"] for m in first],
        "retry_same_messages": [m["Body"] for m in retry],
        "retry_same_handles": [m["ReceiptHandle"] for m in retry]
        == [m["ReceiptHandle"] for m in first],
        "other_id_group_locked": [m["Body"] for m in fresh],
    }


def message_checksums(b: Backend) -> dict[str, Any]:
    url = b.queue()
    attributes = {
        "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
        "a": {"DataType": "String", "StringValue": "x"},
        "n": {"DataType": "Number", "StringValue": "1"},
    }
    sent = b.sqs.send_message(QueueUrl=url, MessageBody="hello", MessageAttributes=attributes)
    got = b.sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"][0]
    return {
        "send_md5_of_body": sent["MD5OfMessageBody"],
        "send_md5_of_attributes": sent["MD5OfMessageAttributes"],
        "receive_md5_of_body": got["MD5OfBody"],
        "receive_md5_of_attributes": got["MD5OfMessageAttributes"],
        "attributes_round_trip": got["MessageAttributes"] == attributes,
    }


def queue_errors(b: Backend) -> dict[str, Any]:
    url = b.queue()
    too_many = code_of(
        lambda: b.sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(i), "ReceiptHandle": "h"} for i in range(11)],
        )
    )
    return {
        "get_queue_url_missing": code_of(
            lambda: b.sqs.get_queue_url(QueueName=f"missing-{uuid.uuid4().hex[:8]}")
        ),
        "batch_of_eleven": too_many,
        "receive_eleven": code_of(lambda: b.receive(url, 11)),
    }


SCENARIOS: dict[str, Callable[[Backend], dict[str, Any]]] = {
    f.__name__: f
    for f in (
        receive_visibility_delete,
        stale_handle_standard,
        stale_handle_fifo,
        expired_handle_fifo,
        change_visibility_not_in_flight,
        change_visibility_in_flight,
        bogus_handle,
        fifo_group_locking_and_order,
        fifo_dedup,
        receive_request_attempt_id,
        message_checksums,
        queue_errors,
    )
}

# What AWS does (SQS API reference and developer guide; PLATFORM.md), as the simulator models it.
EXPECTED: dict[str, dict[str, Any]] = {
    "receive_visibility_delete": {
        "first_receive": ["m1"],
        "while_invisible": 0,
        "same_message_again": True,
        "new_handle_per_receive": True,
        "receive_count": "2",
        "delete": "ok",
        "counts_after_delete": (0, 0),
    },
    "stale_handle_standard": {
        "delete_with_stale_handle": "ok",
        "counts_after_stale_delete": (0, 1),
        "change_visibility_with_stale_handle": "InvalidParameterValue",
        "delete_with_newest_handle": "ok",
        "counts_at_end": (0, 0),
    },
    "stale_handle_fifo": {
        "delete_with_stale_handle": "InvalidParameterValue",
        "counts_after_stale_delete": (0, 1),
        "batch_delete_with_stale_handle": "InvalidParameterValue sender_fault=True",
        "delete_with_newest_handle": "ok",
        "counts_at_end": (0, 0),
    },
    "expired_handle_fifo": {
        "delete_with_expired_handle": "InvalidParameterValue",
        "counts_after": (1, 0),
    },
    "change_visibility_not_in_flight": {
        "change_visibility_after_timeout": "AWS.SimpleQueueService.MessageNotInflight",
    },
    "change_visibility_in_flight": {
        "release_by_visibility_zero": "ok",
        "visible_again_at_once": ["m1"],
    },
    "bogus_handle": {
        "delete": "ReceiptHandleIsInvalid",
        "batch_delete": "ReceiptHandleIsInvalid sender_fault=True",
        "change_visibility": "ReceiptHandleIsInvalid",
    },
    "fifo_group_locking_and_order": {
        "first_receive": ["a1"],
        "group_a_locked": ["b1"],
        "both_locked": [],
        "after_delete_in_order": ["a2", "a3"],
        "locked_by_a_later_message": [],
    },
    "fifo_dedup": {
        "content_based_same_id": True,
        "explicit_same_id": True,
        "received": ["same", "other"],
        "deduplicated_after_delete": True,
        "counts_at_end": (0, 0),
        "no_dedup_id_without_content_based": "InvalidParameterValue",
    },
    "receive_request_attempt_id": {
        "first": ["a1", "a2"],
        "retry_same_messages": ["a1", "a2"],
        "retry_same_handles": True,
        "other_id_group_locked": [],
    },
    "message_checksums": {
        "send_md5_of_body": "5d41402abc4b2a76b9719d911017c592",
        "send_md5_of_attributes": "53974f559c6c7cf8c4df221b4b58d31a",
        "receive_md5_of_body": "5d41402abc4b2a76b9719d911017c592",
        "receive_md5_of_attributes": "53974f559c6c7cf8c4df221b4b58d31a",
        "attributes_round_trip": True,
    },
    "queue_errors": {
        "get_queue_url_missing": "AWS.SimpleQueueService.NonExistentQueue",
        "batch_of_eleven": "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        "receive_eleven": "InvalidParameterValue",
    },
}

# (backend, scenario, fact) -> (what that backend answers, why). Kept in docs/simulation.md.
MOTO_STRICT = "spark_sqs.local_sqs makes moto reject superseded handles, with its own code"
KNOWN_DIVERGENCES: dict[tuple[str, str, str], tuple[Any, str]] = {
    ("moto", "stale_handle_standard", "change_visibility_with_stale_handle"): (
        "ReceiptHandleIsInvalid",
        MOTO_STRICT,
    ),
    ("moto", "stale_handle_fifo", "delete_with_stale_handle"): (
        "ReceiptHandleIsInvalid",
        MOTO_STRICT,
    ),
    ("moto", "stale_handle_fifo", "batch_delete_with_stale_handle"): (
        "ReceiptHandleIsInvalid sender_fault=True",
        MOTO_STRICT,
    ),
    ("moto", "expired_handle_fifo", "delete_with_expired_handle"): (
        "ok",
        "moto accepts a FIFO handle whose visibility timeout lapsed, and deletes the message",
    ),
    ("moto", "expired_handle_fifo", "counts_after"): (
        (0, 0),
        "moto deletes with an expired handle",
    ),
    ("moto", "change_visibility_not_in_flight", "change_visibility_after_timeout"): (
        "ReceiptHandleIsInvalid",
        "moto extends a message no longer in flight; spark_sqs.local_sqs rejects it with "
        "ReceiptHandleIsInvalid instead of MessageNotInflight",
    ),
    ("moto", "fifo_dedup", "content_based_same_id"): (
        False,
        "moto drops the duplicate but answers with a new MessageId",
    ),
    ("moto", "fifo_dedup", "explicit_same_id"): (
        False,
        "moto drops the duplicate but answers with a new MessageId",
    ),
    ("moto", "fifo_dedup", "deduplicated_after_delete"): (
        False,
        "moto forgets a deduplication id once its message is deleted (PLATFORM.md)",
    ),
    ("moto", "fifo_dedup", "counts_at_end"): ((1, 0), "the resend after delete was enqueued"),
    ("moto", "queue_errors", "batch_of_eleven"): (
        "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        "moto reports eleven distinct ids as not distinct",
    ),
    ("moto", "receive_request_attempt_id", "retry_same_messages"): (
        [],
        "moto ignores ReceiveRequestAttemptId: the retry is a new receive of a locked group",
    ),
    ("moto", "receive_request_attempt_id", "retry_same_handles"): (
        False,
        "moto ignores ReceiveRequestAttemptId",
    ),
    ("localstack", "stale_handle_standard", "counts_after_stale_delete"): (
        (0, 0),
        "LocalStack deletes with any handle the message ever had",
    ),
    ("localstack", "stale_handle_fifo", "delete_with_stale_handle"): (
        "ok",
        "LocalStack accepts a superseded FIFO handle (it rejects only expired ones)",
    ),
    ("localstack", "stale_handle_fifo", "counts_after_stale_delete"): (
        (0, 0),
        "LocalStack deletes with any handle the message ever had",
    ),
    ("localstack", "stale_handle_fifo", "batch_delete_with_stale_handle"): (
        "ok",
        "the message is already gone, and LocalStack accepts the superseded handle",
    ),
    ("localstack", "change_visibility_not_in_flight", "change_visibility_after_timeout"): (
        "ok",
        "LocalStack ignores a visibility change of a message not in flight (no MessageNotInflight)",
    ),
    ("localstack", "bogus_handle", "batch_delete"): (
        "ReceiptHandleIsInvalid sender_fault=False",
        "LocalStack marks the failed entry as not the sender's fault",
    ),
    ("localstack", "fifo_group_locking_and_order", "locked_by_a_later_message"): (
        ["c1"],
        "LocalStack unlocks a group when its first message becomes visible, though a later one "
        "is still in flight (AWS: no message of a group while any of it is in flight)",
    ),
    ("localstack", "receive_request_attempt_id", "retry_same_messages"): (
        [],
        "LocalStack ignores ReceiveRequestAttemptId",
    ),
    ("localstack", "receive_request_attempt_id", "retry_same_handles"): (
        False,
        "LocalStack ignores ReceiveRequestAttemptId",
    ),
}


DOC = ROOT / "docs" / "simulation.md"


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return "`[" + ", ".join(map(str, value)) + "]`"
    return f"`{value}`"


def agreement_table() -> list[str]:
    """The rows of docs/simulation.md's agreement table, from EXPECTED and KNOWN_DIVERGENCES."""
    rows = []
    for scenario in SCENARIOS:
        for fact, want in EXPECTED[scenario].items():
            cells = []
            for name in ("moto", "localstack"):
                divergence = KNOWN_DIVERGENCES.get((name, scenario, fact))
                cells.append("agrees" if divergence is None else f"**{_cell(divergence[0])}**")
            rows.append(f"| {scenario} | {fact} | {_cell(want)} | {cells[0]} | {cells[1]} |")
    return rows


def test_the_documented_agreement_table_is_this_one() -> None:
    documented = [
        line
        for line in DOC.read_text().splitlines()
        if line.startswith("| ")
        and line.count("|") == 6
        and not line.startswith(("| scenario", "| ---"))
    ]
    assert documented == agreement_table()


def test_expected_covers_every_scenario() -> None:
    assert set(EXPECTED) == set(SCENARIOS)
    for backend_name, scenario, fact in KNOWN_DIVERGENCES:
        assert backend_name in BACKENDS and fact in EXPECTED[scenario]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_conformance(backend: Backend, scenario: str) -> None:
    started = time.monotonic()
    observed = SCENARIOS[scenario](backend)
    expected = dict(EXPECTED[scenario])
    reasons = {}
    for (name, scen, fact), (value, reason) in KNOWN_DIVERGENCES.items():
        if name == backend.name and scen == scenario:
            expected[fact] = value
            reasons[fact] = reason
    mismatches = {
        fact: {"observed": observed.get(fact), "expected": want}
        for fact, want in expected.items()
        if observed.get(fact) != want
    }
    assert not mismatches, (
        f"{backend.name} / {scenario} ({time.monotonic() - started:.1f}s): {mismatches}"
        + (f"; known divergences: {reasons}" if reasons else "")
    )
