"""The journal's entries and parts: written once, read by key, adopted (journal/entries.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spark_sqs.errors import JournalError
from spark_sqs.journal import RECEIVED_AT, EntryReceipts, Journal, LocalStore, receipts_of
from tests.factories import handles_of, make_options, pairs, sqs_message, table_of
from tests.fakes import ListHidingStore


@pytest.fixture
def location(tmp_path: Path) -> str:
    # A directory that does not exist yet: the journal creates it.
    return str(tmp_path / "checkpoints" / "journal")


@pytest.fixture
def journal(location: str) -> Journal:
    return Journal(location, make_options(location))


def test_write_and_read_entry_round_trip(journal: Journal) -> None:
    attrs = {"blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}}
    table = table_of(0, 1, 2, attributes=attrs, fifo=True)

    assert journal.entries.write(7, 3, table) is True
    back = journal.entries.read(7, 3)

    assert back is not None
    assert back.equals(table)
    assert back.schema == table.schema


def test_entry_of_no_messages_round_trips(journal: Journal) -> None:
    empty = table_of()
    assert journal.entries.write(2, 0, empty) is True
    back = journal.entries.read(2, 0)
    assert back is not None and back.num_rows == 0
    assert back.schema == empty.schema
    # An empty entry still says the receiver ran: it counts as journaled, with no messages.
    assert journal.entries.has_journaled(2, 0)
    [receipts] = journal.entries.batch_receipts(2, [0])
    assert receipts.message_ids == () and receipts.rows == 0


def test_missing_entry_reads_as_none(journal: Journal) -> None:
    assert journal.entries.read(1, 0) is None
    journal.entries.write(1, 0, table_of(0))
    assert journal.entries.read(1, 1) is None
    assert journal.entries.read(2, 0) is None


def test_existing_entry_is_never_overwritten(journal: Journal) -> None:
    first = table_of(0, 1)
    second = table_of(5, 6, 7)

    assert journal.entries.write(4, 2, first) is True
    assert journal.entries.write(4, 2, second) is False
    # A retried task attempt sees exactly what the first attempt journaled.
    back = journal.entries.read(4, 2)
    assert back is not None and back.equals(first)


def test_batches_listing_and_entries_read_by_the_receivers_named(
    journal: Journal, location: str
) -> None:
    assert journal.batches.list() == []
    assert journal.entries.batch_receipts(1, [0, 1]) == []

    for batch, receiver in [(12, 0), (3, 2), (3, 0), (3, 11), (1, 0)]:
        journal.entries.write(batch, receiver, table_of(batch * 100 + receiver))
    # Stray files are not entries or batches.
    (Path(location) / "batches" / "README").write_text("not a batch")
    (Path(location) / "batches" / "000000000003" / "notes.txt").write_text("not an entry")
    (Path(location) / "batches" / "000000000003" / "00001.arrow.tmp-123").write_text("partial")

    # The LIST of batches/ finds garbage to collect; it decides nothing about entries.
    assert journal.batches.list() == [1, 3, 12]
    # Entries are read by key for the receivers a plan names: an absent one is skipped, a
    # file that is no entry of a named receiver is never read.
    assert [r.receiver for r in journal.entries.batch_receipts(3, [11, 0, 1, 2, 0])] == [0, 2, 11]
    assert [r.receiver for r in journal.entries.batch_receipts(3, [2])] == [2]
    assert [r.receiver for r in journal.entries.batch_receipts(12, range(4))] == [0]
    assert journal.entries.batch_receipts(2, range(4)) == []
    assert [journal.entries.has_journaled(3, r) for r in (0, 1, 2, 11)] == [True, False, True, True]


def test_read_receipts_returns_message_ids_and_receipt_handles(journal: Journal) -> None:
    table = table_of(0, 1, 2, receive_count=2)
    journal.entries.write(5, 1, table)

    assert pairs([journal.entries.read_receipts(5, 1)]) == [
        ("00000000-0000-4000-8000-000000000000", "AQEB-receipt-0-2"),
        ("00000000-0000-4000-8000-000000000001", "AQEB-receipt-1-2"),
        ("00000000-0000-4000-8000-000000000002", "AQEB-receipt-2-2"),
    ]
    assert journal.entries.read_receipts(5, 9) is None


def test_batch_receipts_collects_every_receiver(journal: Journal) -> None:
    a, b = table_of(0, 1), table_of(2)
    journal.entries.write(6, 0, a)
    journal.entries.write(6, 4, b)
    journal.entries.write(7, 0, table_of(9))

    assert pairs(journal.entries.batch_receipts(6, [0, 4])) == handles_of(a) + handles_of(b)
    assert pairs(journal.entries.batch_receipts(8, [0, 4])) == []


def test_read_receipts_carries_the_receive_time(journal: Journal) -> None:
    table = table_of(0, 1).replace_schema_metadata({RECEIVED_AT: repr(1_700_000_000.25)})
    journal.entries.write(5, 2, table)

    receipts = journal.entries.read_receipts(5, 2)

    assert receipts == EntryReceipts(
        batch=5,
        receiver=2,
        received_at=1_700_000_000.25,
        message_ids=(
            "00000000-0000-4000-8000-000000000000",
            "00000000-0000-4000-8000-000000000001",
        ),
        receipt_handles=("AQEB-receipt-0-1", "AQEB-receipt-1-1"),
        rows=2,
    )
    assert "AQEB-receipt" not in repr(receipts)
    assert journal.entries.read_receipts(5, 3) is None


def test_entry_without_receive_time_reads_as_received_at_epoch(journal: Journal) -> None:
    # Treated as long expired, so the acknowledger is cautious about its handles.
    journal.entries.write(1, 0, table_of(0))
    receipts = journal.entries.read_receipts(1, 0)
    assert receipts is not None and receipts.received_at == 0.0


def test_batch_receipts_reads_every_named_receiver(journal: Journal) -> None:
    journal.entries.write(4, 0, table_of(0))
    journal.entries.write(4, 2, table_of(1, 2))
    receipts = journal.entries.batch_receipts(4, [0, 1, 2])
    assert [(r.batch, r.receiver, len(r.message_ids)) for r in receipts] == [(4, 0, 1), (4, 2, 2)]
    assert journal.entries.batch_receipts(5, [0, 1, 2]) == []


def test_corrupt_entry_raises_journal_error_with_a_fix(journal: Journal, location: str) -> None:
    journal.entries.write(1, 0, table_of(0))
    entry = Path(location) / "batches" / "000000000001" / "00000.arrow"
    entry.write_bytes(entry.read_bytes()[:40])

    with pytest.raises(JournalError, match="corrupt.*Fix:"):
        journal.entries.read(1, 0)
    with pytest.raises(JournalError, match="corrupt.*Fix:"):
        journal.entries.read_receipts(1, 0)


def test_a_receiver_s_ids_are_its_entry_s_else_its_parts(journal: Journal) -> None:
    # Receiver 0 finished (parts and entry); receiver 1 died after two parts; 2 never started.
    journal.entries.write_part(4, 0, 0, table_of(0, 1))
    journal.entries.write(4, 0, table_of(0, 1))
    journal.entries.write_part(4, 1, 0, table_of(2, 3))
    journal.entries.write_part(4, 1, 1, table_of(4))
    ids = {n: sqs_message(n)["MessageId"] for n in range(5)}

    assert journal.entries.receiver_ids(4, 0) == [ids[0], ids[1]]
    assert journal.entries.receiver_ids(4, 1) == [ids[2], ids[3], ids[4]]
    assert journal.entries.receiver_ids(4, 2) == []
    assert [journal.entries.has_journaled(4, r) for r in (0, 1, 2)] == [True, True, False]
    assert journal.entries.batch_message_ids(4, [0, 1, 2]) == {ids[n] for n in range(5)}
    assert journal.entries.batch_message_ids(4, [0, 1, 2], but=1) == {ids[0], ids[1]}
    assert journal.entries.batch_message_ids(4, [2]) == frozenset()
    assert journal.entries.batch_message_ids(5, [0, 1]) == frozenset()
    # The dead receiver's parts, adopted as one entry whose messages all await deletion.
    assert journal.entries.adopt(4, 1, 9, 10000)
    combined = journal.entries.read(9, 10000)
    assert combined is not None
    assert [r.message_ids for r in [receipts_of(9, 10000, combined)]] == [(ids[2], ids[3], ids[4])]
    assert journal.entries.read_receipts(9, 10000).message_ids == (ids[2], ids[3], ids[4])  # type: ignore[union-attr]
    # Receiver 2 journaled nothing: its adoption delivers nothing.
    assert journal.entries.adopt(4, 2, 9, 10001)
    assert journal.entries.read(9, 10001).num_rows == 0  # type: ignore[union-attr]


def _hiding(location: str, hidden: Any) -> tuple[Journal, ListHidingStore]:
    store = ListHidingStore(LocalStore(location), hidden)
    return Journal(location, make_options(location), store=store), store


def test_read_parts_reads_by_key_what_the_list_does_not_show_yet(location: str) -> None:
    """deleteAfterJournal: part k is created only once part k-1 exists, so the parts are read
    0, 1, 2, ... by key up to the first absent number. A LIST that lags the newest part must
    not lose its messages (the driver would neither deliver nor delete them)."""
    journal, store = _hiding(location, lambda key: ".part-" in key)
    tables = [table_of(0, 1), table_of(2), table_of(3, 4, 5)]
    for k, table in enumerate(tables):
        assert journal.entries.write_part(7, 2, k, table) is True
    # Part 4 exists, but part 3 does not: it is no part of a dense run (never read).
    journal.entries.write_part(7, 2, 4, table_of(9))
    assert journal.store.list("batches") == []
    store.calls.clear()

    parts = journal.entries.read_parts(7, 2)

    assert [k for k, _ in parts] == [0, 1, 2]
    assert all(got.equals(want) for (_, got), want in zip(parts, tables, strict=True))
    ids = {n: sqs_message(n)["MessageId"] for n in range(10)}
    assert journal.entries.receiver_ids(7, 2) == [ids[n] for n in range(6)]
    assert journal.entries.has_journaled(7, 2)
    assert journal.entries.batch_message_ids(7, [2]) == {ids[n] for n in range(6)}
    assert not [c for c in store.calls if c[0] == "list"], "no LIST to find parts"
    assert journal.entries.read_parts(7, 3) == []


def test_entries_of_the_named_receivers_are_read_although_the_list_hides_them(
    location: str,
) -> None:
    journal, store = _hiding(location, lambda key: key.startswith("batches/"))
    journal.entries.write(2, 0, table_of(0))
    journal.entries.write(2, 5, table_of(1, 2))
    assert journal.batches.list() == []
    store.calls.clear()

    assert [r.receiver for r in journal.entries.batch_receipts(2, [0, 1, 5])] == [0, 5]
    assert len(journal.entries.batch_message_ids(2, [0, 5])) == 3
    assert not [c for c in store.calls if c[0] == "list"]


def test_extension_markers_have_a_fixed_key_and_are_read_by_key(location: str) -> None:
    """executor/extension.py: a receiver that extended its own messages says so at
    ``<receiver>.extended``; the driver bounds the reach by its own clock, the body keeps the
    executor's deadline for people only."""
    journal, store = _hiding(location, lambda key: key.endswith(".extended"))
    journal.entries.write_extension(3, 1, 1_700_000_900)
    journal.entries.write_extension(3, 1, 1_700_009_999)  # a retried attempt: the first stands
    journal.entries.write_extension(3, 4, 1_700_000_950)

    key = "batches/000000000003/00001.extended"
    assert json.loads(journal.store.read(key) or b"") == {"until": 1_700_000_900}
    assert journal.entries.extended_receivers(3, [0, 1, 2, 4]) == {1, 4}
    assert journal.entries.extended_receivers(3, [0, 2]) == set()
    assert journal.entries.extended_receivers(4, [1]) == set()
    assert not [c for c in store.calls if c[0] == "list"]


