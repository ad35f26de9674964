"""new_plan() and partitions_of(): splitting a micro-batch into receivers."""

from __future__ import annotations

import pickle

import pytest
from pyspark.sql.datasource import InputPartition

from spark_sqs.driver.planning import (
    ADOPTED_FROM,
    MESSAGES_PER_RECEIVER,
    ReceiverPartition,
    new_plan,
    partitions_of,
    receivers_needed,
    visible_parts,
    with_visible,
)
from spark_sqs.journal import BatchPlan, ReceiverPlan
from spark_sqs.options import SqsOptions

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
SECRET = "wJalrXUtnFEMI-K7MDENG-PLANNING-SECRET"


def options(num_partitions: int = 4, **extra: str) -> SqsOptions:
    raw = {"queueUrl": URL, "journalLocation": "/j", "numPartitions": str(num_partitions)}
    raw.update(extra)
    return SqsOptions.parse(raw, env={})


def plan(
    batch: int, max_messages: int, opts: SqsOptions, **kwargs: object
) -> list[ReceiverPartition]:
    """The partitions of a new plan, as the driver builds them."""
    stored = new_plan(batch, max_messages, opts.num_partitions, **kwargs)  # type: ignore[arg-type]
    # What a replay reads back from the journal must be the same plan.
    assert BatchPlan.from_json(stored.to_json()) == stored
    return partitions_of(stored, URL, opts)


@pytest.mark.parametrize(
    ("num_partitions", "max_messages", "shares"),
    [
        (4, 10000, [2500, 2500, 2500, 2500]),
        (4, 10, [3, 3, 2, 2]),
        (3, 100, [34, 33, 33]),
        (4, 3, [1, 1, 1]),
        (1, 7, [7]),
        (8, 1, [1]),
        (1000, 1_000_000, [1000] * 1000),
        (7, 1_000_000, [142858] + [142857] * 6),
    ],
)
def test_shares_split_max_messages_evenly(
    num_partitions: int, max_messages: int, shares: list[int]
) -> None:
    parts = plan(9, max_messages, options(num_partitions))

    assert [p.max_messages for p in parts] == shares
    assert sum(p.max_messages for p in parts) == max_messages
    assert len(parts) == min(num_partitions, max_messages)
    assert [p.receiver for p in parts] == list(range(len(parts)))
    assert max(shares) - min(shares) <= 1


@pytest.mark.parametrize("num_partitions", [1, 2, 3, 5, 16])
@pytest.mark.parametrize("max_messages", [1, 2, 9, 10, 11, 99, 12345])
def test_shares_always_sum_to_max_messages(num_partitions: int, max_messages: int) -> None:
    parts = plan(1, max_messages, options(num_partitions))
    assert sum(p.max_messages for p in parts) == max_messages
    assert len(parts) == min(num_partitions, max_messages)
    # No receiver is planned with nothing to do.
    assert all(p.max_messages >= 1 for p in parts)


def test_every_partition_carries_what_the_receiver_needs() -> None:
    opts = options(3)
    parts = plan(17, 30, opts)
    for p in parts:
        assert isinstance(p, InputPartition)
        assert p.batch == 17
        assert p.queue_url == URL
        assert p.options == opts


def test_journaled_receivers_beyond_num_partitions_are_still_planned() -> None:
    # Batch 5 was first run with 5 receivers; numPartitions has since been lowered to 2.
    parts = plan(5, 10, options(2), journaled=[0, 1, 3, 4])

    assert [p.receiver for p in parts] == [0, 1, 3, 4]
    by_receiver = {p.receiver: p.max_messages for p in parts}
    # The fresh receivers still share maxMessagesPerTrigger; replaying ones receive nothing new.
    assert by_receiver[0] + by_receiver[1] == 10
    assert by_receiver[3] == by_receiver[4] == 0
    assert sum(by_receiver.values()) == 10


def test_journaled_receivers_within_num_partitions_keep_their_share() -> None:
    parts = plan(5, 10, options(4), journaled=[2, 0])
    assert [(p.receiver, p.max_messages) for p in parts] == [(0, 3), (1, 3), (2, 2), (3, 2)]


def test_journaled_receivers_are_not_duplicated() -> None:
    parts = plan(5, 4, options(2), journaled=(3, 3, 1))
    assert [p.receiver for p in parts] == [0, 1, 3]


def test_resuming_receivers_beyond_num_partitions_receive_nothing_new() -> None:
    parts = plan(7, 100, options(2), resuming=[3])
    by_receiver = {p.receiver: p.max_messages for p in parts}
    assert sorted(by_receiver) == [0, 1, 3]
    # It yields its parts and receives no more.
    assert by_receiver[3] == 0
    assert by_receiver[0] + by_receiver[1] == 100


