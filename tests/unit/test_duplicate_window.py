"""The duplicate window (journal/window.py, executor/duplicates.py): segments, expiry, merging,
the receiver's lookup and the acknowledgement's order, on a local and an ``s3://`` journal."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest

from spark_sqs.acknowledgement.assigned import acknowledge_assigned
from spark_sqs.acknowledgement.deletes import delete_messages
from spark_sqs.driver.planning import ReceiverPartition
from spark_sqs.executor import duplicates
from spark_sqs.executor.receiver import read_partition
from spark_sqs.journal import (
    WINDOW_DROPPED,
    AckAssignment,
    BatchPlan,
    Journal,
    ReceiverPlan,
    open_store,
    window,
)
from spark_sqs.schema import messages_to_table
from tests.factories import FIFO_QUEUE_URL, QUEUE_URL, make_options, sqs_message
from tests.fakes import FakeSqs, HookedStore

NOW = 1_700_000_000.0


@pytest.fixture
def location(journal_location: str) -> str:
    return journal_location


def journal_at(location: str, **options: Any) -> tuple[Journal, HookedStore]:
    opts = make_options(location, region="us-east-1", **options)
    store = HookedStore(open_store(location, opts.connection))
    return Journal(location, opts, store=store), store


def ids(*numbers: int) -> list[str]:
    return [sqs_message(n)["MessageId"] for n in numbers]


# -- the records -----------------------------------------------------------------------------


def test_a_segment_holds_sorted_digests_not_ids() -> None:
    table = window.segment_table(["b", "a", "c", "a"])
    assert table.column_names == ["h1", "h2"]
    assert table.num_rows == 3
    h1 = table.column("h1").to_pylist()
    assert h1 == sorted(h1)
    assert window.digest("a") in set(zip(h1, table.column("h2").to_pylist(), strict=True))


def test_acknowledged_ids_are_seen_until_they_expire(location: str) -> None:
    journal, store = journal_at(location)
    journal.window.write(ids(1, 2), batch=3, who="r000000-ack", expires_at=NOW + 40)
    cache = duplicates.DuplicateWindow(40)
    assert cache.refresh(store, NOW) == 1
    assert cache.seen(ids(1, 3)) == set(ids(1))
    # A second refresh reads nothing new: only a LIST.
    store.calls.clear()
    assert cache.refresh(store, NOW + 1) == 0
    assert [m for m, _ in store.calls] == ["list"]
    # Once expired (and its slice over), forgotten, and collected from the journal.
    cache.refresh(store, NOW + 100)
    assert cache.seen(ids(1)) == set()
    assert journal.window.collect(NOW + 100) == 1
    assert store.inner.list("window") == []


def test_a_merged_segment_replaces_the_parts_of_its_batch(location: str) -> None:
    journal, store = journal_at(location)
    journal.window.write(ids(1), batch=7, who="r000000-ack", expires_at=NOW + 60)
    journal.window.write(ids(2), batch=7, who="r000001-ack", expires_at=NOW + 61)
    journal.window.write(ids(3), batch=8, who="r000000-ack", expires_at=NOW + 62)
    merged = window.merge_batch(store, 7)
    assert merged is not None and merged.who == "merged"
    names = window.list_segments(store)
    assert [(n.batch, n.who) for n in names] == [(7, "merged"), (8, "r000000-ack")]
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, NOW)
    assert cache.seen(ids(1, 2, 3, 4)) == set(ids(1, 2, 3))


def test_a_batch_with_one_part_is_left_as_it_is(location: str) -> None:
    """One receiver acknowledged: readers fetch one object for the batch already, and a merge
    would cost a read, a write and a removal for nothing."""
    journal, store = journal_at(location)
    journal.window.write(ids(1), batch=7, who="r000000-ack", expires_at=NOW + 60)
    assert window.merge_batch(store, 7) is None
    assert [(n.batch, n.who) for n in window.list_segments(store)] == [(7, "r000000-ack")]
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, NOW)
    assert cache.seen(ids(1, 2)) == set(ids(1))


def test_a_merge_that_died_before_removing_the_parts_leaves_readers_one_copy(location: str):
    journal, store = journal_at(location)
    journal.window.write(ids(1), batch=7, who="r000000-ack", expires_at=NOW + 60)
    journal.window.write(ids(2), batch=7, who="r000001-ack", expires_at=NOW + 60)
    parts = window.list_segments(store)
    # The merge created its segment, then the process died before the deletes.
    tables = [window.read_segment(store, n) for n in parts]
    merged = window.SegmentKey(int(NOW) + 61, 7, "merged")
    store.create(merged.key, window._ipc(pa.concat_tables(tables).sort_by("h1")))
    assert window.live(window.list_segments(store), NOW) == [merged]
    assert window.collect(store, NOW) == 2
    assert window.list_segments(store) == [merged]


class _NoDeletes:
    def delete(self, entries: Any) -> Any:
        raise AssertionError("nothing to delete")


def test_nothing_is_recorded_with_the_window_off_or_for_a_fifo_queue(location: str) -> None:
    journal, store = journal_at(location)
    for seconds, queue in ((0, QUEUE_URL), (600, FIFO_QUEUE_URL)):
        delete_messages(journal, _NoDeletes(), [], window=[(i, None) for i in ids(1)],
                        queue_url=queue, duplicate_window=seconds, batch=1, who="r000000-ack",
                        now=NOW)  # fmt: skip
    assert store.inner.list("window") == []
    # A FIFO queue is never looked up either: no store request at all.
    store.calls.clear()
    assert (
        duplicates.copies(store, location, 600, ids(1), queue_url=FIFO_QUEUE_URL, now=NOW) == set()
    )
    assert store.calls == []


# -- receivers --------------------------------------------------------------------------------


def test_a_receiver_drops_and_deletes_a_copy_of_an_acknowledged_message(location: str) -> None:
    journal, store = journal_at(location)
    journal.plans.write(BatchPlan(4, (ReceiverPlan(0, 10),)))
    # Batch 2 acknowledged message 1 cleanly; SQS now hands out a copy of it with message 2.
    journal.window.write(ids(1), batch=3, who="r000000-ack", expires_at=time.time() + 600)
    sqs = FakeSqs(script=[[sqs_message(1, receive_count=2), sqs_message(2)]])
    partition = ReceiverPartition(4, 0, 10, QUEUE_URL, make_options(location, region="us-east-1"))
    out = pa.Table.from_batches(
        list(read_partition(partition, client_factory=lambda: sqs, journal=journal))
    )
    assert out.column("messageId").to_pylist() == ids(2)
    entry = journal.entries.read(4, 0)
    assert entry is not None and entry.schema.metadata[WINDOW_DROPPED] == b"1"
    deleted = [
        e["ReceiptHandle"]
        for action, entries in sqs.batch_calls
        if action == "delete"
        for e in entries
    ]
    assert deleted == [sqs_message(1, receive_count=2)["ReceiptHandle"]], "the copy is deleted"


def test_the_acknowledgement_writes_its_segment_before_the_first_delete(location: str) -> None:
    journal, store = journal_at(location, duplicateWindow="600")
    table = messages_to_table([sqs_message(n) for n in range(3)], QUEUE_URL)
    journal.entries.write(2, 0, table)
    order: list[str] = []
    store.before = lambda method, key: order.append(f"{method} {key.split('/')[0]}")
    sqs = FakeSqs()
    original = sqs.delete_message_batch

    def delete(**kwargs: Any) -> Any:
        order.append("DeleteMessageBatch")
        return original(**kwargs)

    sqs.delete_message_batch = delete  # type: ignore[method-assign]
    acknowledge_assigned(
        journal, sqs, QUEUE_URL, 3, 0, [AckAssignment(2, 0, 0, valid_until=time.time() + 600)],
        duplicate_window=600,
    )  # fmt: skip
    assert order.index("create window") < order.index("DeleteMessageBatch")
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, time.time())
    assert cache.seen(ids(0, 1, 2, 3)) == set(ids(0, 1, 2))


def test_one_receiver_of_each_batch_merges_the_previous_batch(location: str) -> None:
    journal, store = journal_at(location)
    journal.plans.write(BatchPlan(5, (ReceiverPlan(0, 10), ReceiverPlan(1, 10))))
    later = time.time() + 600
    journal.window.write(ids(1), batch=4, who="r000000-ack", expires_at=later)
    journal.window.write(ids(2), batch=4, who="r000001-ack", expires_at=later)
    options = make_options(location, region="us-east-1")
    # Receiver 4 % 2 == 0 merges; receiver 1 leaves the parts alone.
    for receiver in (1, 0):
        sqs = FakeSqs(available=0)
        partition = ReceiverPartition(5, receiver, 10, QUEUE_URL, options)
        list(read_partition(partition, client_factory=lambda sqs=sqs: sqs, journal=journal))
        whos = [n.who for n in window.list_segments(store) if n.batch == 4]
        assert whos == (["merged"] if receiver == 0 else ["r000000-ack", "r000001-ack"])


# -- duplicateAttribute ------------------------------------------------------------------------


def with_attribute(n: int, value: str, receive_count: int = 1) -> dict[str, Any]:
    message = sqs_message(n, receive_count=receive_count)
    message["MessageAttributes"] = {
        "spark_sqs.dedupeId": {"DataType": "String", "StringValue": value}
    }
    return message


def test_copies_are_recognised_by_the_attribute_too(location: str) -> None:
    journal, store = journal_at(location)
    options = make_options(location, region="us-east-1", duplicateAttribute="spark_sqs.dedupeId")
    journal.plans.write(BatchPlan(4, (ReceiverPlan(0, 10),)))
    # A sink batch sent row "a" twice (two messages, two ids, one dedupe id); the first copy
    # was delivered and acknowledged earlier.
    journal.window.write(
        [window.attribute_key("a")], batch=3, who="r000000-ack", expires_at=time.time() + 600
    )
    sqs = FakeSqs(script=[[with_attribute(1, "a"), with_attribute(2, "b"), with_attribute(3, "b")]])
    partition = ReceiverPartition(4, 0, 10, QUEUE_URL, options)
    got = pa.Table.from_batches(
        list(read_partition(partition, client_factory=lambda: sqs, journal=journal))
    )
    # "a" was acknowledged; the second "b" is a copy of the first within this receive.
    assert got.column("messageId").to_pylist() == ids(2)
    entry = journal.entries.read(4, 0)
    assert entry is not None and entry.schema.metadata[WINDOW_DROPPED] == b"2"
    # The entry carries "b"'s key: its acknowledgement puts it in the window.
    journal.plans.write(
        BatchPlan(5, (ReceiverPlan(0, 10),), acks=(AckAssignment(4, 0, 0, time.time() + 600),))
    )
    later = ReceiverPartition(5, 0, 10, QUEUE_URL, options)
    list(read_partition(later, client_factory=lambda: FakeSqs(), journal=journal))
    duplicates.forget_all()
    cache = duplicates.DuplicateWindow(600)
    cache.refresh(store, time.time())
    assert cache.seen([window.attribute_key("b"), *ids(2)]) == {window.attribute_key("b"), *ids(2)}


def test_without_the_option_the_attribute_is_ignored(location: str) -> None:
    journal, _ = journal_at(location)
    journal.plans.write(BatchPlan(4, (ReceiverPlan(0, 10),)))
    sqs = FakeSqs(script=[[with_attribute(2, "b"), with_attribute(3, "b")]])
    partition = ReceiverPartition(4, 0, 10, QUEUE_URL, make_options(location, region="us-east-1"))
    got = pa.Table.from_batches(
        list(read_partition(partition, client_factory=lambda: sqs, journal=journal))
    )
    assert got.column("messageId").to_pylist() == ids(2, 3)
