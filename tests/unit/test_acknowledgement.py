"""Batch deletes / visibility changes (BatchCaller) and cumulative acknowledgement."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pytest
from botocore.stub import Stubber

from spark_sqs.driver.acknowledger import Acknowledger
from spark_sqs.driver.heartbeat import BatchVisibility
from spark_sqs.errors import QueueNotFoundError, SqsAccessError, SqsSourceError, TransientSqsError
from spark_sqs.sqs.batching import BatchCaller, BatchResult, Entry, chunks
from tests.fakes import NOW, Clock, FakeJournal, stub_sqs_client
from tests.unit.factories import QUEUE_URL


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


# -- BatchCaller -------------------------------------------------------------------------------


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


def test_parallel_calls_cover_every_entry_exactly_once(sleeps: Sleeps) -> None:
    fake = RecordingClient(fail_first={"h3", "h47"})
    todo = entries(95)

    result = BatchCaller(fake, QUEUE_URL, parallelism=4, sleep=sleeps).delete(todo)

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


# -- Acknowledger ------------------------------------------------------------------------------

VISIBILITY = 120
WINDOW = 3600.0


Outcome = BatchResult | Exception


class FakeCaller:
    """Answers ``delete`` with ``outcomes(entries)``; succeeds for everything by default."""

    def __init__(self, outcomes: Callable[[list[Entry]], Outcome] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.outcomes = outcomes or (lambda es: BatchResult(succeeded=[e.message_id for e in es]))

    def delete(self, entries: Sequence[Entry]) -> BatchResult:
        self.calls.append([e.message_id for e in entries])
        outcome = self.outcomes(list(entries))
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def handles(batch: int, count: int) -> list[tuple[str, str]]:
    return [(f"b{batch}-m{i}", f"b{batch}-h{i}") for i in range(count)]


def batch_of_call(call: list[str]) -> int:
    return int(call[0].split("-")[0][1:])


def make_acknowledger(
    journal: FakeJournal,
    fake: FakeCaller,
    *,
    delete: bool = True,
    clock: Clock | None = None,
    wall: Clock | None = None,
    retry_after: float = 5.0,
    heartbeat: Any = None,
) -> tuple[Acknowledger, list[int]]:
    acked: list[int] = []
    ack = Acknowledger(
        journal,
        fake,  # type: ignore[arg-type]
        delete=delete,
        on_acked=acked.append,
        visibility_timeout=VISIBILITY,
        dedupe_window=WINDOW,
        heartbeat=heartbeat,
        clock=clock or Clock(100.0),
        wall_clock=wall or Clock(NOW),
        retry_after=retry_after,
    )
    return ack, acked


def test_acknowledges_every_pending_batch_up_to_n() -> None:
    journal = FakeJournal({1: handles(1, 3), 2: handles(2, 2), 3: handles(3, 1)})
    fake = FakeCaller()
    ack, acked = make_acknowledger(journal, fake)
    ack.start(0, [1, 2, 3])

    stats = ack.acknowledge_through(2)

    assert [batch_of_call(c) for c in fake.calls] == [1, 2]
    assert fake.calls[0] == ["b1-m0", "b1-m1", "b1-m2"]
    assert journal.removed == [1, 2]
    # Drop sets of the batches before the oldest pending one go at start (what a dead run
    # left) and after each acknowledgement.
    assert journal.collected == [1, 2, 3]
    assert acked == [1, 2]
    assert ack.acked_batch == 2
    assert ack.pending == [3]
    assert (stats.batches, stats.deleted, stats.delete_failed, stats.pending_retry) == (2, 5, 0, 0)
    assert stats.uncertain == 0
    assert journal.dedupe == {}


def test_deletes_use_the_journaled_receipt_handles() -> None:
    journal = FakeJournal({1: handles(1, 2)})
    seen: list[list[tuple[str, str]]] = []

    def outcome(es: list[Entry]) -> Outcome:
        seen.append([(e.message_id, e.receipt_handle) for e in es])
        return BatchResult(succeeded=[e.message_id for e in es])

    ack, _ = make_acknowledger(journal, FakeCaller(outcome))
    ack.start(0, [1])
    ack.acknowledge_through(1)

    assert seen == [[("b1-m0", "b1-h0"), ("b1-m1", "b1-h1")]]


def test_acknowledging_again_does_nothing() -> None:
    journal = FakeJournal({1: handles(1, 2)})
    fake = FakeCaller()
    ack, acked = make_acknowledger(journal, fake)
    ack.start(0, [1])
    ack.acknowledge_through(1)
    reads = len(journal.reads)

    stats = ack.acknowledge_through(1)
    ack.acknowledge_through(0)

    assert len(fake.calls) == 1
    assert len(journal.reads) == reads
    assert acked == [1]
    assert journal.removed == [1]
    assert stats.batches == 0 and stats.deleted == 0
    assert ack.totals.batches == 1 and ack.totals.deleted == 2


def test_tracked_batches_are_acknowledged_once_committed() -> None:
    journal = FakeJournal({})
    fake = FakeCaller()
    ack, acked = make_acknowledger(journal, fake)
    ack.start(4, [])
    ack.track(5)
    journal.add_pairs(5, handles(5, 2))

    assert ack.acknowledge_through(4).batches == 0
    assert fake.calls == []
    assert ack.acknowledge_through(5).batches == 1
    assert acked == [5]
    assert ack.pending == []


def test_transient_failure_keeps_the_batch_pending_until_retry_after() -> None:
    journal = FakeJournal({1: handles(1, 2), 2: handles(2, 1)})
    outcomes: list[Outcome] = [
        BatchResult(succeeded=["b1-m0"], transient={"b1-m1": "InternalError"}),
    ]
    fake = FakeCaller(
        lambda es: outcomes.pop(0) if outcomes else BatchResult([e.message_id for e in es])
    )
    clock = Clock(100.0)
    ack, acked = make_acknowledger(journal, fake, clock=clock, retry_after=5.0)
    ack.start(0, [1, 2])

    stats = ack.acknowledge_through(2)

    assert stats.pending_retry == 1
    assert stats.batches == 0
    assert ack.pending == [1, 2]
    assert ack.acked_batch == 0
    assert acked == []
    assert journal.removed == []
    # Later batches wait behind the failed one.
    assert [batch_of_call(c) for c in fake.calls] == [1]

    clock.now += 4.9
    assert ack.acknowledge_through(2).batches == 0
    assert len(fake.calls) == 1, "retried before retry_after"

    clock.now += 0.2
    stats = ack.acknowledge_through(2)
    assert stats.batches == 2
    assert [batch_of_call(c) for c in fake.calls] == [1, 1, 2]
    assert acked == [1, 2]
    assert journal.removed == [1, 2]
    assert ack.pending == []


def test_later_batches_wait_behind_a_failed_one() -> None:
    journal = FakeJournal({1: handles(1, 1), 2: handles(2, 1), 3: handles(3, 1)})

    def outcome(es: list[Entry]) -> Outcome:
        if es[0].message_id.startswith("b2-"):
            return BatchResult(transient={"b2-m0": "ServiceUnavailable"})
        return BatchResult(succeeded=[e.message_id for e in es])

    fake = FakeCaller(outcome)
    ack, acked = make_acknowledger(journal, fake)
    ack.start(0, [1, 2, 3])

    ack.acknowledge_through(3)

    assert [batch_of_call(c) for c in fake.calls] == [1, 2]
    assert acked == [1]
    assert ack.acked_batch == 1
    assert ack.pending == [2, 3]
    assert journal.removed == [1]
    assert 3 in journal.entries


def test_retriable_exception_from_the_caller_keeps_the_batch_pending() -> None:
    journal = FakeJournal({1: handles(1, 3)})
    fake = FakeCaller(lambda es: TransientSqsError("network down"))
    ack, acked = make_acknowledger(journal, fake)
    ack.start(0, [1])

    stats = ack.acknowledge_through(1)

    assert stats.pending_retry == 3
    assert ack.pending == [1]
    assert acked == []
    assert journal.removed == []


def test_non_retriable_exception_from_the_caller_propagates() -> None:
    journal = FakeJournal({1: handles(1, 1)})
    fake = FakeCaller(lambda es: SqsAccessError("denied. Fix: allow sqs:DeleteMessage"))
    ack, acked = make_acknowledger(journal, fake)
    ack.start(0, [1])

    with pytest.raises(SqsAccessError):
        ack.acknowledge_through(1)
    assert ack.pending == [1]
    assert acked == []
    assert journal.removed == []


def test_permanent_failures_do_not_block_acknowledgement_and_are_deduped() -> None:
    journal = FakeJournal({1: handles(1, 3)})
    fake = FakeCaller(
        lambda es: BatchResult(
            succeeded=["b1-m0", "b1-m2"], permanent={"b1-m1": "ReceiptHandleIsInvalid"}
        )
    )
    ack, acked = make_acknowledger(journal, fake)
    ack.start(0, [1])

    stats = ack.acknowledge_through(1)

    assert (stats.batches, stats.deleted, stats.delete_failed) == (1, 2, 1)
    assert acked == [1]
    assert journal.removed == [1]
    # SQS may deliver b1-m1 again: its id is remembered for the dedupe window.
    assert journal.dedupe == {1: (["b1-m1"], NOW + WINDOW)}
    assert stats.uncertain == 1
    assert "b1-m1" in ack.drop_ids(2)


def test_expired_receipt_handles_are_deleted_and_recorded_for_dedupe() -> None:
    # Received 200 s ago with a 120 s visibility timeout and no heartbeat: on a standard queue
    # SQS answers the delete with success but may keep the message.
    journal = FakeJournal({1: handles(1, 2)}, received_at=NOW - 200)
    fake = FakeCaller()
    ack, acked = make_acknowledger(journal, fake)
    ack.start(0, [1])

    stats = ack.acknowledge_through(1)

    assert fake.calls == [["b1-m0", "b1-m1"]]
    assert journal.dedupe == {1: (["b1-m0", "b1-m1"], NOW + WINDOW)}
    assert stats.uncertain == 2
    assert acked == [1]


def test_handles_about_to_expire_are_recorded_for_dedupe() -> None:
    # 3 s of visibility left is within the safety margin (max(2 s, 5 % of 120 s) = 6 s).
    journal = FakeJournal({1: handles(1, 1)}, received_at=NOW - VISIBILITY + 3)
    ack, _ = make_acknowledger(journal, FakeCaller())
    ack.start(0, [1])
    assert ack.acknowledge_through(1).uncertain == 1


def test_fresh_handles_are_not_recorded_for_dedupe() -> None:
    journal = FakeJournal({1: handles(1, 1)}, received_at=NOW - VISIBILITY + 60)
    ack, _ = make_acknowledger(journal, FakeCaller())
    ack.start(0, [1])
    assert ack.acknowledge_through(1).uncertain == 0
    assert journal.dedupe == {}


def test_delete_false_removes_entries_without_deleting() -> None:
    journal = FakeJournal({1: handles(1, 2), 2: handles(2, 2)}, received_at=NOW - 10_000)
    fake = FakeCaller(lambda es: SqsSourceError("must not be called"))
    ack, acked = make_acknowledger(journal, fake, delete=False)
    ack.start(0, [1, 2])

    stats = ack.acknowledge_through(2)

    assert fake.calls == []
    assert journal.removed == [1, 2]
    assert acked == [1, 2]
    assert stats.batches == 2
    assert stats.deleted == 0
    assert ack.pending == []
    # Messages are meant to come back: nothing is recorded to drop them.
    assert journal.dedupe == {}


def test_batch_without_entries_is_acknowledged_without_calls() -> None:
    journal = FakeJournal({})
    fake = FakeCaller()
    ack, acked = make_acknowledger(journal, fake)
    ack.start(0, [1])

    assert ack.acknowledge_through(1).batches == 1
    assert fake.calls == []
    assert acked == [1]


def test_on_acked_gets_the_watermark_which_never_goes_back() -> None:
    # A restart found entries of batch 3 although batch 7 was already acknowledged (the driver
    # stopped between recording the watermark and removing the entries).
    journal = FakeJournal({3: handles(3, 1), 8: handles(8, 1), 9: handles(9, 1)})
    fake = FakeCaller()
    ack, acked = make_acknowledger(journal, fake)
    ack.start(7, [3, 8, 9])

    ack.acknowledge_through(9)

    assert acked == [7, 8, 9]
    assert ack.acked_batch == 9
    assert journal.removed == [3, 8, 9]


def test_watermark_is_recorded_before_entries_are_removed() -> None:
    journal = FakeJournal({1: handles(1, 1)})
    events: list[str] = []
    original_remove = journal.remove_batch

    def remove(batch: int) -> None:
        events.append(f"remove {batch}")
        original_remove(batch)

    journal.remove_batch = remove  # type: ignore[method-assign]
    ack = Acknowledger(
        journal,
        FakeCaller(),  # type: ignore[arg-type]
        delete=True,
        on_acked=lambda b: events.append(f"acked {b}"),
        visibility_timeout=VISIBILITY,
        dedupe_window=WINDOW,
        wall_clock=Clock(NOW),
    )
    ack.start(0, [1])
    ack.acknowledge_through(1)

    assert events == ["acked 1", "remove 1"]


# -- drop_ids (redelivery dedupe) --------------------------------------------------------------


def test_drop_ids_are_recorded_ids_and_ids_of_unacknowledged_batches() -> None:
    journal = FakeJournal({4: handles(4, 2), 6: handles(6, 1)})
    journal.write_dedupe(2, ["old-1", "old-2"], NOW + 100)
    journal.write_dedupe(3, ["expired"], NOW - 1)
    wall = Clock(NOW)
    ack, _ = make_acknowledger(journal, FakeCaller(), wall=wall)
    ack.start(3, [4, 6])

    # Batch 5 is being planned: batch 4 is not acknowledged yet, batch 6 is later.
    assert ack.drop_ids(5) == {"old-1", "old-2", "b4-m0", "b4-m1"}

    wall.now += 100
    assert ack.drop_ids(5) == {"b4-m0", "b4-m1"}, "recorded ids expire"

    ack.acknowledge_through(6)
    assert ack.drop_ids(7) == frozenset()


# -- with a heartbeat --------------------------------------------------------------------------


class FakeHeartbeat:
    def __init__(self, events: list[str], lost: frozenset[str] = frozenset()) -> None:
        self.events = events
        self.lost = lost
        self.expires_at: dict[str, float] = {}
        self.watched: list[int] = []
        self.lock = self

    def __enter__(self) -> None:
        self.events.append("lock")

    def __exit__(self, *exc: object) -> None:
        self.events.append("unlock")

    def watch(self, batch: int, planned: bool = False) -> None:
        self.watched.append(batch)

    def forget(self, batch: int) -> None:
        self.events.append(f"forget {batch}")

    def snapshot(self, batch: int) -> BatchVisibility:
        return BatchVisibility(expires_at=dict(self.expires_at), lost=self.lost)


def test_heartbeat_watches_pending_batches_and_forgets_one_before_deleting_it() -> None:
    events: list[str] = []
    heartbeat = FakeHeartbeat(events)
    journal = FakeJournal({2: handles(2, 1)})

    def outcome(es: list[Entry]) -> Outcome:
        events.append("delete")
        return BatchResult(succeeded=[e.message_id for e in es])

    ack, _ = make_acknowledger(journal, FakeCaller(outcome), heartbeat=heartbeat)
    ack.start(1, [2])
    ack.track(3)
    assert heartbeat.watched == [2, 3]

    ack.acknowledge_through(2)

    # No extension of the batch starts once its deletion starts.
    assert events.index("forget 2") < events.index("delete")


def test_heartbeat_lost_messages_are_recorded_for_dedupe() -> None:
    heartbeat = FakeHeartbeat([], lost=frozenset({"b1-m1"}))
    journal = FakeJournal({1: handles(1, 2)})
    ack, _ = make_acknowledger(journal, FakeCaller(), heartbeat=heartbeat)
    ack.start(0, [1])

    ack.acknowledge_through(1)

    assert journal.dedupe == {1: (["b1-m1"], NOW + WINDOW)}


def test_heartbeat_extensions_keep_old_handles_valid() -> None:
    # Received long ago, but the heartbeat extended the visibility until a minute from now.
    heartbeat = FakeHeartbeat([])
    journal = FakeJournal({1: handles(1, 2)}, received_at=NOW - 3600)
    heartbeat.expires_at = {"b1-m0": NOW + 60, "b1-m1": NOW + 60}
    ack, _ = make_acknowledger(journal, FakeCaller(), heartbeat=heartbeat)
    ack.start(0, [1])

    assert ack.acknowledge_through(1).uncertain == 0
    assert journal.dedupe == {}


def test_driver_parallelism_grows_with_receivers_within_bounds() -> None:
    from spark_sqs.driver.acknowledger import driver_parallelism

    assert driver_parallelism(1) == 8
    assert driver_parallelism(4) == 16
    assert driver_parallelism(8) == 32
    assert driver_parallelism(1000) == 64
