"""Poison batches (spark_sqs/journal/, driver/ and executor/poison.py): attempt counting,
narrowing, idempotent quarantine, release. Journal on a tmp dir; SQS in-process (moto's
mock_aws). One decision spread over three modules, so one file here beside the
modules' own tests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spark_sqs.cli import main
from spark_sqs.driver import poison as driver_poison
from spark_sqs.driver.planning import ADOPTED_FROM, ReceiverPartition
from spark_sqs.errors import InvalidOptionError, JournalInUseError
from spark_sqs.executor import poison as executor_poison
from spark_sqs.journal import LIVE, BatchPlan, Journal, JournalState, ReceiverPlan
from spark_sqs.journal import poison as records
from spark_sqs.journal.entries import entry_key
from spark_sqs.journal.lease import Lease
from spark_sqs.schema import messages_to_table
from tests.factories import QUEUE_URL, make_options, sqs_message
from tests.fakes import NOW, Clock

DLQ_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq"


def _ids(table: Any) -> list[str]:
    return table.column("messageId").to_pylist()


def _journal_with_batch(tmp_path: Any, batch: int, per_receiver: list[list[int]], **extra: Any):
    location = str(tmp_path / "j")
    options = make_options(location, **extra)
    journal = Journal(location, options)
    journal.plans.write(
        BatchPlan(batch, tuple(ReceiverPlan(r, len(ns)) for r, ns in enumerate(per_receiver)))
    )
    for receiver, numbers in enumerate(per_receiver):
        journal.entries.write(
            batch, receiver, messages_to_table([sqs_message(n) for n in numbers], QUEUE_URL)
        )
    journal.state.write(JournalState(planned_batch=batch, acked_batch=batch - 1, initial_batch=0))
    return journal, options


def _mid(n: int) -> str:
    return sqs_message(n)["MessageId"]


# -- the decision --


def test_a_batch_is_replayed_whole_until_it_failed_max_batch_attempts_times() -> None:
    entries = {0: ["a", "b", "c"], 1: ["d", "e"]}
    assert driver_poison.decide(None, {0: 2}, entries, threshold=3).kind == "replay"
    decision = driver_poison.decide(None, {0: 3}, entries, threshold=3)
    assert decision.kind == "narrow"
    assert decision.keep == {0: ["a", "b", "c"], 1: []}
    assert decision.carried == {1: ["d", "e"]}


def test_each_failed_step_halves_the_candidates_until_one_is_quarantined() -> None:
    entries = {0: ["a", "b", "c", "d", "e"]}
    narrowing = None
    sizes = []
    for step in range(10):
        decision = driver_poison.decide(narrowing, {step: 3}, entries, threshold=3)
        if decision.kind == "quarantine":
            break
        sizes.append(sum(len(v) for v in decision.keep.values()))
        narrowing = records.Narrowing(step + 1, decision.keep, decision.carried)
    assert sizes == [3, 2, 1]
    assert decision.quarantined == (0, "a")
    assert decision.keep == {0: []}
    # A step that has not failed yet (a run that died before reading) is replayed as it is.
    assert driver_poison.decide(narrowing, {0: 3}, entries, threshold=3).kind == "replay"


def test_receivers_the_narrowing_does_not_cover_join_the_candidates() -> None:
    narrowing = records.Narrowing(1, {0: ["a"]}, {0: ["b"]})
    entries = {0: ["a", "b"], 1: ["x", "y", "z"]}
    assert driver_poison.candidates(narrowing, entries) == [(0, "a"), (1, "x"), (1, "y"), (1, "z")]
    decision = driver_poison.decide(narrowing, {1: 1}, entries, threshold=3)
    assert decision.keep == {0: ["a"], 1: ["x"]} and decision.carried == {1: ["y", "z"]}


def test_a_suspect_batch_first_keeps_exactly_the_newest_carry() -> None:
    # Receivers 10000/10001 deliver an older carry (clean: it was carried out of a replay that
    # then failed without it) and the newest carry (taken out of a replay that succeeded).
    entries = {0: [], 10000: ["a", "b", "c"], 10001: ["p", "q"]}
    suspect = frozenset({"p", "q"})
    decision = driver_poison.decide(None, {0: 1}, entries, threshold=1, suspect=suspect)
    assert decision.kind == "narrow"
    assert decision.keep == {0: [], 10000: [], 10001: ["p", "q"]}
    assert decision.carried == {10000: ["a", "b", "c"]}
    # Later steps halve as usual.
    step = records.Narrowing(1, decision.keep, decision.carried)
    later = driver_poison.decide(step, {0: 1, 1: 1}, entries, threshold=1, suspect=suspect)
    assert later.keep == {0: [], 10000: [], 10001: ["p"]} and later.carried == {10001: ["q"]}


def test_a_lone_candidate_waits_for_receivers_that_never_journaled() -> None:
    """A receiver without an entry receives fresh messages on every replay and yields only
    once journaled: failures so far are no evidence against the one candidate, whose
    quarantine waits for ``threshold`` more failed attempts at the step, and no longer."""
    entries = {1: ["m"]}
    waiting = driver_poison.decide(None, {0: 2}, entries, threshold=2, unjournaled=True)
    assert waiting.kind == "replay" and waiting.deferred == (1, "m")
    assert driver_poison.decide(None, {0: 3}, entries, threshold=2, unjournaled=True).kind == (
        "replay"
    )
    bounded = driver_poison.decide(None, {0: 4}, entries, threshold=2, unjournaled=True)
    assert bounded.kind == "quarantine" and bounded.quarantined == (1, "m")
    # Without such a receiver, or at a later step (one failure, then ``threshold`` more).
    assert driver_poison.decide(None, {0: 2}, entries, threshold=2).kind == "quarantine"
    step = records.Narrowing(2, {1: ["m"]}, {1: ["n"]})
    assert driver_poison.decide(step, {2: 2}, entries, threshold=2, unjournaled=True).deferred
    assert driver_poison.decide(step, {2: 3}, entries, 2, unjournaled=True).kind == "quarantine"
    # Narrowing carries nothing away for good: it goes on as before.
    two = driver_poison.decide(None, {0: 2}, {1: ["m", "n"]}, threshold=2, unjournaled=True)
    assert two.kind == "narrow" and two.carried == {1: ["n"]}


# -- attempt counting --


def test_a_retried_record_of_one_attempt_is_one_record(tmp_path: Any) -> None:
    journal, _ = _journal_with_batch(tmp_path, 5, [[1, 2]])
    executor_poison.record_attempt(journal, 5, 0, "run1-s0-t0", 0)
    executor_poison.record_attempt(journal, 5, 0, "run1-s0-t0", 0)  # the same attempt, again
    executor_poison.record_attempt(journal, 5, 1, "run1-s0-t0", 0)  # another receiver, same attempt
    executor_poison.record_attempt(journal, 5, 0, "run1-s0-t1", 0)  # a retried task
    executor_poison.record_attempt(journal, 5, 0, "run2-s0-t0", 1)  # a new run, narrowed
    attempts = journal.poison.attempts(5)
    assert len(attempts) == 4
    assert records.attempts_by_step(attempts) == {0: 2, 1: 1}


def _partition(options: Any, batch: int, receiver: int, run: str) -> ReceiverPartition:
    return ReceiverPartition(batch, receiver, 10, QUEUE_URL, options, run=run)


def test_policy_fail_refuses_a_replay_after_max_batch_attempts_naming_the_release_command(
    tmp_path: Any,
) -> None:
    journal, options = _journal_with_batch(tmp_path, 7, [[1, 2, 3]], maxBatchAttempts="2")
    # The first attempt (run r1) is named in the entry it journaled, not in a record.
    table = journal.entries.read(7, 0)
    metadata = {**(table.schema.metadata or {}), records.FIRST_ATTEMPT: b"r1-s0-t0"}
    table = table.replace_schema_metadata(metadata)
    # The same run reading again (another Spark job of one foreachBatch) is the same attempt.
    first = executor_poison.on_replay(journal, _partition(options, 7, 0, "r1"), table)
    assert _ids(first.table) == _ids(table) and first.status == LIVE
    again = executor_poison.on_replay(journal, _partition(options, 7, 0, "r2"), table)
    assert again.table.num_rows == 3
    again = executor_poison.on_replay(journal, _partition(options, 7, 0, "r2"), table)
    assert again.table.num_rows == 3
    with pytest.raises(executor_poison.PoisonBatchError) as raised:
        executor_poison.on_replay(journal, _partition(options, 7, 0, "r3"), table)
    message = str(raised.value)
    assert "batch 7 has been read by 3 attempts" in message
    assert f"spark-sqs release --journal {journal.location} --batch 7" in message
    assert journal.entries.read(7, 0) is not None, "nothing removed"


def test_policy_dead_letter_replays_only_what_the_narrowing_keeps(tmp_path: Any) -> None:
    journal, options = _journal_with_batch(
        tmp_path, 7, [[1, 2, 3], [4]], poisonMessagePolicy="deadLetter", deadLetterQueueUrl=DLQ_URL
    )
    narrowing = records.Narrowing(1, {0: [_mid(2)]}, {0: [_mid(1), _mid(3)]})
    journal.store.create("batches/000000000007/_narrow-0001.json", narrowing.to_json())
    kept = executor_poison.on_replay(
        journal, _partition(options, 7, 0, "r9"), journal.entries.read(7, 0)
    )
    assert _ids(kept.table) == [_mid(2)]
    untouched = executor_poison.on_replay(
        journal, _partition(options, 7, 1, "r9"), journal.entries.read(7, 1)
    )
    assert _ids(untouched.table) == [_mid(4)]
    assert records.attempts_by_step(journal.poison.attempts(7)) == {1: 1}


# -- narrowing and quarantine on the driver --


@pytest.fixture
def sqs(mocked_sqs: Any) -> Any:
    mocked_sqs.create_queue(QueueName="orders")
    mocked_sqs.create_queue(QueueName="orders-dlq")
    mocked_sqs.create_queue(QueueName="orders-dlq.fifo", Attributes={"FifoQueue": "true"})
    return mocked_sqs


class _Driver:
    """The driver's callbacks: batch numbers for carry batches, pending batches."""

    def __init__(self, planned: int) -> None:
        self.planned = planned
        self.tracked: list[int] = []

    def reserve(self) -> int:
        self.planned += 1
        return self.planned


