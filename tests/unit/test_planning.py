"""plan(): splitting a micro-batch into receivers."""

from __future__ import annotations

import pickle

import pytest
from pyspark.sql.datasource import InputPartition

from spark_sqs.options import SqsOptions
from spark_sqs.planning import ReceiverPartition, plan

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
SECRET = "wJalrXUtnFEMI-K7MDENG-PLANNING-SECRET"


def options(num_partitions: int = 4, **extra: str) -> SqsOptions:
    raw = {"queueUrl": URL, "journalLocation": "/j", "numPartitions": str(num_partitions)}
    raw.update(extra)
    return SqsOptions.parse(raw, env={})


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
    parts = plan(9, max_messages, URL, options(num_partitions))

    assert [p.max_messages for p in parts] == shares
    assert sum(p.max_messages for p in parts) == max_messages
    assert len(parts) == min(num_partitions, max_messages)
    assert [p.receiver for p in parts] == list(range(len(parts)))
    assert max(shares) - min(shares) <= 1


@pytest.mark.parametrize("num_partitions", [1, 2, 3, 5, 16])
@pytest.mark.parametrize("max_messages", [1, 2, 9, 10, 11, 99, 12345])
def test_shares_always_sum_to_max_messages(num_partitions: int, max_messages: int) -> None:
    parts = plan(1, max_messages, URL, options(num_partitions))
    assert sum(p.max_messages for p in parts) == max_messages
    assert len(parts) == min(num_partitions, max_messages)
    # No receiver is planned with nothing to do.
    assert all(p.max_messages >= 1 for p in parts)


def test_every_partition_carries_what_the_receiver_needs() -> None:
    opts = options(3)
    parts = plan(17, 30, URL, opts)
    for p in parts:
        assert isinstance(p, InputPartition)
        assert p.batch == 17
        assert p.queue_url == URL
        assert p.options == opts


def test_journaled_receivers_beyond_num_partitions_are_still_planned() -> None:
    # Batch 5 was first run with 5 receivers; numPartitions has since been lowered to 2.
    parts = plan(5, 10, URL, options(2), journaled=[0, 1, 3, 4])

    assert [p.receiver for p in parts] == [0, 1, 3, 4]
    by_receiver = {p.receiver: p.max_messages for p in parts}
    # The fresh receivers still share maxMessagesPerTrigger; replaying ones receive nothing new.
    assert by_receiver[0] + by_receiver[1] == 10
    assert by_receiver[3] == by_receiver[4] == 0
    assert sum(by_receiver.values()) == 10


def test_journaled_receivers_within_num_partitions_keep_their_share() -> None:
    parts = plan(5, 10, URL, options(4), journaled=[2, 0])
    assert [(p.receiver, p.max_messages) for p in parts] == [(0, 3), (1, 3), (2, 2), (3, 2)]


def test_journaled_receivers_are_not_duplicated() -> None:
    parts = plan(5, 4, URL, options(2), journaled=(3, 3, 1))
    assert [p.receiver for p in parts] == [0, 1, 3]


@pytest.mark.parametrize("protocol", range(2, 6))
def test_partitions_pickle(protocol: int) -> None:
    opts = options(
        3, awsAccessKeyId="AKIAPLANNING0000", awsSecretAccessKey=SECRET, queuePollInterval="0.5"
    )
    parts = plan(11, 25, URL, opts, journaled=[6])
    restored = pickle.loads(pickle.dumps(parts, protocol=protocol))

    assert restored == parts
    assert all(type(p) is ReceiverPartition for p in restored)
    assert [p.max_messages for p in restored] == [9, 8, 8, 0]
    assert restored[0].options.credentials == opts.credentials


def test_partition_repr_is_short_and_has_no_secrets_or_message_ids() -> None:
    opts = options(1, awsAccessKeyId="AKIAPLANNING0000", awsSecretAccessKey=SECRET)
    ids = frozenset(f"00000000-0000-4000-8000-{n:012d}" for n in range(1000))
    (part,) = plan(3, 50, URL, opts, drop_ids=ids)
    text = repr(part)
    assert text.startswith("ReceiverPartition(batch=3, receiver=0, max_messages=50")
    assert SECRET not in text
    # Spark logs partitions; a repr with thousands of ids would flood the log.
    assert len(text) < 200
    assert not any(i in text for i in ids)


def test_fresh_receivers_get_the_ids_to_drop_and_replaying_ones_do_not() -> None:
    ids = frozenset({"m-1", "m-2"})
    parts = plan(8, 30, URL, options(3), journaled=[1, 5], drop_ids=ids)

    assert {p.receiver: p.drop_ids for p in parts} == {
        0: ids,
        1: frozenset(),
        2: ids,
        5: frozenset(),
    }


def test_no_ids_to_drop_by_default() -> None:
    assert all(p.drop_ids == frozenset() for p in plan(1, 10, URL, options(2)))


def test_partitions_with_ids_to_drop_pickle() -> None:
    ids = frozenset(f"id-{n}" for n in range(500))
    parts = plan(2, 10, URL, options(2), drop_ids=ids)
    restored = pickle.loads(pickle.dumps(parts))
    assert restored == parts
    assert restored[1].drop_ids == ids


def test_resuming_receivers_beyond_num_partitions_are_planned_with_the_ids_to_drop() -> None:
    parts = plan(7, 100, URL, options(2), drop_ids=frozenset({"m"}), resuming=[3])
    by_receiver = {p.receiver: p for p in parts}
    assert sorted(by_receiver) == [0, 1, 3]
    # It yields its parts and receives no more; what reappears of its parts must be dropped.
    assert by_receiver[3].max_messages == 0
    assert by_receiver[3].drop_ids == frozenset({"m"})
    assert by_receiver[0].max_messages + by_receiver[1].max_messages == 100
