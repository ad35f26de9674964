"""FIFO queues: per-group order across batches, restarts and replays; receive attempt ids."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest

from devtools.local_sqs import RECEIVE_REQUESTS
from tests.helpers import (
    drain_and_stop,
    queue_counts,
    start_query,
    wait_until,
)

pytestmark = pytest.mark.integration

GROUPS = ("alpha", "beta", "gamma", "delta")


def _send_groups(sqs: Any, queue_url: str, per_group: int) -> None:
    # Interleaved, as producers of several entities would send them.
    for seq in range(per_group):
        entries = [
            {
                "Id": f"{g}-{seq}",
                "MessageBody": json.dumps({"g": g, "seq": seq}),
                "MessageGroupId": g,
                # Explicit: moto leaves SequenceNumber empty under content-based deduplication.
                "MessageDeduplicationId": f"{g}-{seq}",
            }
            for g in GROUPS
        ]
        response = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
        assert not response.get("Failed")


def _check_group_order(batches: dict[int, list[Any]], per_group: int) -> None:
    """Within a batch, a group's rows come in send order; across batches, later batches hold
    later messages; every message exactly once."""
    seen: dict[str, list[int]] = defaultdict(list)
    for batch_id in sorted(batches):
        in_batch: dict[str, list[int]] = defaultdict(list)
        for row in batches[batch_id]:
            body = json.loads(row.body)
            assert row.messageGroupId == body["g"]
            assert row.messageDeduplicationId and row.sequenceNumber
            in_batch[body["g"]].append(body["seq"])
        for group, seqs in in_batch.items():
            assert seqs == sorted(seqs), f"group {group} out of order within batch {batch_id}"
            seen[group].extend(seqs)
    for group in GROUPS:
        assert seen[group] == list(range(per_group)), f"group {group}: {seen[group]}"


def test_fifo_groups_complete_and_in_order_across_replay_and_restart(
    sqs, fifo_queue_url, tmp_path, source
):
    per_group = 25
    _send_groups(sqs, fifo_queue_url, per_group)
    journal, checkpoint = tmp_path / "journal", tmp_path / "ckpt"
    committed: dict[int, list[Any]] = {}
    attempts: dict[int, int] = defaultdict(int)

    def sink(df: Any, batch_id: int, fail_at: int | None) -> None:
        rows = df.collect()
        attempts[batch_id] += 1
        if rows and fail_at is not None and len([b for b in committed if committed[b]]) == fail_at:
            raise RuntimeError("sink failure injected by the test")
        committed[batch_id] = rows

    def run(fail_at: int | None) -> Any:
        return start_query(
            source(
                queue=fifo_queue_url,
                journal=journal,
                numPartitions=2,
                maxMessagesPerTrigger=20,
                visibilityTimeout=60,
            ),
            lambda df, bid: sink(df, bid, fail_at),
            checkpoint,
        )

    query = run(fail_at=2)
    with pytest.raises(Exception, match="sink failure injected"):
        query.awaitTermination(240)
    replayed = max(attempts)

    query = run(fail_at=None)
    drain_and_stop(query, sqs, fifo_queue_url, timeout=300)
    assert attempts[replayed] == 2, "the failed batch was replayed after the restart"
    _check_group_order(committed, per_group)


def test_fifo_receive_attempt_id_is_sent_and_repeated_by_a_retried_task(
    sqs, fifo_queue_url, tmp_path, source
):
    per_group = 5
    _send_groups(sqs, fifo_queue_url, per_group)
    committed: dict[int, list[Any]] = {}
    # Every try of the first receive (botocore's five attempts) gets a 500 after moto handed
    # out messages, so the Spark task fails and is retried.
    RECEIVE_REQUESTS.fail_next(5)

    def sink(df: Any, batch_id: int) -> None:
        committed[batch_id] = df.collect()

    query = start_query(
        source(queue=fifo_queue_url, numPartitions=1, visibilityTimeout=4),
        sink,
        tmp_path / "ckpt",
    )
    try:
        wait_until(
            lambda: sum(len(r) for r in committed.values()) >= per_group * len(GROUPS),
            240,
            "every message in the sink",
        )
        wait_until(lambda: queue_counts(sqs, fifo_queue_url) == (0, 0), 60, "an empty queue")
    finally:
        RECEIVE_REQUESTS.fail_next(0)
        query.stop()

    calls = RECEIVE_REQUESTS.for_queue(fifo_queue_url)
    ids = [c["ReceiveRequestAttemptId"] for c in calls]
    assert all(ids), "every FIFO receive carries an attempt id"
    # Five botocore tries of the failed task and the first call of the retried task: one id.
    assert len(set(ids[:6])) == 1
    assert ids[6] != ids[0], "a different call (later in the loop, or a later batch) has another id"
    _check_group_order(committed, per_group)


def _largest_group_share(batches: dict[int, list[Any]]) -> int:
    counts: dict[tuple[int, str], int] = defaultdict(int)
    for batch_id, rows in batches.items():
        for row in rows:
            counts[(batch_id, row.messageGroupId)] += 1
    return max(counts.values())


@pytest.mark.parametrize("delete_after_journal", [False, True], ids=["on-commit", "after-journal"])
def test_group_throughput_per_batch_and_fast_mode_guarantees(
    sqs, fifo_queue_url, tmp_path, delete_after_journal, source
):
    per_group = 30
    _send_groups(sqs, fifo_queue_url, per_group)
    journal, checkpoint = tmp_path / "journal", tmp_path / "ckpt"
    committed: dict[int, list[Any]] = {}
    attempts: dict[int, int] = defaultdict(int)
    failed_rows: list[Any] = []

    def sink(df: Any, batch_id: int, fail: bool) -> None:
        rows = df.collect()
        attempts[batch_id] += 1
        if rows and fail:
            failed_rows.extend(rows)
            raise RuntimeError("sink failure injected by the test")
        committed[batch_id] = rows

    def run(fail: bool) -> Any:
        return start_query(
            source(
                queue=fifo_queue_url,
                journal=journal,
                numPartitions=1,
                maxMessagesPerTrigger=60,
                visibilityTimeout=60,
                deleteAfterJournal=str(delete_after_journal).lower(),
            ),
            lambda df, bid: sink(df, bid, fail),
            checkpoint,
        )

    query = run(fail=True)
    with pytest.raises(Exception, match="sink failure injected"):
        query.awaitTermination(240)
    failed = max(attempts)
    left = sum(queue_counts(sqs, fifo_queue_url))
    done = sum(len(rows) for rows in committed.values())
    if delete_after_journal:
        # The failed batch's messages already left SQS: only the journal holds them now.
        assert left == len(GROUPS) * per_group - done - len(failed_rows)
    else:
        assert left == len(GROUPS) * per_group - done

    query = run(fail=False)
    drain_and_stop(query, sqs, fifo_queue_url, timeout=300)
    assert attempts[failed] == 2
    _check_group_order(committed, per_group)
    largest = _largest_group_share(committed)
    if delete_after_journal:
        assert largest > 10, "deleting after journaling lets a group yield more than one receive"
    else:
        assert largest <= 10, "with delete on commit a group yields one receive per batch"