def _quarantine(journal: Any, options: Any, client: Any, driver: _Driver, dlq: str = DLQ_URL):
    return driver_poison.Quarantine(
        journal,
        client,
        QUEUE_URL,
        dlq,
        options,
        reserve_batch=driver.reserve,
        track=lambda batch, **_: driver.tracked.append(batch),
        # No other query here: the lease is this test's own (the lease tests cover losing it).
        confirm=lambda: None,
    )


def _dlq_messages(client: Any, url: str = DLQ_URL) -> list[dict[str, Any]]:
    out = []
    while True:
        got = client.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        ).get("Messages", [])
        if not got:
            return out
        out += got


def _fail_once_more(journal: Any, batch: int, run: str, receivers: list[int]) -> None:
    """A run that replayed the batch (under its latest step) and failed."""
    latest = journal.poison.latest_narrowing(batch)
    for receiver in receivers:
        executor_poison.record_attempt(
            journal, batch, receiver, f"{run}-s0-t0", latest.step if latest else 0
        )


def test_narrowing_carries_the_rest_out_and_quarantines_the_last_message_once(
    tmp_path: Any, sqs: Any
) -> None:
    journal, options = _journal_with_batch(
        tmp_path, 4, [[1, 2], [3, 4]], poisonMessagePolicy="deadLetter", maxBatchAttempts="2"
    )
    driver = _Driver(planned=4)
    quarantine = _quarantine(journal, options, sqs, driver)
    for run in ("r1", "r2"):
        _fail_once_more(journal, 4, run, [0, 1])
    # Step 1: the first half stays, the second half goes to carry batch 5.
    step = quarantine.prepare_replay(4, [0, 1])
    assert step is not None and step.step == 1 and step.carry_batch == 5
    assert step.keep == {0: [_mid(1), _mid(2)], 1: []}
    assert driver.tracked == [5]
    assert _ids(journal.entries.read(5, 1)) == [_mid(3), _mid(4)]
    # The carry batch has no plan: its record names its receivers, read by key.
    assert journal.batches.live_receivers(5) == (1,)
    assert driver_poison.carry_batches(journal, [4, 5]) == [5]
    # Planning again without a new failure changes nothing (a run that died before reading).
    assert quarantine.prepare_replay(4, [0, 1]) == step
    _fail_once_more(journal, 4, "r3", [0, 1])
    step = quarantine.prepare_replay(4, [0, 1])
    assert step.step == 2 and step.keep == {0: [_mid(1)], 1: []} and step.carry_batch == 6
    assert _ids(journal.entries.read(6, 0)) == [_mid(2)]
    _fail_once_more(journal, 4, "r4", [0, 1])
    step = quarantine.prepare_replay(4, [0, 1])
    assert step.step == 3 and step.quarantined == (_mid(1),) and step.keep == {0: [], 1: []}
    sent = _dlq_messages(sqs)
    assert len(sent) == 1
    info = json.loads(
        sent[0]["MessageAttributes"][driver_poison.QUARANTINE_ATTRIBUTE]["StringValue"]
    )
    assert info["sourceQueue"] == QUEUE_URL and info["messageId"] == _mid(1)
    assert info["batch"] == 4 and info["batchAttempts"] == 4
    assert info["approximateReceiveCount"] == 1
    assert sent[0]["Body"] == sqs_message(1)["Body"]
    # Every later plan of the batch finishes what is undone, and sends nothing twice.
    for _ in range(2):
        assert quarantine.prepare_replay(4, [0, 1]).step == 3
    assert _dlq_messages(sqs) == []
    assert [q["messageId"] for q in journal.poison.quarantined()] == [_mid(1)]
    assert journal.poison.quarantined()[0]["sent"] is True


