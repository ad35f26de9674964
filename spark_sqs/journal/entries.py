"""Journal entries, and the ``Journal`` that holds every record kind. Runs on: driver and
executors.

An entry is what one receiver of a batch got, as an Arrow IPC file; with deleteAfterJournal a
receiver writes one part per receive call first and seals them into its entry. Keys::

    batches/<N>/<receiver>.arrow             messages one receiver got (Arrow IPC file)
    batches/<N>/<receiver>.part-<k>.arrow    deleteAfterJournal: one receive call's messages
    batches/<N>/<receiver>.extended          the receiver extended its entry's messages itself
                                             (executor/extension.py); the body holds the epoch
                                             second it extended them until

Entries are read by key, never found by a LIST: the batch's plan names every receiver, and a
receiver's parts are numbered densely from 0. A listing may lag a write (S3-compatible stores,
NFS across hosts); a key that was written is read. Entries hold receipt handles, so local files
are created readable by the owner only.

``Journal`` holds the store (``stores.py``, opened lazily) and one object per record kind, each
of which builds its own keys: ``plans`` (plans.py), ``batches`` (a batch's life, batches.py),
``entries`` (here), ``drops``, ``dedupe``, ``state`` (markers), ``window``, ``metrics``,
``aliases``, ``meta`` (identity, ownership, the store probe: meta.py) and ``poison``
(poison.py); the single-owner lease is ``lease.py``, the acknowledgement reports
``spark_sqs.acknowledgement.reports``. docs/design.md ("The journal") lists every key.

Every protocol write is create-if-absent on the store, so a retried or concurrent attempt sees
exactly what the first writer stored; the state is a set of markers (the highest counts), never a
file that is overwritten. The driver removes a batch's files once its messages are acknowledged.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from ..errors import JournalError
from ..schema import RECEIPT_HANDLE as RECEIPT
from .aliases import Aliases
from .batches import Batches, batch_dir
from .dedupe import Dedupe
from .drops import Drops
from .meta import Meta
from .metrics import Metrics
from .plans import Plans
from .poison import PoisonRecords
from .state import State
from .stores import (
    JournalRoot,
    JournalStore,
    ObjectVanished,
    Record,
    corrupt,
    ipc_table,
    open_store,
)
from .window import Window

if TYPE_CHECKING:
    from ..connection import Connection

logger = logging.getLogger(__name__)

_PART = re.compile(r"^(\d{5,})\.part-(\d{5})\.arrow$")

# Schema metadata key of an entry: wall-clock time (epoch seconds) at which its receiver started
# receiving, so the driver knows when the entry's receipt handles expire at the latest.
RECEIVED_AT = b"spark_sqs.receivedAt"
# With deleteAfterJournal: JSON list of the entry's message ids that still await deletion.
PENDING_DELETE = b"spark_sqs.pendingDelete"
# Number of redeliveries the receiver dropped (for the batch's counters).
DROPPED = b"spark_sqs.dropped"
# Number of those that copied a message acknowledged within duplicateWindow (journal/window.py).
WINDOW_DROPPED = b"spark_sqs.windowDropped"
# Number of messages received and then not journaled because their handle had expired while
# the receiver stalled (executor/journaling.py ``_still_held``).
EXPIRED_DROPPED = b"spark_sqs.expiredDropped"
# duplicateAttribute: JSON list of the window keys of the entry's rows' attribute values.
WINDOW_KEYS = b"spark_sqs.windowKeys"
# With deleteAfterJournal: marks the empty part that closes a receiver's parts (see receiver).
SEAL = b"spark_sqs.seal"
# With deleteAfterJournal: the bytes of a part's messages as its receiver counted them
# (executor/envelopes.py ``message_bytes``); a retried attempt counts them towards its byte
# limit. Absent from parts written before byte limits (whose plans have none).
BYTES = b"spark_sqs.bytes"


@dataclass(frozen=True)
class EntryReceipts:
    batch: int
    receiver: int
    received_at: float
    message_ids: tuple[str, ...]
    receipt_handles: tuple[str, ...] = field(repr=False)
    rows: int = 0  # rows in the entry (with deleteAfterJournal, also those already deleted)
    dropped: int = 0  # redeliveries the receiver dropped
    window_dropped: int = 0  # of those, copies of messages acknowledged within the window
    expired_dropped: int = 0  # received, not journaled: their handle expired meanwhile
    # (message id, queue) of every row: ``message_ids`` lacks those deleteAfterJournal already
    # deleted, which the duplicate window must still hold (journal/window.py).
    journaled: tuple[tuple[str, str | None], ...] = field(default=(), repr=False, compare=False)
    # duplicateAttribute: the window keys of the rows' values of it (journal/window.py).
    window_keys: tuple[str, ...] = field(default=(), repr=False, compare=False)
    # The entry's schema metadata (lag, extended payload pointers: see lag.py and
    # executor/envelopes.py).
    metadata: dict[bytes, bytes] = field(default_factory=dict, repr=False, compare=False)
    # The queue of each message (its row's queueUrl), where its receipt handle belongs.
    queue_urls: tuple[str, ...] = field(default=(), compare=False)


# The columns a reader of receipt handles needs (driver acknowledgement, heartbeat, receivers
# acknowledging their share), and of message ids: never the bodies.
RECEIPT_COLUMNS = ("messageId", "queueUrl", RECEIPT)
ID_COLUMNS = ("messageId",)


def _ipc_columns(source: pa.NativeFile, columns: Sequence[str], where: str) -> pa.Table:
    """``columns`` of the Arrow IPC file ``source`` (those it has), with its schema metadata.
    Only their buffers are read: on a memory map or ranged GETs, the bodies never are."""
    try:
        names = pa.ipc.open_file(source).schema.names
        wanted = [names.index(c) for c in columns if c in names]
        reader = pa.ipc.open_file(
            source, options=pa.ipc.IpcReadOptions(included_fields=wanted, use_threads=False)
        )
        return reader.read_all().replace_schema_metadata(reader.schema.metadata)
    except pa.ArrowInvalid as exc:
        raise corrupt(where, exc) from None


class JournalOptions(Protocol):
    """What the journal reads of the source's options (``spark_sqs.options.SqsOptions``)."""

    @property
    def connection(self) -> Connection: ...
    @property
    def journal_sse_kms_key_id(self) -> str | None: ...
    @property
    def sns(self) -> bool: ...