def test_adopting_an_entry_that_vanished_writes_an_empty_entry(journal: Journal) -> None:
    """A straggler of a retired orphan removed the entry it wrote (its messages stay in flight
    and come back): the adopting batch's replays must deliver nothing for it, not fail."""
    journal.entries.write(6, 0, table_of(0, 1))
    journal.batches.retire(6)

    assert journal.entries.adopt(6, 1, 8, 0) is True  # receiver 1 of batch 6: no entry, no parts
    assert journal.entries.adopt(6, 0, 8, 1) is True
    assert journal.entries.adopt(6, 1, 8, 0) is False, "idempotent: the copy is kept"

    empty = journal.entries.read(8, 0)
    assert empty is not None and empty.num_rows == 0
    assert empty.schema.names == table_of().schema.names
    assert journal.entries.has_journaled(8, 0)
    assert journal.entries.receiver_ids(8, 1) == [sqs_message(n)["MessageId"] for n in (0, 1)]


def test_adopting_a_vanished_entry_copies_a_copy_with_both_narrowings(journal: Journal) -> None:
    """The entry an adoption chose was removed by the adoption that copied it first (a deposed
    driver finishing its own): the copy is adopted, keeping only what the source's narrowing and
    the copy's orphan's narrowing both keep."""
    journal.entries.write(7, 10000, table_of(0, 1, 2))  # batch 7's copy of receiver 0 of 6

    def mid(n: int) -> str:
        return sqs_message(n)["MessageId"]

    def ids(table: Any) -> list[str]:
        assert table is not None
        return table.column("messageId").to_pylist()

    copies = [(7, 9, None), (7, 10000, {mid(0), mid(1)})]  # receiver 9 never journaled

    def found() -> list[Any]:
        return copies

    assert journal.entries.adopt(6, 0, 8, 10000, keep={mid(1), mid(2)}, copies=found) is True
    assert journal.entries.adopt(6, 0, 8, 10001, copies=found) is True

    assert ids(journal.entries.read(8, 10000)) == [mid(1)]
    assert ids(journal.entries.read(8, 10001)) == [mid(0), mid(1)]