def test_a_crash_between_decision_and_send_sends_once_on_the_next_plan(
    tmp_path: Any, sqs: Any
) -> None:
    journal, options = _journal_with_batch(
        tmp_path, 4, [[1]], poisonMessagePolicy="deadLetter", maxBatchAttempts="1"
    )
    _fail_once_more(journal, 4, "r1", [0])
    failing = _FailingSend(sqs)
    with pytest.raises(Exception, match="deadLetterQueueUrl"):
        _quarantine(journal, options, failing, _Driver(4)).prepare_replay(4, [0])
    # The decision was recorded before the send; the batch delivers nothing of the message.
    assert journal.poison.latest_narrowing(4).quarantined == (_mid(1),)
    assert journal.poison.quarantined()[0]["sent"] is False
    assert _dlq_messages(sqs) == []
    _quarantine(journal, options, sqs, _Driver(4)).prepare_replay(4, [0])
    _quarantine(journal, options, sqs, _Driver(4)).prepare_replay(4, [0])
    assert len(_dlq_messages(sqs)) == 1


class _FailingSend:
    def __init__(self, client: Any) -> None:
        self._client = client

    def send_message(self, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "SendMessage")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_fifo_dead_letter_queue_gets_a_deterministic_deduplication_id(
    tmp_path: Any, sqs: Any
) -> None:
    fifo = DLQ_URL + ".fifo"
    journal, options = _journal_with_batch(
        tmp_path, 4, [[1]], poisonMessagePolicy="deadLetter", maxBatchAttempts="1"
    )
    _fail_once_more(journal, 4, "r1", [0])
    _quarantine(journal, options, sqs, _Driver(4), dlq=fifo).prepare_replay(4, [0])
    # A crash after the send, before its marker: the resend is deduplicated by SQS.
    journal.store.delete(f"quarantine/{4:012d}-{_mid(1)}.sent")
    _quarantine(journal, options, sqs, _Driver(4), dlq=fifo).prepare_replay(4, [0])
    assert len(_dlq_messages(sqs, fifo)) == 1


def test_a_message_with_ten_attributes_has_its_body_wrapped_instead() -> None:
    attributes = {f"a{i}": {"DataType": "String", "StringValue": str(i)} for i in range(10)}
    table = messages_to_table([sqs_message(1, attributes=attributes)], QUEUE_URL)
    row = table.to_pylist()[0]
    info = {"messageId": "m", "quarantineId": "q"}
    request = driver_poison.dead_letter_request(DLQ_URL, row, info)
    assert len(request["MessageAttributes"]) == 10
    assert driver_poison.QUARANTINE_ATTRIBUTE not in request["MessageAttributes"]
    envelope = json.loads(request["MessageBody"])
    assert envelope["body"] == sqs_message(1)["Body"]
    assert envelope[driver_poison.QUARANTINE_ATTRIBUTE] == info
    fewer = driver_poison.dead_letter_request(
        DLQ_URL, messages_to_table([sqs_message(1)], QUEUE_URL).to_pylist()[0], info
    )
    assert fewer["MessageBody"] == sqs_message(1)["Body"]
    assert (
        json.loads(fewer["MessageAttributes"][driver_poison.QUARANTINE_ATTRIBUTE]["StringValue"])
        == info
    )


