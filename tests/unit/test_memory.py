"""The memory bound of the journal's readers and writers: receipts read without the bodies,
entries written and adopted one part at a time. Deterministic counts (bytes and requests the
store served, Python allocations while reading), on a local and an ``s3://`` journal (moto). A bound
that spans journal/stores.py (ranged reads), journal/entries.py (parts), schema.py (slices) and
executor/memory.py (the heap handed back), so no single module's test file is its home."""

from __future__ import annotations

import io
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from spark_sqs.journal import ID_COLUMNS, Journal, S3Store
from spark_sqs.journal.stores import READ_AHEAD, TAIL_BYTES, RangedObject
from spark_sqs.schema import messages_to_table, output_batches
from tests.factories import QUEUE_URL, make_options, sqs_message

KIB64 = "x" * (64 << 10)


def entry_of(count: int, body: str, first: int = 0) -> pa.Table:
    return messages_to_table(
        [sqs_message(n, body=body) for n in range(first, first + count)], QUEUE_URL
    )


@dataclass
class Served:
    """What the store served: requests and bytes (GETs on S3; reads on local files)."""

    requests: int = 0
    bytes: int = 0


class _CountingFile(io.RawIOBase):
    """A local journal file as its memory map, counting the bytes read from it."""

    def __init__(self, inner: pa.NativeFile, served: Served) -> None:
        super().__init__()
        self._inner = inner
        self._served = served

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self._inner.seek(offset, whence))

    def tell(self) -> int:
        return int(self._inner.tell())

    def read(self, n: int = -1) -> bytes:
        data = self._inner.read(n if n is not None and n >= 0 else None)
        self._served.requests += 1
        self._served.bytes += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _CountingLocal:
    """The journal's local store, counting what is read through it."""

    def __init__(self, inner: Any, served: Served) -> None:
        self._inner = inner
        self._served = served

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def read(self, key: str) -> bytes | None:
        data = self._inner.read(key)
        if data is not None:
            self._served.requests += 1
            self._served.bytes += len(data)
        return data

    def open_random(self, key: str) -> pa.NativeFile | None:
        found = self._inner.open_random(key)
        return None if found is None else pa.PythonFile(_CountingFile(found, self._served), "r")


@pytest.fixture
def counted(journal_location: str) -> Iterator[tuple[Journal, Served]]:
    """A journal on ``journal_location`` (local and s3) and what its store serves."""
    journal = Journal(journal_location, make_options(journal_location, region="us-east-1"))
    served = Served()
    store = journal.store
    if isinstance(store, S3Store):

        def on_get(parsed: dict[str, Any], **_: Any) -> None:
            served.requests += 1
            served.bytes += int(parsed.get("ContentLength", 0))

        # The process's S3 client is shared by every journal with this connection.
        events = store.client.meta.events
        events.register("after-call.s3.GetObject", on_get)
        yield journal, served
        events.unregister("after-call.s3.GetObject", on_get)
    else:
        journal._store = _CountingLocal(store, served)  # type: ignore[assignment]
        yield journal, served


def test_receipts_are_read_without_the_bodies(counted: tuple[Journal, Served]) -> None:
    journal, served = counted
    table = entry_of(1000, KIB64)
    assert journal.entries.write(7, 0, table)
    entry_bytes = served.bytes
    served.requests = served.bytes = 0
    whole = journal.entries.read(7, 0)
    assert whole is not None
    before = served.bytes  # what reading the whole entry costs: every body
    del whole
    served.requests = served.bytes = 0

    tracemalloc.start()
    try:
        receipts = journal.entries.read_receipts(7, 0)
        held = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert receipts is not None and receipts.rows == 1000
    assert receipts.message_ids == tuple(table.column("messageId").to_pylist())
    assert receipts.receipt_handles == tuple(table.column("_receiptHandle").to_pylist())
    assert receipts.queue_urls == (QUEUE_URL,) * 1000
    assert before > 65_000_000 and entry_bytes == 0
    if isinstance(journal.store, S3Store):
        # The tail GET (footer, queue URLs, receipt handles), then one read-ahead GET at the
        # head (the batch's metadata, the message ids): what the client holds at most.
        assert served.requests == 2
        assert served.bytes == TAIL_BYTES + READ_AHEAD
    else:
        assert served.bytes < 500_000
        # Python allocations while reading: the ids and handles. (Not on S3 here: moto's
        # server runs in this process, and its allocations would count.)
        assert held < 2 * TAIL_BYTES


def test_ids_of_an_entry_and_of_parts_are_read_without_the_bodies(
    counted: tuple[Journal, Served],
) -> None:
    journal, served = counted
    table = entry_of(300, KIB64)
    assert journal.entries.write(7, 0, table)
    for part in range(3):
        assert journal.entries.write_part(7, 1, part, entry_of(100, KIB64, first=300 + 100 * part))
    served.requests = served.bytes = 0

    assert journal.entries.receiver_ids(7, 0) == table.column("messageId").to_pylist()
    assert len(journal.entries.receiver_ids(7, 1)) == 300
    assert journal.entries.has_journaled(7, 1) and not journal.entries.has_journaled(7, 2)
    parts = journal.entries.read_parts(7, 1, ID_COLUMNS)
    assert [t.column_names for _, t in parts] == [["messageId"]] * 3

    # Entry and parts hold 600 bodies of 64 KiB (39 MiB); each of the four reads of their ids
    # (and the existence check) would read them whole before.
    assert served.bytes < 12 * TAIL_BYTES