def entry_name(receiver: int) -> str:
    return f"{receiver:05d}.arrow"


def entry_key(batch: int, receiver: int) -> str:
    return f"{batch_dir(batch)}/{entry_name(receiver)}"


def part_key(batch: int, receiver: int, part: int) -> str:
    return f"{batch_dir(batch)}/{receiver:05d}.part-{part:05d}.arrow"


def _extended_key(batch: int, receiver: int) -> str:
    return f"{batch_dir(batch)}/{receiver:05d}.extended"


class Entries(Record):
    """Entries and parts of receivers, with their extension markers and adoption."""

    @staticmethod
    def names(receivers: Iterable[int]) -> list[str]:
        """The base names under ``batches/<N>/`` that ``receivers`` write when nothing went
        wrong (entries, extension markers), for a removal by key (``Batches.remove``)."""
        named = sorted(set(receivers))
        return [*(entry_name(r) for r in named), *(f"{r:05d}.extended" for r in named)]

    def __init__(self, journal: JournalRoot, options: JournalOptions | None = None) -> None:
        super().__init__(journal)
        self._options = options

    def read(self, batch: int, receiver: int) -> pa.Table | None:
        key = entry_key(batch, receiver)
        data = self.store.read(key)
        return None if data is None else ipc_table(data, key)

    def read_receipts(self, batch: int, receiver: int) -> EntryReceipts | None:
        """Message ids, receipt handles and receive time of an entry, read without its bodies
        (``_read_columns``): an entry of 1,000 messages of 64 KiB costs about 0.5 MB, not 66."""
        table = self._read_columns(entry_key(batch, receiver), RECEIPT_COLUMNS)
        return None if table is None else receipts_of(batch, receiver, table)

    def _read_columns(self, key: str, columns: Sequence[str]) -> pa.Table | None:
        """``columns`` of the Arrow file ``key`` (with its schema metadata), or None if absent.
        On a store with random access (``open_random``: local files, S3) only their buffers
        and the file's footer are read; on another, the object is read whole first."""
        opener = getattr(self.store, "open_random", None)
        if opener is None:
            data = self.store.read(key)
            source = None if data is None else pa.BufferReader(data)
        else:
            source = opener(key)
        if source is None:
            return None
        try:
            return _ipc_columns(source, columns, key)
        except ObjectVanished:
            return None
        finally:
            source.close()

    def _exists(self, key: str) -> bool:
        """Whether ``key`` exists, without reading all of it where the store allows."""
        opener = getattr(self.store, "open_random", None)
        if opener is None:
            return self.store.read(key) is not None
        source = opener(key)
        if source is None:
            return False
        source.close()
        return True

    def batch_receipts(self, batch: int, receivers: Iterable[int]) -> list[EntryReceipts]:
        """The entries of ``receivers`` of ``batch`` (those its plan names) that exist."""
        out = []
        for receiver in sorted(set(receivers)):
            receipts = self.read_receipts(batch, receiver)
            if receipts is not None:
                out.append(receipts)
        return out

    def write(self, batch: int, receiver: int, table: pa.Table) -> bool:
        """Create an entry; False (nothing written) if one already exists."""
        return self._create_table(entry_key(batch, receiver), table.schema, table.to_batches())

    def write_part(self, batch: int, receiver: int, part: int, table: pa.Table) -> bool:
        """One receive call's messages (deleteAfterJournal); never overwritten."""
        return self._create_table(part_key(batch, receiver, part), table.schema, table.to_batches())

    def write_from_parts(
        self,
        batch: int,
        receiver: int,
        parts: Sequence[int],
        metadata: dict[bytes, bytes],
        empty: pa.Schema,
    ) -> bool:
        """Create the receiver's entry from its ``parts`` (deleteAfterJournal's seal), with
        ``metadata``, streamed: one part is read at a time (the schema ``empty`` when there
        is none). False if the entry exists."""
        return self._create_streamed(
            entry_key(batch, receiver),
            [part_key(batch, receiver, k) for k in parts],
            empty,
            metadata,
        )

    def _create_table(self, key: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> bool:
        """Create ``key`` as an Arrow IPC file of ``batches``, streamed where the store can
        (``create_stream``: to the file as written locally, from one buffer to S3), so that
        writing an entry never builds a second copy of it besides the store's buffer."""

        def fill(out: Any) -> None:
            with pa.ipc.new_file(out, schema) as writer:
                for record_batch in batches:
                    writer.write_batch(record_batch)

        stream = getattr(self.store, "create_stream", None)
        if stream is not None:
            return bool(stream(key, fill))
        sink = pa.BufferOutputStream()
        fill(sink)
        return self.store.create(key, sink.getvalue().to_pybytes())

    def _create_streamed(
        self,
        key: str,
        sources: Sequence[str],
        empty: pa.Schema,
        metadata: dict[bytes, bytes] | None = None,
        keep: Collection[str] | None = None,
    ) -> bool:
        """Create ``key`` from the Arrow files ``sources``, one record batch at a time: their
        rows (only the ids in ``keep`` when given), with ``metadata`` (else the first
        source's). Each source is read whole while it is copied, never two at once. A source
        that vanished meanwhile (its batch removed) fails the write."""
        wanted = set(keep) if keep is not None else None

        def batches() -> Iterator[tuple[pa.Schema, pa.RecordBatch | None]]:
            for source in sources:
                data = self.store.read(source)
                if data is None:
                    raise JournalError(f"Journal file {source} vanished while it was copied")
                try:
                    reader = pa.ipc.open_file(pa.BufferReader(data))
                    for i in range(reader.num_record_batches):
                        record_batch = reader.get_batch(i)
                        if wanted is not None:
                            ids = record_batch.column(
                                record_batch.schema.get_field_index("messageId")
                            ).to_pylist()
                            record_batch = record_batch.filter(
                                pa.array([i in wanted for i in ids], pa.bool_())
                            )
                        yield reader.schema, record_batch
                    if reader.num_record_batches == 0:
                        yield reader.schema, None
                except pa.ArrowInvalid as exc:
                    raise corrupt(source, exc) from None
                del data

        def fill(out: Any) -> None:
            writer = None
            try:
                for schema, record_batch in batches():
                    if writer is None:
                        chosen = schema if metadata is None else schema.with_metadata(metadata)
                        writer = pa.ipc.new_file(out, chosen)
                    if record_batch is not None:
                        writer.write_batch(record_batch)
                if writer is None:
                    writer = pa.ipc.new_file(out, empty.with_metadata(metadata or {}))
            finally:
                if writer is not None:
                    writer.close()

        stream = getattr(self.store, "create_stream", None)
        if stream is not None:
            return bool(stream(key, fill))
        sink = pa.BufferOutputStream()
        fill(sink)
        return self.store.create(key, sink.getvalue().to_pybytes())

    def remove(self, batch: int, receiver: int) -> None:
        self.store.delete(entry_key(batch, receiver))

    def remove_part(self, batch: int, receiver: int, part: int) -> None:
        self.store.delete(part_key(batch, receiver, part))

    def read_parts(
        self, batch: int, receiver: int, columns: Sequence[str] | None = None
    ) -> list[tuple[int, pa.Table]]:
        """The receiver's parts, by key: part ``k`` is created only once part ``k - 1`` exists
        (by this attempt or a concurrent one), so the parts are 0, 1, ... up to the first
        number that is absent. With ``columns``, only those are read (and the schema
        metadata, which holds the seal): the bodies stay in the store."""
        parts = []
        while True:
            table = self.read_part(batch, receiver, len(parts), columns)
            if table is None:
                return parts
            parts.append((len(parts), table))

    def read_part(
        self, batch: int, receiver: int, part: int, columns: Sequence[str] | None = None
    ) -> pa.Table | None:
        key = part_key(batch, receiver, part)
        if columns is not None:
            return self._read_columns(key, columns)
        data = self.store.read(key)
        return None if data is None else ipc_table(data, key)

    def receiver_ids(self, batch: int, receiver: int) -> list[str]:
        """Ids a receiver of ``batch`` journaled: its entry's, else its parts' (an attempt that
        died mid-loop under deleteAfterJournal). Bodies are not read."""
        table = self._read_columns(entry_key(batch, receiver), ID_COLUMNS)
        tables = (
            [table]
            if table is not None
            else [t for _, t in self.read_parts(batch, receiver, ID_COLUMNS)]
        )
        return [i for t in tables for i in t.column("messageId").to_pylist()]

    def batch_message_ids(
        self, batch: int, receivers: Iterable[int], but: int | None = None
    ) -> frozenset[str]:
        """Ids journaled by ``receivers`` of ``batch`` other than ``but`` (entries and parts)."""
        return frozenset(
            i for r in sorted(set(receivers)) if r != but for i in self.receiver_ids(batch, r)
        )

    def has_journaled(self, batch: int, receiver: int) -> bool:
        """True if the receiver has an entry or a part (two reads at most)."""
        return self._exists(entry_key(batch, receiver)) or self._exists(
            part_key(batch, receiver, 0)
        )

    def write_extension(self, batch: int, receiver: int, until: int) -> None:
        """Record that the receiver extended its entry's messages itself (executor/extension.py).
        The driver bounds the deadline by its own clock (the batch's planning time plus the
        plan's ``extend_by``), never by ``until``, which the executor's clock measured; it is
        kept in the body for people reading the journal."""
        body = json.dumps({"until": int(until)}).encode()
        self.store.create(_extended_key(batch, receiver), body)

    def extended_receivers(self, batch: int, receivers: Iterable[int]) -> set[int]:
        """Which of ``receivers`` recorded their own extension (a read each)."""
        return {
            r
            for r in sorted(set(receivers))
            if self.store.read(_extended_key(batch, r)) is not None
        }

    def adopt(
        self,
        orphan: int,
        receiver: int,
        batch: int,
        target: int,
        keep: Collection[str] | None = None,
        copies: Callable[[], Sequence[tuple[int, int, Collection[str] | None]]] | None = None,
    ) -> bool:
        """Copy one orphaned entry (or a dead receiver's parts) into ``batch`` as receiver
        ``target``; only the ids in ``keep`` when given (an orphan narrowed by the poison
        policy: the rest were carried out or quarantined). Idempotent: an existing target is
        kept. A source that has vanished is copied from the first of ``copies()`` (``(batch,
        receiver, keep)``: where another orphan's adoption copied it; read only then) that
        exists: a deposed driver finishing its own adoption removes the original once its copy
        exists, after this driver chose the original. A source vanished with no copy (a
        straggler of the orphan removed the entry it wrote once it found the orphan retired,
        leaving its messages in flight) becomes an empty entry, so the adopting batch's replays
        deliver nothing for it instead of failing.

        Streamed (``_create_streamed``): one source file at a time, never the whole of a
        receiver's parts. Parts become one entry whose messages all await deletion (whether
        the dead attempt deleted them is unknown)."""
        if self._exists(entry_key(batch, target)):
            return False
        empty = _empty_entry(self._options).schema
        source = entry_key(orphan, receiver)
        if self._exists(source):
            return self._create_streamed(entry_key(batch, target), [source], empty, keep=keep)
        parts = self.read_parts(orphan, receiver, ID_COLUMNS)
        if not parts:
            for other, other_receiver, other_keep in copies() if copies is not None else ():
                if self.has_journaled(other, other_receiver):
                    # What the source's narrowing and the copy's own orphan's narrowing keep:
                    # each one's carry batch holds the rest.
                    if keep is not None:
                        other_keep = (
                            keep if other_keep is None else set(keep).intersection(other_keep)
                        )
                    logger.warning(
                        "batch %d: the entry of receiver %d of batch %d it adopts was removed "
                        "by the adoption that copied it to receiver %d of batch %d; copying that",
                        batch,
                        receiver,
                        orphan,
                        other_receiver,
                        other,
                    )
                    return self.adopt(other, other_receiver, batch, target, keep=other_keep)
            logger.warning(
                "batch %d: the entry of receiver %d of batch %d it adopts has vanished (its "
                "messages come back after their visibility timeout); delivering nothing for it",
                batch,
                receiver,
                orphan,
            )
            return self.write(batch, target, _empty_entry(self._options))
        received = min(float((t.schema.metadata or {}).get(RECEIVED_AT, b"0")) for _, t in parts)
        ids = [i for _, t in parts for i in t.column("messageId").to_pylist()]
        metadata = {
            RECEIVED_AT: repr(received).encode(),
            PENDING_DELETE: json.dumps(sorted(ids)).encode(),
        }
        return self._create_streamed(
            entry_key(batch, target),
            [part_key(orphan, receiver, k) for k, _ in parts],
            empty,
            metadata,
            keep,
        )


class Journal:
    """The journal at ``location``: its store and its record kinds (module docstring); cheap to
    pickle (the store opens lazily)."""

    def __init__(
        self,
        location: str,
        options: JournalOptions | None = None,
        store: JournalStore | None = None,
    ) -> None:
        self.location = location
        self._options = options
        self._store = store
        # The record kinds, each over this journal's store and owning its keys.
        self.plans = Plans(self)
        self.poison = PoisonRecords(self)
        self.window = Window(self)
        self.batches = Batches(self, self.plans, self.poison, self.window)
        self.entries = Entries(self, options)
        self.drops = Drops(self, self.plans, self.batches)
        self.dedupe = Dedupe(self)
        self.state = State(self, self.dedupe, self.plans, self.batches)
        self.metrics = Metrics(self)
        self.aliases = Aliases(self)
        self.meta = Meta(self)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def store(self) -> JournalStore:
        if self._store is None:
            try:
                options = self._options
                self._store = open_store(
                    self.location,
                    options.connection if options else None,
                    kms_key_id=options.journal_sse_kms_key_id if options else None,
                )
            except JournalError:
                raise
            except Exception as exc:
                raise JournalError(
                    f"Cannot open journalLocation {self.location!r}: {exc}. Fix: use a local "
                    "path or s3://bucket/prefix"
                ) from None
        return self._store


def _empty_entry(options: JournalOptions | None) -> pa.Table:
    from ..schema import messages_to_table

    return messages_to_table([], "", sns=bool(options is not None and options.sns))


def receipts_of(batch: int, receiver: int, table: pa.Table) -> EntryReceipts:
    metadata = table.schema.metadata or {}
    ids = table.column("messageId").to_pylist()
    handles = table.column(RECEIPT).to_pylist()
    queues = (
        table.column("queueUrl").to_pylist()
        if "queueUrl" in table.column_names
        else [None] * len(ids)
    )
    journaled = tuple(zip(ids, queues, strict=True))
    if PENDING_DELETE in metadata:
        # The receiver already deleted the rest (deleteAfterJournal).
        pending = set(json.loads(metadata[PENDING_DELETE]))
        keep = [n for n, i in enumerate(ids) if i in pending]
        ids, handles, queues = (
            [ids[n] for n in keep],
            [handles[n] for n in keep],
            [queues[n] for n in keep],
        )
    return EntryReceipts(
        batch=batch,
        receiver=receiver,
        received_at=float(metadata.get(RECEIVED_AT, b"0")),
        message_ids=tuple(ids),
        receipt_handles=tuple(handles),
        rows=table.num_rows,
        dropped=int(metadata.get(DROPPED, b"0")),
        window_dropped=int(metadata.get(WINDOW_DROPPED, b"0")),
        expired_dropped=int(metadata.get(EXPIRED_DROPPED, b"0")),
        journaled=journaled,
        window_keys=tuple(json.loads(metadata.get(WINDOW_KEYS, b"[]"))),
        metadata=dict(metadata),
        queue_urls=tuple(queues),
    )