def test_a_batch_adopting_carried_messages_is_suspect(tmp_path: Any, sqs: Any) -> None:
    journal, options = _journal_with_batch(
        tmp_path, 4, [[1, 2]], poisonMessagePolicy="deadLetter", maxBatchAttempts="3"
    )
    quarantine = _quarantine(journal, options, sqs, _Driver(4))
    for run in ("r1", "r2", "r3"):
        _fail_once_more(journal, 4, run, [0])
    assert quarantine.prepare_replay(4, [0]).carry_batch == 5
    journal.plans.write(BatchPlan(6, (ReceiverPlan(0, 0), ReceiverPlan(10000, 0, (5, 0)))))
    quarantine.inherit(6, [5])
    journal.entries.adopt(5, 0, 6, 10000)
    journal.entries.write(6, 0, messages_to_table([], QUEUE_URL))
    _fail_once_more(journal, 6, "r4", [0, 10000])
    # One failure suffices for a suspect batch.
    step = quarantine.prepare_replay(6, [0, 10000])
    assert step is not None and step.quarantined == (_mid(2),)


# -- release --


def test_release_makes_messages_visible_and_the_replay_receives_nothing(
    tmp_path: Any, sqs: Any, capsys: Any
) -> None:
    location = str(tmp_path / "j")
    journal = Journal(location, make_options(location))
    journal.meta.check_owner(QUEUE_URL)
    sqs.send_message_batch(
        QueueUrl=QUEUE_URL,
        Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(3)],
    )
    got = sqs.receive_message(
        QueueUrl=QUEUE_URL, MaxNumberOfMessages=10, VisibilityTimeout=600, AttributeNames=["All"]
    )["Messages"]
    journal.plans.write(BatchPlan(3, (ReceiverPlan(0, 10), ReceiverPlan(1, 10))))
    journal.entries.write(3, 0, messages_to_table(got, QUEUE_URL))
    journal.state.write(JournalState(planned_batch=3, acked_batch=2, initial_batch=0))
    executor_poison.record_attempt(journal, 3, 0, "r1-s0-t0", 0)

    assert main(["release", "--journal", location, "--batch", "3", "--yes"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{") :])["madeVisible"] == 3
    visible = sqs.receive_message(QueueUrl=QUEUE_URL, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in visible) == ["m0", "m1", "m2"]
    assert journal.entries.read(3, 0) is None and journal.poison.attempts(3) == []
    plan = journal.plans.read(3)
    assert [(r.receiver, r.limit) for r in plan.receivers] == [(0, 0), (1, 0)]
    # A crash that left no plan: the driver takes the marker's zero plan.
    journal.store.delete("batches/000000000003/_plan.json")
    assert driver_poison.released_plan(journal, 3) == plan


def test_release_asks_before_it_acts(tmp_path: Any, sqs: Any, monkeypatch: Any) -> None:
    location = str(tmp_path / "j")
    journal = Journal(location, make_options(location))
    journal.meta.check_owner(QUEUE_URL)
    journal.plans.write(BatchPlan(3, (ReceiverPlan(0, 10),)))
    journal.entries.write(3, 0, messages_to_table([sqs_message(1)], QUEUE_URL))
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    assert main(["release", "--journal", location, "--batch", "3"]) == 1
    assert journal.entries.read(3, 0) is not None


# -- options --


def test_poison_options_are_validated_at_load() -> None:
    assert make_options().poison_message_policy == "fail"
    assert make_options().max_batch_attempts == 3
    assert make_options(poisonMessagePolicy="DEADLETTER").poison_message_policy == "deadLetter"
    with pytest.raises(InvalidOptionError, match="'poisonMessagePolicy' = 'drop'.*Fix: use"):
        make_options(poisonMessagePolicy="drop")
    with pytest.raises(InvalidOptionError, match="'maxBatchAttempts' = '0'.*Fix"):
        make_options(maxBatchAttempts="0")
    with pytest.raises(InvalidOptionError, match="'deadLetterQueueUrl'.*only applies.*Fix"):
        make_options(deadLetterQueueUrl=DLQ_URL)
    with pytest.raises(InvalidOptionError, match="'deadLetterQueueUrl' = 'dlq'.*Fix"):
        make_options(poisonMessagePolicy="deadLetter", deadLetterQueueUrl="dlq")
    with pytest.raises(InvalidOptionError, match="deleteOnCommit=false.*Fix"):
        make_options(poisonMessagePolicy="deadLetter", deleteOnCommit="false")


def test_the_dead_letter_queue_is_the_redrive_target_or_an_error(sqs: Any) -> None:
    options = make_options(poisonMessagePolicy="deadLetter")
    with pytest.raises(InvalidOptionError, match="no RedrivePolicy.*Fix: set 'deadLetterQueueUrl'"):
        driver_poison.resolve_dead_letter_queue(sqs, QUEUE_URL, options)
    arn = sqs.get_queue_attributes(QueueUrl=DLQ_URL, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sqs.set_queue_attributes(
        QueueUrl=QUEUE_URL,
        Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 5})
        },
    )
    assert driver_poison.resolve_dead_letter_queue(sqs, QUEUE_URL, options) == DLQ_URL
    explicit = make_options(poisonMessagePolicy="deadLetter", deadLetterQueueUrl=DLQ_URL + "2")
    assert driver_poison.resolve_dead_letter_queue(sqs, QUEUE_URL, explicit) == DLQ_URL + "2"


def test_inspect_lists_failed_batches_and_quarantined_messages(
    tmp_path: Any, sqs: Any, capsys: Any
) -> None:
    journal, options = _journal_with_batch(
        tmp_path, 4, [[1, 2]], poisonMessagePolicy="deadLetter", maxBatchAttempts="1"
    )
    _fail_once_more(journal, 4, "r1", [0])
    quarantine = _quarantine(journal, options, sqs, _Driver(4))
    quarantine.prepare_replay(4, [0])
    _fail_once_more(journal, 4, "r2", [0])
    quarantine.prepare_replay(4, [0])
    capsys.readouterr()
    assert main(["inspect", "--queue-url", QUEUE_URL, "--journal", journal.location]) == 0
    report = json.loads(capsys.readouterr().out)["journal"]
    failed = report["batchesWithFailedAttempts"]["4"]
    assert failed["attempts"] == 2 and failed["narrowingStep"] == 2 and failed["delivering"] == 0
    assert failed["carryBatches"] == [5]
    assert report["batchesWithFailedAttempts"]["5"]["carriedFrom"] == 4
    [quarantined] = report["quarantinedMessages"]
    assert quarantined["messageId"] == _mid(1) and quarantined["sent"] is True
    assert "AQEB" not in json.dumps(report), "no receipt handles in the output"


def test_read_partition_counts_the_first_attempt_in_its_entry_and_replays_in_records(
    tmp_path: Any,
) -> None:
    from dataclasses import replace

    from spark_sqs.executor.receiver import read_partition
    from tests.fakes import FakeSqs

    location = str(tmp_path / "j")
    options = make_options(location, maxBatchAttempts="2")
    journal = Journal(location, options)
    journal.plans.write(BatchPlan(3, (ReceiverPlan(0, 5),)))
    part = ReceiverPartition(3, 0, 5, QUEUE_URL, options, run="run1")
    sqs = FakeSqs(available=5)
    assert sum(b.num_rows for b in read_partition(part, client_factory=lambda: sqs)) == 5
    entry = journal.entries.read(3, 0)
    assert records.first_attempt(entry) == "run1-s0-t0"
    assert journal.poison.attempts(3) == [], "no extra write for the first attempt"

    def never() -> Any:
        raise AssertionError("a replay calls no SQS")

    rows = [b.num_rows for b in read_partition(replace(part, run="run2"), client_factory=never)]
    assert sum(rows) == 5
    assert [a.key for a in journal.poison.attempts(3)] == ["run2-s0-t0"]
    with pytest.raises(executor_poison.PoisonBatchError, match="read by 3 attempts"):
        list(read_partition(replace(part, run="run3"), client_factory=never))


def test_an_adopted_narrowed_batch_delivers_only_what_its_latest_step_keeps(
    tmp_path: Any, sqs: Any
) -> None:
    """A new checkpoint adopts a narrowed batch and its carry batch: the carried messages must
    come from the carry batch alone (found by the simulation, seed 173 with --poison)."""
    journal, options = _journal_with_batch(
        tmp_path, 4, [[1, 2], [3, 4]], poisonMessagePolicy="deadLetter", maxBatchAttempts="2"
    )
    quarantine = _quarantine(journal, options, sqs, _Driver(planned=4))
    for run in ("r1", "r2"):
        _fail_once_more(journal, 4, run, [0, 1])
    step = quarantine.prepare_replay(4, [0, 1])
    assert step is not None and step.carry_batch == 5
    for source in (0, 1):
        journal.entries.adopt(4, source, 7, 10000 + source, keep=step.keep.get(source))
        journal.entries.adopt(5, source, 7, 10002 + source)
    delivered = [
        i for r in range(10000, 10004) if (t := journal.entries.read(7, r)) for i in _ids(t)
    ]
    assert sorted(delivered) == sorted(_mid(n) for n in (1, 2, 3, 4))


def test_another_policy_is_refused_while_a_narrowed_batch_is_pending(
    tmp_path: Any, sqs: Any
) -> None:
    from spark_sqs.driver.coordinator import Coordinator

    journal, options = _journal_with_batch(
        tmp_path, 4, [[1, 2], [3, 4]], poisonMessagePolicy="deadLetter", maxBatchAttempts="2"
    )
    quarantine = _quarantine(journal, options, sqs, _Driver(planned=4))
    for run in ("r1", "r2"):
        _fail_once_more(journal, 4, run, [0, 1])
    assert quarantine.prepare_replay(4, [0, 1]) is not None
    failing = make_options(options.journal_location)
    state = Coordinator(failing, sqs, QUEUE_URL, Journal(failing.journal_location, failing))
    with pytest.raises(InvalidOptionError) as err:
        state.start_poison_policy()
    message = str(err.value)
    assert "poisonMessagePolicy" in message and "batch 4" in message
    assert "restart with poisonMessagePolicy=deadLetter" in message


def test_a_carry_batch_once_adopted_is_never_created_again(tmp_path: Any, sqs: Any) -> None:
    """Found by the simulation (seed 238 with --poison): a narrowed batch that a new
    checkpoint adopted had its step finished again, which re-created its carry batch after a
    later batch had adopted and removed it: the carried messages were delivered twice."""
    journal, options = _journal_with_batch(
        tmp_path, 4, [[1, 2], [3, 4]], poisonMessagePolicy="deadLetter", maxBatchAttempts="2"
    )
    quarantine = _quarantine(journal, options, sqs, _Driver(planned=4))
    for run in ("r1", "r2"):
        _fail_once_more(journal, 4, run, [0, 1])
    step = quarantine.prepare_replay(4, [0, 1])
    assert step is not None and step.carry_batch == 5
    # Batch 7 adopts the carry batch and removes it (driver/coordinator.py _adopt).
    journal.entries.adopt(5, 1, 7, 10000)
    quarantine.adopted(5)
    journal.batches.remove(5)

    quarantine.complete(4, step)  # the step finished again (a replay, an adoption of 4)

    assert journal.batches.live_receivers(5) is None
    assert journal.entries.read(5, 1) is None


@pytest.mark.parametrize("died", ["before the carry record", "before the carry's entries"])
def test_a_plan_adopting_a_narrowed_batch_adopts_the_carry_its_narrowing_left_unfinished(
    journal_location: str, died: str
) -> None:
    """Found by the simulation (seed 226 with --poison --unkind all): the run that narrowed
    batch 2 died before its carry batch 3 was whole; another query adopted batch 2 into its new
    batch 4, whose adoption finished the step and so created carry batch 3 outside batch 4's
    plan. Nobody adopted batch 3, its number was below batch 4's, and the acknowledgement of
    batch 4 deleted its messages undelivered. Local and s3 journals."""
    from spark_sqs.driver.coordinator import Coordinator
    from tests.fakes import FakeSqs

    options = make_options(
        journal_location,
        region="us-east-1",
        poisonMessagePolicy="deadLetter",
        maxBatchAttempts="2",
        deadLetterQueueUrl=DLQ_URL,
    )
    journal = Journal(journal_location, options)
    journal.plans.write(BatchPlan(2, (ReceiverPlan(0, 2), ReceiverPlan(1, 2))))
    for receiver, numbers in enumerate([[1, 2], [3, 4]]):
        journal.entries.write(
            2, receiver, messages_to_table([sqs_message(n) for n in numbers], QUEUE_URL)
        )
    for run in ("r1", "r2"):
        _fail_once_more(journal, 2, run, [0, 1])
    # The narrowing run's step: the first half stays in batch 2, the rest goes to batch 3 (its
    # number reserved from the planned marker), and the run dies before finishing the carry.
    step = records.Narrowing(
        step=1,
        keep={0: [_mid(1), _mid(2)], 1: []},
        carried={1: [_mid(3), _mid(4)]},
        carry_batch=3,
        attempts=2,
    )
    assert journal.store.create(records.narrowing_key(2, 1), step.to_json())
    if died == "before the carry's entries":
        marker = {"from": 2, "step": 1, "receivers": [1]}
        assert journal.store.create(
            f"{records.batch_dir(3)}/{records.CARRY}", json.dumps(marker).encode()
        )
    journal.state.write(JournalState(planned_batch=3, acked_batch=1, initial_batch=0))

    # Another query (a checkpoint that never logged batch 2) plans its next batch.
    state = Coordinator(options, FakeSqs(available=10), QUEUE_URL, journal)
    try:
        state.start_poison_policy()
        end = state.latest_offset({"batch": 1})
        batch = end["batch"]
        assert batch == 4
        plan = state.plan({"batch": 1}, end)
    finally:
        state.close()

    stored = journal.plans.read(batch)
    assert stored is not None
    adopted = [r.receiver for r in stored.receivers if r.adopt_from is not None]
    delivered = [
        i for r in adopted if (t := journal.entries.read(batch, r)) is not None for i in _ids(t)
    ]
    assert sorted(delivered) == sorted(_mid(n) for n in (1, 2, 3, 4)), "each message once"
    assert {r.adopt_from[0] for r in stored.receivers if r.adopt_from} == {2, 3}
    assert sum(r.limit for r in stored.receivers) == 0, "carried messages are delivered alone"
    assert len(plan) == len(stored.receivers)
    assert journal.batches.live_receivers(3) is None, "the carry batch was adopted and removed"
    assert journal.batches.live_receivers(2) is None
    assert journal.store.read(f"{records.batch_dir(batch)}/{records.SUSPECT}") is not None


# -- receivers that never journaled (found by the simulation: seed 626 with --poison) --


@pytest.fixture
def server_dlq(moto_endpoint: str) -> tuple[Any, str]:
    """An SQS client on the moto server (beside the s3 journal) and a dead-letter queue."""
    import uuid

    import boto3

    client = boto3.client("sqs", region_name="us-east-1", endpoint_url=moto_endpoint)
    url = client.create_queue(QueueName=f"dlq-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    return client, url


def _dead_letter_journal(journal_location: str, dlq: str) -> tuple[Any, Any]:
    options = make_options(
        journal_location,
        region="us-east-1",
        poisonMessagePolicy="deadLetter",
        maxBatchAttempts="2",
        deadLetterQueueUrl=dlq,
    )
    return Journal(journal_location, options), options


def _planned(journal_location: str, dlq: str, receivers: int) -> tuple[Any, Any]:
    journal, options = _dead_letter_journal(journal_location, dlq)
    journal.plans.write(BatchPlan(2, tuple(ReceiverPlan(r, 3) for r in range(receivers))))
    journal.state.write(JournalState(planned_batch=2, acked_batch=1, initial_batch=0))
    return journal, options


def _journaled(journal: Any, receiver: int, numbers: list[int], run: str) -> None:
    """Receiver ``receiver`` of batch 2 journaled ``numbers`` in run ``run`` (its first
    attempt, named in the entry's metadata as read_partition names it)."""
    table = messages_to_table([sqs_message(n) for n in numbers], QUEUE_URL)
    metadata = {records.FIRST_ATTEMPT: f"{run}-s0-t0".encode()}
    journal.entries.write(2, receiver, table.replace_schema_metadata(metadata))


def test_a_lone_message_is_not_quarantined_while_runs_die_before_its_siblings_journal(
    journal_location: str, server_dlq: tuple[Any, str]
) -> None:
    """Seed 626: receivers 0 and 2 of batch 2 were killed before journaling in every run,
    receiver 1 journaled one message; two runs failed. The lone message was quarantined, though
    no run had handed the batch to the sink (nothing failed on it) and a replay could not
    isolate it (receivers 0 and 2 receive fresh messages on every replay). Local and s3
    journals."""
    client, dlq = server_dlq
    journal, options = _planned(journal_location, dlq, receivers=3)
    quarantine = _quarantine(journal, options, client, _Driver(planned=2), dlq=dlq)
    _journaled(journal, 1, [4], "r1")
    _fail_once_more(journal, 2, "r2", [1])

    assert quarantine.prepare_replay(2, [0, 1, 2]) is None, "replayed whole"
    assert journal.poison.latest_narrowing(2) is None
    assert journal.poison.quarantined() == [] and _dlq_messages(client, dlq) == []
    # The replay (run r3) gets receivers 0 and 2 to journal; the run dies all the same.
    _journaled(journal, 0, [5, 6], "r3")
    _journaled(journal, 2, [7], "r3")
    _fail_once_more(journal, 2, "r3", [1])
    step = quarantine.prepare_replay(2, [0, 1, 2])
    # Four candidates now: the batch is narrowed, nothing quarantined.
    assert step is not None and step.step == 1 and step.quarantined == ()
    assert step.keep == {0: [_mid(5), _mid(6)], 1: [], 2: []}
    assert step.carried == {1: [_mid(4)], 2: [_mid(7)]}
    assert journal.poison.quarantined() == [] and _dlq_messages(client, dlq) == []


def test_a_message_failing_fast_while_its_siblings_never_journal_is_quarantined_in_bounded_runs(
    journal_location: str, server_dlq: tuple[Any, str]
) -> None:
    """The other side: a message that makes its own task fail (a UDF) within milliseconds of
    its replay, while receiver 1 is still long-polling: Spark cancels receiver 1 before it
    journals, in every run. The quarantine waits maxBatchAttempts (2) more failed attempts
    than it would with every receiver journaled, and then happens: the query is not wedged.
    The replays are read_partition's, as an executor runs them. Local and s3 journals."""
    from spark_sqs.executor.receiver import read_partition

    client, dlq = server_dlq
    journal, options = _planned(journal_location, dlq, receivers=2)
    quarantine = _quarantine(journal, options, client, _Driver(planned=2), dlq=dlq)
    _journaled(journal, 0, [9], "run1")

    def never() -> Any:
        raise AssertionError("a replay calls no SQS")

    quarantined_at = None
    for run in range(2, 12):
        # The run plans the replay of batch 2 (the driver), then receiver 0 replays its entry,
        # whose message fails the task; receiver 1 is cancelled before it journals.
        step = quarantine.prepare_replay(2, [0, 1])
        if step is not None and step.quarantined:
            quarantined_at = run
            break
        partition = ReceiverPartition(2, 0, 3, QUEUE_URL, options, run=f"run{run}")
        assert sum(b.num_rows for b in read_partition(partition, client_factory=never)) == 1
        assert journal.entries.read(2, 1) is None
    # maxBatchAttempts failed runs (run1, run2), then maxBatchAttempts more (run3, run4).
    assert quarantined_at == 5
    assert step.quarantined == (_mid(9),) and step.keep == {0: []}
    [sent] = _dlq_messages(client, dlq)
    info = json.loads(sent["MessageAttributes"][driver_poison.QUARANTINE_ATTRIBUTE]["StringValue"])
    assert info["messageId"] == _mid(9) and info["batchAttempts"] == 4
    # The next replay delivers nothing of it.
    partition = ReceiverPartition(2, 0, 3, QUEUE_URL, options, run="run5")
    assert sum(b.num_rows for b in read_partition(partition, client_factory=never)) == 0


def test_receivers_planned_to_receive_nothing_do_not_hold_a_quarantine_back(
    tmp_path: Any, sqs: Any
) -> None:
    """A receiver with a limit of 0 (a suspect batch's, a released plan's) receives nothing
    on a replay: its missing entry changes no decision."""
    journal, options = _journal_with_batch(
        tmp_path, 4, [[1]], poisonMessagePolicy="deadLetter", maxBatchAttempts="2"
    )
    quarantine = _quarantine(journal, options, sqs, _Driver(4))
    for run in ("r1", "r2"):
        _fail_once_more(journal, 4, run, [0])
    step = quarantine.prepare_replay(4, [0, 1], receiving=[0])
    assert step is not None and step.quarantined == (_mid(1),)


# -- a message in two entries of one batch (found by the simulation: seeds 288 and 309 with
# --poison-faults) --


def test_a_message_held_by_two_receivers_is_one_candidate() -> None:
    """Two adoptions of one orphan's entry put its messages in two receivers of a batch: each
    message is one candidate, at its first receiver, never both kept and carried."""
    entries = {0: ["x"], 10000: ["a", "b"], 10001: ["a", "b"]}
    assert driver_poison.candidates(None, entries) == [(0, "x"), (10000, "a"), (10000, "b")]
    decision = driver_poison.decide(None, {0: 2}, entries, threshold=2)
    assert decision.keep == {0: ["x"], 10000: ["a"], 10001: []}
    assert decision.carried == {10000: ["b"]}
    # Narrowed to the poison message: quarantined once, no copy of it carried on.
    step = records.Narrowing(2, {0: [], 10000: ["a"], 10001: ["a"]}, {})
    last = driver_poison.decide(step, {2: 1}, entries, threshold=2)
    assert last.kind == "quarantine" and last.quarantined == (10000, "a")


def test_a_narrowing_of_a_batch_adopting_one_entry_twice_keeps_or_carries_each_message_once(
    journal_location: str, server_dlq: tuple[Any, str]
) -> None:
    """Seed 288: a batch adopted an orphan's narrowed entry twice (through two batches that had
    each adopted it after runs died between an adoption and its orphan's removal); its
    narrowing kept one copy of two messages and carried the other, and both reached the sink.
    Seed 309: the same with the poison message, quarantined from the batch while its carried
    copy failed every later batch and was quarantined again. Local and s3 journals."""
    client, dlq = server_dlq
    journal, options = _dead_letter_journal(journal_location, dlq)
    receivers = (
        ReceiverPlan(0, 0),
        ReceiverPlan(10000, 0, adopt_from=(5, 10000)),
        ReceiverPlan(10001, 0, adopt_from=(6, 10001)),
    )
    journal.plans.write(BatchPlan(7, receivers))
    journal.state.write(JournalState(planned_batch=7, acked_batch=4, initial_batch=0))
    for receiver, numbers in ((0, [1]), (10000, [2, 3]), (10001, [2, 3])):
        journal.entries.write(
            7, receiver, messages_to_table([sqs_message(n) for n in numbers], QUEUE_URL)
        )
    driver = _Driver(planned=7)
    quarantine = _quarantine(journal, options, client, driver, dlq=dlq)
    for run in ("r1", "r2"):
        _fail_once_more(journal, 7, run, [0, 10000, 10001])
    step = quarantine.prepare_replay(7, [0, 10000, 10001])
    assert step is not None and step.step == 1
    kept = [i for ids in step.keep.values() for i in ids]
    carried = [i for ids in step.carried.values() for i in ids]
    assert sorted(kept + carried) == sorted([_mid(1), _mid(2), _mid(3)]), "each once"
    assert kept == [_mid(1), _mid(2)] and carried == [_mid(3)]
    carry = step.carry_batch
    assert carry == 8
    held = [
        i
        for r in journal.batches.live_receivers(carry)
        for i in _ids(journal.entries.read(carry, r))
    ]
    assert held == [_mid(3)]
    # The replay of receiver 10001 delivers neither copy it holds.
    partition = ReceiverPartition(7, 10001, 0, QUEUE_URL, options, run="r3")
    replay = executor_poison.on_replay(journal, partition, journal.entries.read(7, 10001))
    assert _ids(replay.table) == []


# -- a driver that lost the journal while it replayed a batch (simulation seed 4787) --


def _lease(journal: Any, location: str, clock: Clock, owner: str, interval: float) -> Lease:
    return Lease(
        journal.store, location, owner, interval, wall_clock=clock, clock=clock, sleep=clock.sleep
    )


@pytest.mark.parametrize("when", ["reading the entries", "creating the step's record"])
def test_a_driver_that_lost_the_journal_during_a_replay_s_narrowing_finishes_no_step(
    journal_location: str, server_dlq: tuple[Any, str], when: str
) -> None:
    """Found by the simulation (``--poison --unkind all``, seed 4787): a driver replaying a
    batch that failed ``maxBatchAttempts`` times paused while it read the entries; another
    query took the journal over, adopted the batch and removed the entries it had adopted. The
    paused driver, back, saw one message where there were three and quarantined it: an innocent
    message in the dead-letter queue, and in the new owner's sink too. A pause just before the
    step's record is created lets the new owner's adoption miss the record: a carry batch or a
    quarantine finished then is outside the new owner's plan. Only the lease's holder decides
    and finishes a step. Local and s3 journals."""
    client, dlq = server_dlq
    journal, options = _dead_letter_journal(journal_location, dlq)
    adopted = [ADOPTED_FROM, ADOPTED_FROM + 1]
    journal.plans.write(BatchPlan(2, (ReceiverPlan(0, 3),)))
    journal.state.write(JournalState(planned_batch=2, acked_batch=1, initial_batch=0))
    _journaled(journal, 0, [4], "r1")
    for receiver, number in zip(adopted, [5, 6], strict=True):
        journal.entries.write(2, receiver, messages_to_table([sqs_message(number)], QUEUE_URL))
    _fail_once_more(journal, 2, "r2", [0])
    clock = Clock(NOW)
    interval = 10.0
    paused = _lease(journal, journal_location, clock, "paused", interval)
    paused.acquire()
    read, create = journal.store.read, journal.store.create

    def lose_the_journal() -> None:
        clock.now += 3 * interval  # a pause: the lease lapses and another query takes over
        _lease(journal, journal_location, clock, "new", interval).acquire()
        journal.batches.retire(2)
        for receiver in adopted:  # adopted into the new owner's batch, then removed
            journal.store.delete(entry_key(2, receiver))

    def reading(key: str) -> bytes | None:
        if when == "reading the entries" and key == entry_key(2, adopted[0]):
            lose_the_journal()
        return read(key)

    def creating(key: str, *args: Any, **kwargs: Any) -> Any:
        if when == "creating the step's record" and "_narrow-" in key:
            lose_the_journal()
        return create(key, *args, **kwargs)

    journal.store.read = reading  # type: ignore[method-assign]
    journal.store.create = creating  # type: ignore[method-assign]
    quarantine = driver_poison.Quarantine(
        journal,
        client,
        QUEUE_URL,
        dlq,
        options,
        reserve_batch=_Driver(planned=2).reserve,
        track=lambda batch, **_: None,
        confirm=paused.confirm,
    )

    with pytest.raises(JournalInUseError):
        quarantine.prepare_replay(2, [0, *adopted], receiving=[0])
    assert journal.poison.quarantined() == [] and _dlq_messages(client, dlq) == []
    # No carry batch either (the step, had it been decided on all three, carries two).
    assert journal.poison.read_carry(3) is None and journal.entries.read(3, ADOPTED_FROM) is None
    if when == "reading the entries":
        assert journal.poison.latest_narrowing(2) is None