def test_a_small_entry_costs_one_request_on_s3() -> None:
    data = pa.BufferOutputStream()
    table = entry_of(3, "small")
    with pa.ipc.new_file(data, table.schema) as writer:
        writer.write_table(table)
    blob = data.getvalue().to_pybytes()
    calls: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        calls.append((start, end))
        return blob[start:end]

    source = RangedObject(fetch, len(blob), blob)  # the tail GET returned the whole object
    back = pa.ipc.open_file(pa.PythonFile(source, "r")).read_all()
    assert back.equals(table)
    assert calls == [] and source.requests == 1


def test_a_ranged_read_past_what_was_fetched_reads_ahead() -> None:
    blob = bytes(range(256)) * 8192  # 2 MiB
    calls: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        calls.append((start, end))
        return blob[start:end]

    source = RangedObject(fetch, len(blob), blob[-TAIL_BYTES:])
    source.seek(10)
    assert source.read(5) == blob[10:15]
    assert source.read(100) == blob[15:115]  # within the read-ahead: no request
    source.seek(-3, io.SEEK_END)
    assert source.read() == blob[-3:]
    assert calls == [(10, 10 + READ_AHEAD)]


def test_parts_are_combined_one_at_a_time(counted: tuple[Journal, Served]) -> None:
    journal, _ = counted
    parts = [entry_of(10, "y" * (100 << 10), first=10 * k) for k in range(10)]  # 1 MiB each
    for k, part in enumerate(parts):
        assert journal.entries.write_part(7, 0, k, part)
    empty = messages_to_table([], QUEUE_URL).schema

    tracemalloc.start()
    try:
        written = journal.entries.write_from_parts(
            7, 0, list(range(10)), {b"spark_sqs.pendingDelete": b"[]"}, empty
        )
        sealed_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        adopted = journal.entries.adopt(7, 0, 8, 10000)  # from the entry
        entry_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        journal.entries.remove(7, 0)
        from_parts = journal.entries.adopt(7, 0, 9, 10000)  # from the parts
        parts_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert written and adopted and from_parts
    local = not isinstance(journal.store, S3Store)  # moto's server runs in this process
    whole = pa.concat_tables(parts)
    for batch in (8, 9):
        back = journal.entries.read(batch, 10000)
        assert back is not None
        assert back.column("messageId").to_pylist() == whole.column("messageId").to_pylist()
        assert back.column("body").to_pylist() == whole.column("body").to_pylist()
    one_part = parts[0].nbytes
    if local:
        # Ten parts of about 1 MiB: at most one source is held (two while the next is read).
        assert sealed_peak < 2.5 * one_part, sealed_peak
        assert parts_peak < 2.5 * one_part, parts_peak
        # The entry of all parts was read whole, as one source.
        assert entry_peak < 1.5 * whole.nbytes, entry_peak


def test_an_adoption_keeps_only_the_ids_asked_for(counted: tuple[Journal, Served]) -> None:
    journal, _ = counted
    for k in range(3):
        assert journal.entries.write_part(7, 0, k, entry_of(4, "z", first=4 * k))
    keep = {sqs_message(n)["MessageId"] for n in (1, 5, 11)}
    assert journal.entries.adopt(7, 0, 8, 10000, keep=keep)
    receipts = journal.entries.read_receipts(8, 10000)
    assert receipts is not None and set(receipts.message_ids) == keep
    assert journal.entries.adopt(7, 0, 8, 10000) is False  # an existing target is kept


def test_output_batches_of_many_chunks_are_combined_a_group_at_a_time() -> None:
    chunks = [entry_of(10, "w" * (100 << 10), first=10 * k) for k in range(30)]  # 30 MiB
    table = pa.concat_tables(chunks)
    batches = list(output_batches(table))
    assert sum(b.num_rows for b in batches) == 300
    assert [r for b in batches for r in b.column("messageId").to_pylist()] == table.column(
        "messageId"
    ).to_pylist()
    one = chunks[0].nbytes
    assert 1 < len(batches) < 30
    assert all(b.nbytes < (8 << 20) + one for b in batches)


def test_a_large_entry_is_handed_to_spark_in_slices_without_a_copy() -> None:
    table = entry_of(100, "v" * (512 << 10))  # 50 MiB in one chunk
    data = table.column("body").chunk(0).buffers()[2]
    batches = list(output_batches(table))
    assert len(batches) >= 6 and sum(b.num_rows for b in batches) == 100
    for batch in batches:
        assert batch.column("body").buffers()[2].address == data.address
    assert [r for b in batches for r in b.column("messageId").to_pylist()] == table.column(
        "messageId"
    ).to_pylist()


def test_a_receiver_hands_the_heap_of_dropped_messages_back_on_glibc() -> None:
    import sys

    from spark_sqs.executor import memory

    assert memory.release(memory.TRIM_AFTER - 1) is False
    glibc = sys.platform.startswith("linux") and memory._malloc_trim() is not None
    assert memory.release(memory.TRIM_AFTER) is glibc