def test_adopted_entries_get_receiver_numbers_in_plan_order() -> None:
    stored = new_plan(9, 10, 2, adopted=[(6, 0), (6, 3), (7, 1)])
    adopted = [r for r in stored.receivers if r.adopt_from is not None]
    assert adopted == [
        ReceiverPlan(ADOPTED_FROM, 0, (6, 0)),
        ReceiverPlan(ADOPTED_FROM + 1, 0, (6, 3)),
        ReceiverPlan(ADOPTED_FROM + 2, 0, (7, 1)),
    ]
    assert BatchPlan.from_json(stored.to_json()).receivers == stored.receivers


@pytest.mark.parametrize("protocol", range(2, 6))
def test_partitions_pickle(protocol: int) -> None:
    opts = options(
        3, awsAccessKeyId="AKIAPLANNING0000", awsSecretAccessKey=SECRET, queuePollInterval="0.5"
    )
    parts = plan(11, 25, opts, journaled=[6])
    restored = pickle.loads(pickle.dumps(parts, protocol=protocol))

    assert restored == parts
    assert all(type(p) is ReceiverPartition for p in restored)
    assert [p.max_messages for p in restored] == [9, 8, 8, 0]
    assert restored[0].options.credentials == opts.credentials


def test_partition_repr_is_short_and_has_no_secrets() -> None:
    opts = options(1, awsAccessKeyId="AKIAPLANNING0000", awsSecretAccessKey=SECRET)
    (part,) = plan(3, 50, opts, drops="ab" * 32, drop_count=1000)
    text = repr(part)
    assert text.startswith("ReceiverPartition(batch=3, receiver=0, max_messages=50")
    assert SECRET not in text
    assert len(text) < 200


@pytest.mark.parametrize("drop_count", [0, 100, 100_000])
def test_pickled_partition_size_does_not_grow_with_the_drop_set(drop_count: int) -> None:
    # The drop set is stored once in the journal and named by digest in the plan: a partition
    # carries only the batch and receiver numbers (100,000 ids x 500 receivers
    # would otherwise be 50 million ids pickled).
    opts = options(4)
    with_drops = plan(2, 100, opts, drops="cd" * 32, drop_count=drop_count)
    without = plan(2, 100, opts)
    assert [len(pickle.dumps(p)) for p in with_drops] == [len(pickle.dumps(p)) for p in without]


# -- the visible count --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("visible", "receivers", "parts"),
    [
        (10, 4, [10, 0, 0, 0]),
        (3, 4, [3, 0, 0, 0]),
        (25, 4, [10, 10, 5, 0]),
        (45, 4, [15, 10, 10, 10]),
        (0, 2, [0, 0]),
        (10000, 4, [2500, 2500, 2500, 2500]),
        (1003, 3, [340, 333, 330]),
        (7, 1, [7]),
    ],
)
def test_visible_messages_are_dealt_in_calls_of_ten(
    visible: int, receivers: int, parts: list[int]
) -> None:
    assert visible_parts(visible, receivers) == parts
    assert sum(parts) == visible


def test_each_receiving_receiver_gets_its_part_of_its_queue_s_count() -> None:
    other = URL + "-eu"
    stored = new_plan(7, 100, 3, journaled=[5], adopted=[(3, 0)])
    queue_of = {0: URL, 1: other, 2: URL}
    stored = BatchPlan(
        7,
        tuple(
            ReceiverPlan(r.receiver, r.limit, r.adopt_from, queue_of.get(r.receiver))
            for r in stored.receivers
        ),
    )
    counted = with_visible(stored, {URL: 25, other: 4}, URL)
    parts = {r.receiver: r.visible for r in counted.receivers}
    # Receivers that only replay or deliver an adopted entry receive nothing: no part.
    assert parts == {0: 15, 1: 4, 2: 10, 5: None, ADOPTED_FROM: None}
    assert BatchPlan.from_json(counted.to_json()) == counted
    # A queue whose poll did not answer: no bound for its receivers.
    unanswered = with_visible(stored, {URL: 25}, URL)
    assert {r.receiver: r.visible for r in unanswered.receivers}[1] is None


