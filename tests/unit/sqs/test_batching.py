"""Batched deletes and visibility changes (spark_sqs/sqs/batching.py): ``BatchCaller`` splits
entries into calls of ten, retries transient failures alone, reports permanent ones, and runs
calls in parallel without sending an entry twice."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pytest
from botocore.stub import Stubber

from spark_sqs.errors import QueueNotFoundError, SqsAccessError
from spark_sqs.sqs.batching import BatchCaller, BatchResult, Entry, chunks, process_pool
from tests.factories import QUEUE_URL
from tests.fakes import client_error, stub_sqs_client


def entries(count: int, start: int = 0) -> list[Entry]:
    return [Entry(f"m{i}", f"h{i}") for i in range(start, start + count)]


def request(part: Sequence[Entry], timeout: int | None = None) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for i, e in enumerate(part):
        item: dict[str, Any] = {"Id": str(i), "ReceiptHandle": e.receipt_handle}
        if timeout is not None:
            item["VisibilityTimeout"] = timeout
        items.append(item)
    return {"QueueUrl": QUEUE_URL, "Entries": items}


def ok(*ids: int) -> list[dict[str, str]]:
    return [{"Id": str(i)} for i in ids]


def failed(index: int, code: str, sender_fault: bool) -> dict[str, Any]:
    return {"Id": str(index), "Code": code, "SenderFault": sender_fault, "Message": code}


@pytest.fixture
def client() -> Any:
    return stub_sqs_client()


@pytest.fixture
def stubber(client: Any) -> Iterator[Stubber]:
    with Stubber(client) as stub:
        yield stub
        stub.assert_no_pending_responses()


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def caller(client: Any, sleeps: Sleeps, **kwargs: Any) -> BatchCaller:
    kwargs.setdefault("parallelism", 1)
    return BatchCaller(client, QUEUE_URL, sleep=sleeps, **kwargs)


def test_chunks_of_ten() -> None:
    assert [len(c) for c in chunks(entries(23))] == [10, 10, 3]
    assert [len(c) for c in chunks(entries(10))] == [10]
    assert chunks([]) == []


def test_more_than_ten_entries_are_split_into_calls_of_ten(
    client: Any, stubber: Stubber, sleeps: Sleeps
) -> None:
    todo = entries(23)
    for part in (todo[0:10], todo[10:20], todo[20:23]):
        stubber.add_response(
            "delete_message_batch",
            {"Successful": ok(*range(len(part))), "Failed": []},
            expected_params=request(part),
        )

    result = caller(client, sleeps).delete(todo)

    assert result.succeeded == [e.message_id for e in todo]
    assert result.permanent == {} and result.transient == {}
    assert sleeps == []


def test_change_visibility_sends_the_timeout_for_every_entry(
    client: Any, stubber: Stubber, sleeps: Sleeps
) -> None:
    todo = entries(12)
    for part in (todo[:10], todo[10:]):
        stubber.add_response(
            "change_message_visibility_batch",
            {"Successful": ok(*range(len(part))), "Failed": []},
            expected_params=request(part, timeout=0),
        )

    result = caller(client, sleeps).change_visibility(todo, 0)

    assert sorted(result.succeeded) == sorted(e.message_id for e in todo)


def test_no_entries_makes_no_call(client: Any, stubber: Stubber, sleeps: Sleeps) -> None:
    # The stubber raises on any call it was not told about.
    assert caller(client, sleeps).delete([]) == BatchResult()
    assert caller(client, sleeps).change_visibility([], 30) == BatchResult()


def test_transient_failed_entries_are_retried_alone_and_then_succeed(
    client: Any, stubber: Stubber, sleeps: Sleeps
) -> None:
    todo = entries(4)
    stubber.add_response(
        "delete_message_batch",
        {
            "Successful": ok(0, 3),
            "Failed": [
                failed(1, "InternalError", False),
                # Throttling is retried even though SQS calls it the sender's fault.
                failed(2, "RequestThrottled", True),
            ],
        },
        expected_params=request(todo),
    )
    stubber.add_response(
        "delete_message_batch",
        {"Successful": ok(0, 1), "Failed": []},
        expected_params=request([todo[1], todo[2]]),
    )

    result = caller(client, sleeps, base_delay=0.1).delete(todo)

    assert sorted(result.succeeded) == ["m0", "m1", "m2", "m3"]
    assert result.transient == {}
    assert result.permanent == {}
    assert len(sleeps) == 1
    assert 0 <= sleeps[0] <= 0.2


@pytest.mark.parametrize(
    ("code", "sender_fault"),
    [
        ("ReceiptHandleIsInvalid", True),
        ("InvalidReceiptHandle", False),
        ("AWS.SimpleQueueService.MessageNotInflight", True),
        ("InvalidParameterValue", True),
        ("SomeNewClientSideCode", True),
    ],
)
def test_permanent_failures_are_reported_and_not_retried(
    client: Any, stubber: Stubber, sleeps: Sleeps, code: str, sender_fault: bool
) -> None:
    todo = entries(3)
    stubber.add_response(
        "delete_message_batch",
        {"Successful": ok(0, 2), "Failed": [failed(1, code, sender_fault)]},
        expected_params=request(todo),
    )

    result = caller(client, sleeps).delete(todo)

    assert sorted(result.succeeded) == ["m0", "m2"]
    assert result.permanent == {"m1": code}
    assert result.transient == {}
    assert sleeps == []


def test_permanent_and_transient_failures_in_one_response(
    client: Any, stubber: Stubber, sleeps: Sleeps
) -> None:
    todo = entries(3)
    stubber.add_response(
        "delete_message_batch",
        {
            "Successful": ok(0),
            "Failed": [
                failed(1, "ReceiptHandleIsInvalid", True),
                failed(2, "InternalError", False),
            ],
        },
        expected_params=request(todo),
    )
    stubber.add_response(
        "delete_message_batch",
        {"Successful": ok(0), "Failed": []},
        expected_params=request([todo[2]]),
    )

    result = caller(client, sleeps).delete(todo)

    assert sorted(result.succeeded) == ["m0", "m2"]
    assert result.permanent == {"m1": "ReceiptHandleIsInvalid"}
    assert result.transient == {}


def test_transient_failures_forever_are_reported_after_all_attempts(
    client: Any, stubber: Stubber, sleeps: Sleeps
) -> None:
    todo = entries(2)
    stubber.add_response(
        "delete_message_batch",
        {"Successful": ok(0), "Failed": [failed(1, "InternalError", False)]},
        expected_params=request(todo),
    )
    for _ in range(3):
        stubber.add_response(
            "delete_message_batch",
            {"Successful": [], "Failed": [failed(0, "InternalError", False)]},
            expected_params=request([todo[1]]),
        )

    result = caller(client, sleeps, attempts=4, base_delay=0.5).delete(todo)

    assert result.succeeded == ["m0"]
    assert result.transient == {"m1": "InternalError"}
    assert result.permanent == {}
    # A backoff before every retry, each bounded by the exponential ceiling.
    assert len(sleeps) == 3
    for attempt, delay in enumerate(sleeps, start=1):
        assert 0 <= delay <= 0.5 * 2**attempt


def test_a_whole_call_failing_transiently_is_retried(
    client: Any, stubber: Stubber, sleeps: Sleeps
) -> None:
    todo = entries(2)
    stubber.add_client_error(
        "delete_message_batch",
        service_error_code="ServiceUnavailable",
        service_message="try again",
        http_status_code=503,
        expected_params=request(todo),
    )
    stubber.add_response(
        "delete_message_batch",
        {"Successful": ok(0, 1), "Failed": []},
        expected_params=request(todo),
    )

    result = caller(client, sleeps).delete(todo)

    assert sorted(result.succeeded) == ["m0", "m1"]
    assert result.transient == {}
    assert len(sleeps) == 1


def test_a_whole_call_failing_transiently_forever_reports_every_entry(
    client: Any, stubber: Stubber, sleeps: Sleeps
) -> None:
    todo = entries(2)
    for _ in range(2):
        stubber.add_client_error(
            "delete_message_batch",
            service_error_code="ThrottlingException",
            http_status_code=400,
            expected_params=request(todo),
        )

    result = caller(client, sleeps, attempts=2).delete(todo)

    assert result.transient == {"m0": "ThrottlingException", "m1": "ThrottlingException"}
    assert result.succeeded == []


def test_access_denied_raises_sqs_access_error(
    client: Any, stubber: Stubber, sleeps: Sleeps
) -> None:
    stubber.add_client_error(
        "delete_message_batch",
        service_error_code="AccessDenied",
        service_message="not allowed",
        http_status_code=403,
        expected_params=request(entries(1)),
    )

    with pytest.raises(SqsAccessError) as info:
        caller(client, sleeps).delete(entries(1))

    message = str(info.value)
    assert "sqs:DeleteMessage" in message
    assert QUEUE_URL in message
    assert "Fix:" in message
    assert info.value.retriable is False
    assert sleeps == []


def test_deleted_queue_raises_queue_not_found(
    client: Any, stubber: Stubber, sleeps: Sleeps
) -> None:
    stubber.add_client_error(
        "change_message_visibility_batch",
        service_error_code="AWS.SimpleQueueService.NonExistentQueue",
        http_status_code=400,
    )
    with pytest.raises(QueueNotFoundError, match="does not exist"):
        caller(client, sleeps).change_visibility(entries(1), 0)


class RecordingClient:
    """Thread-safe fake for the parallel path (Stubber is order-dependent)."""

    def __init__(self, fail_first: Iterable[str] = ()) -> None:
        self.lock = threading.Lock()
        self.calls: list[list[str]] = []
        self.fail_first = set(fail_first)

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        assert QueueUrl == QUEUE_URL
        assert len(Entries) <= 10
        handles = [e["ReceiptHandle"] for e in Entries]
        with self.lock:
            self.calls.append(handles)
            bad = {h for h in handles if h in self.fail_first}
            self.fail_first -= bad
        return {
            "Successful": [{"Id": e["Id"]} for e in Entries if e["ReceiptHandle"] not in bad],
            "Failed": [
                {"Id": e["Id"], "Code": "InternalError", "SenderFault": False}
                for e in Entries
                if e["ReceiptHandle"] in bad
            ],
        }


@pytest.mark.parametrize("kept", [False, True], ids=["own-pool", "process-pool"])
def test_parallel_calls_cover_every_entry_exactly_once(sleeps: Sleeps, kept: bool) -> None:
    fake = RecordingClient(fail_first={"h3", "h47"})
    todo = entries(95)
    pool = process_pool(4) if kept else None

    result = BatchCaller(fake, QUEUE_URL, parallelism=4, sleep=sleeps, pool=pool).delete(todo)

    assert sorted(result.succeeded) == sorted(e.message_id for e in todo)
    assert result.transient == {} and result.permanent == {}
    # Ten calls of at most ten cover every entry once; then the two failed entries are retried
    # alone.
    first_calls = sorted((c for c in fake.calls if len(c) > 1), key=lambda c: int(c[0][1:]))
    assert [len(c) for c in first_calls] == [10] * 9 + [5]
    assert [h for c in first_calls for h in c] == [e.receipt_handle for e in todo]
    assert sorted(c for c in fake.calls if len(c) == 1) == [["h3"], ["h47"]]


def test_receipt_handles_are_not_in_entry_repr() -> None:
    assert "secret-handle" not in repr(Entry("m1", "secret-handle"))


def test_the_process_pool_is_kept_and_a_failure_is_raised_once_every_call_ended(
    sleeps: Sleeps,
) -> None:
    assert process_pool() is process_pool()
    ended: list[str] = []

    class OneDenied(RecordingClient):
        def delete_message_batch(
            self, QueueUrl: str, Entries: list[dict[str, Any]]
        ) -> dict[str, Any]:
            first = Entries[0]["ReceiptHandle"]
            try:
                if first == "h0":
                    raise client_error("AccessDenied", 403, "DeleteMessageBatch")
                return super().delete_message_batch(QueueUrl, Entries)
            finally:
                with self.lock:
                    ended.append(first)

    caller = BatchCaller(OneDenied(), QUEUE_URL, sleep=sleeps, pool=process_pool())
    with pytest.raises(SqsAccessError):
        caller.delete(entries(50))
    # Every call had ended when the error reached the caller, as with a pool of its own.
    assert sorted(ended, key=lambda h: int(h[1:])) == [f"h{i}" for i in range(0, 50, 10)]