@pytest.mark.parametrize(
    ("visible", "num_partitions", "receivers"),
    [
        (0, 4, 1),  # a batch started on a stale count or to deliver journaled entries
        (1, 4, 1),
        (MESSAGES_PER_RECEIVER, 4, 1),
        (MESSAGES_PER_RECEIVER + 1, 4, 2),
        (3 * MESSAGES_PER_RECEIVER, 4, 3),
        (100 * MESSAGES_PER_RECEIVER, 4, 4),
        (100 * MESSAGES_PER_RECEIVER, 1, 1),
        (5 * MESSAGES_PER_RECEIVER, 1000, 5),
    ],
)
def test_a_new_batch_plans_a_receiver_per_unit_of_visible_messages(
    visible: int, num_partitions: int, receivers: int
) -> None:
    assert receivers_needed({URL: visible}, [URL], num_partitions) == receivers
    stored = new_plan(
        0, 10000, num_partitions, receiving=receivers_needed({URL: visible}, [URL], num_partitions)
    )
    assert [r.receiver for r in stored.receivers] == list(range(receivers))
    assert sum(r.limit for r in stored.receivers) == 10000


def test_every_queue_with_a_backlog_counts_for_a_receiver() -> None:
    other = URL + "-eu"
    assert receivers_needed({URL: 3, other: 2}, [URL, other], 4) == 2
    assert receivers_needed({URL: 3, other: 0}, [URL, other], 4) == 1
    assert receivers_needed({URL: 3, other: 2}, [URL, other], 1) == 1


def test_an_unknown_count_plans_every_receiver() -> None:
    other = URL + "-eu"
    # No poll answered yet, or one queue's last poll failed: planned as for a backlog.
    assert receivers_needed({}, [URL], 4) == 4
    assert receivers_needed({URL: 3}, [URL, other], 4) == 4


def test_an_acknowledge_only_batch_keeps_every_receiver_to_share_the_deletes() -> None:
    stored = new_plan(0, 0, 4, acknowledging=True, receiving=1)
    assert [(r.receiver, r.limit) for r in stored.receivers] == [(0, 0), (1, 0), (2, 0), (3, 0)]


def test_a_plan_written_before_counts_were_recorded_has_no_bound() -> None:
    legacy = b'{"batch": 3, "receivers": [{"receiver": 0, "limit": 5, "adoptFrom": null}]}'
    plan = BatchPlan.from_json(legacy)
    assert plan.receivers == (ReceiverPlan(0, 5),)
    assert plan.receivers[0].visible is None
    assert b"visible" not in plan.to_json()


# -- byte limits (maxBytesPerReceiver, maxBytesPerTrigger) ---------------------------------------


def test_each_receiver_s_byte_limit_is_the_per_receiver_cap_or_its_batch_share() -> None:
    plan = new_plan(
        3, 100, 4, max_bytes_per_receiver=64 << 20, max_bytes_per_trigger=(100 << 20) + 2
    )
    share = (100 << 20) // 4
    assert [r.max_bytes for r in plan.receivers] == [share + 1, share + 1, share, share]
    alone = new_plan(3, 100, 4, max_bytes_per_receiver=16 << 20, max_bytes_per_trigger=1 << 30)
    assert {r.max_bytes for r in alone.receivers} == {16 << 20}
    # Split over the receivers that get messages, as the messages are.
    few = new_plan(3, 2, 4, max_bytes_per_receiver=1 << 30, max_bytes_per_trigger=10 << 20)
    assert [(r.limit, r.max_bytes) for r in few.receivers] == [(1, 5 << 20), (1, 5 << 20)]


def test_plans_and_partitions_carry_the_byte_limits_and_old_plans_have_none() -> None:
    plan = new_plan(3, 10, 2, journaled=[5], adopted=[(1, 0)], max_bytes_per_receiver=1 << 20)
    assert {r.receiver: r.max_bytes for r in plan.receivers} == {
        0: 1 << 20,
        1: 1 << 20,
        5: 1 << 20,
        ADOPTED_FROM: 1 << 20,
    }
    again = BatchPlan.from_json(plan.to_json())
    assert again == plan
    parts = partitions_of(again, URL, options())
    assert [p.max_bytes for p in parts] == [1 << 20] * 4
    # A plan of an earlier version (no byte limits): none, for its receivers and partitions.
    legacy = new_plan(3, 10, 2)
    assert b"maxBytes" not in legacy.to_json()
    assert all(r.max_bytes is None for r in BatchPlan.from_json(legacy.to_json()).receivers)


def test_the_documentation_of_num_partitions_names_the_unit() -> None:
    from spark_sqs.options import OPTIONS

    doc = next(o.doc for o in OPTIONS if o.name == "numPartitions")
    assert f"one per {MESSAGES_PER_RECEIVER} messages visible" in doc
