"""The durable record of what each receiver got. Runs on: driver and executors.

Layout under ``journalLocation`` (keys of a ``JournalStore``)::

    _meta.json                               queue the journal belongs to, and its identity
                                             (every offset carries it), never rewritten
    format/<F>                               journal format F, when a version took over a
                                             journal of an earlier format in place
    _probe/<uuid>                            the start-up probe of create-if-absent (removed)
    state/planned-<N>, acked-<N>             markers: highest batch numbered, acknowledged
                                             (retired-<N>, initial-<N>: earlier versions')
    state/initial.json                       the batch the journal's first offset named
    lease/<seq>.json                         the live query that owns the journal (lease.py)
    aliases/<journal id>-<N>.json            another journal's batch N that this one absorbed
                                             (driver/offsets.py ``CheckpointGuard.absorbs``)
    batches/<N>/_plan.json                   the batch's plan, written once, before any receive
    batches/<N>/_retired.json                the batch was adopted by a later one
    batches/<N>/_carry.json, _suspect.json, _released.json
                                             poison batches (poison.py)
    batches/<N>/<receiver>.arrow             messages one receiver got (Arrow IPC file)
    batches/<N>/<receiver>.part-<k>.arrow    deleteAfterJournal: one receive call's messages
    batches/<N>/<receiver>.extended-<T>      empty: the receiver extended its entry's messages
                                             until epoch second T (executor/extension.py)
    drops/<N>-<sha256>.arrow                 a drop set of batch N (by content), referenced by its
                                             plan or by the partitions of its replay
    acks/<N>/<receiver>.json                 what a receiver of N acknowledged, read by key
                                             (``<receiver>.s-<summary>.json``: an earlier
                                             version's, found by a LIST only when that is absent)
    dedupe/<N>-<sha256>.arrow                ids whose acknowledgement may not have taken effect
    window/<expires>-<N>-<who>.arrow         digests of acknowledged ids (duplicateWindow)
    metrics/<N>.json                         counters of acknowledged batches

Every protocol write is create-if-absent on the store, so a retried or concurrent attempt sees
exactly what the first writer stored; the state is a set of markers (the highest counts), never a
file that is overwritten. The driver removes a batch's files once its messages are acknowledged.
Entries hold receipt handles, so local files are created readable by the owner only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from ..errors import JournalError, JournalInUseError, UnsafeStoreError
from ..schema import RECEIPT_HANDLE as RECEIPT
from . import poison, window
from .stores import JournalStore, ObjectVanished, open_store

if TYPE_CHECKING:
    from ..connection import Connection

logger = logging.getLogger(__name__)

_ENTRY = re.compile(r"^(\d{5,})\.arrow$")
_PART = re.compile(r"^(\d{5,})\.part-(\d{5})\.arrow$")
_EXTENDED = re.compile(r"^(\d{5,})\.extended-(\d+)$")
# drops/<batch>-<sha256>.arrow; a journal of an earlier version named them drops/<sha256>.arrow.
_DROPS = re.compile(r"^drops/(?:(\d{12})-)?([0-9a-f]{64})\.arrow$")
_BATCH_KEY = re.compile(r"^batches/(\d{12})/")
_MARKER = re.compile(r"^state/(planned|acked|initial|retired)-(\d{12})$")
# 3: _meta.json holds the journal's identity, which offsets carry. A journal of a higher
# format is refused (Journal.meta).
FORMAT_VERSION = 3
META = "_meta.json"
PLAN = "_plan.json"
INITIAL = "state/initial.json"
# How many of the newest planned markers are kept (write_state).
PLANNED_MARKERS_KEPT = 16
RETIRED = "_retired.json"
# How often a listing whose markers all vanished is taken again (Journal.read_state).
_RELISTS = 3
# Journal.batch_status
LIVE, RETIRED_STATUS, REMOVED = "live", "retired", "removed"

# Schema metadata key of an entry: wall-clock time (epoch seconds) at which its receiver started
# receiving, so the driver knows when the entry's receipt handles expire at the latest.
RECEIVED_AT = b"spark_sqs.receivedAt"
EXPIRES_AT = b"spark_sqs.expiresAt"
# With deleteAfterJournal: JSON list of the entry's message ids that still await deletion.
PENDING_DELETE = b"spark_sqs.pendingDelete"
# Number of redeliveries the receiver dropped (for the batch's counters).
DROPPED = b"spark_sqs.dropped"
# Number of those that copied a message acknowledged within duplicateWindow (journal/window.py).
WINDOW_DROPPED = b"spark_sqs.windowDropped"
# Number of messages received and then not journaled because their handle had expired while
# the receiver stalled (executor/receiver.py ``_still_held``).
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


@dataclass(frozen=True)
class JournalState:
    planned_batch: int = 0
    acked_batch: int = 0
    # The offset first handed to Spark as initialOffset. Spark asks for it again when it
    # restarts a query whose first batch never committed, and must get the same answer.
    initial_batch: int | None = None
    # Retirement markers of an earlier version (``state/retired-<N>``), converted at start to
    # the batches' own markers (``Journal.retire_legacy_markers``).
    retired: frozenset[int] = frozenset()


@dataclass(frozen=True)
class ReceiverPlan:
    """One receiver of a planned batch: how many messages it may receive, or which entry of an
    orphaned batch (never in this query's offset log) it delivers instead."""

    receiver: int
    limit: int
    adopt_from: tuple[int, int] | None = None  # (orphan batch, orphan receiver)
    # The queue it receives from, fixed with the plan (several queues, driver/queues.py). None: a
    # plan written before queues were recorded, whose queue is the journal's (``Journal.owner``).
    queue: str | None = None
    # Its part of the messages the driver saw visible in its queue when it planned the batch
    # (driver/planning.py ``visible_parts``): the receiver counts itself caught up once it has
    # received that many and a margin (executor/receiver.py). None: no count (a plan written
    # before counts were recorded, or planned before any poll answered): no such bound.
    visible: int | None = None
    # The receiver's memory bound in bytes (maxBytesPerReceiver, or its share of
    # maxBytesPerTrigger): it stops receiving once it holds this much (executor/receiver.py).
    # None: a plan written before byte limits, which replays as it was planned, without one.
    max_bytes: int | None = None


@dataclass(frozen=True)
class AckAssignment:
    """One entry of a committed batch that a receiver of the planned batch acknowledges
    (deletes from SQS) before it receives: acknowledgement runs on executors, in parallel."""

    batch: int  # the committed batch
    receiver: int  # its receiver whose entry is acknowledged
    by: int  # the receiver of the planned batch that does it
    # Wall-clock time until which the entry's receipt handles are known to be valid (receive
    # time plus the visibility timeout, or later if the heartbeat extended them).
    valid_until: float
    lost: tuple[str, ...] = ()  # message ids whose visibility the heartbeat lost


@dataclass(frozen=True)
class BatchPlan:
    """What every attempt of a batch does, fixed the first time the batch is planned."""

    batch: int
    receivers: tuple[ReceiverPlan, ...]
    drops: str | None = None  # digest of the drop-set object, None when empty
    drop_count: int = 0
    acks: tuple[AckAssignment, ...] = ()
    # deleteAfterJournal when the batch was first planned: a replay journals the same way,
    # whatever the option is now (None: a plan written before the mode was recorded).
    delete_after_journal: bool | None = None
    # Batches not yet acknowledged when this one was planned (itself included): a message
    # received again (ApproximateReceiveCount > 1) that one of them journaled is dropped.
    pending: tuple[int, ...] = ()
    # Seconds each receiver extends its messages by right after journaling them, then records
    # it with a marker (executor/extension.py); 0: the driver's heartbeat alone extends. Fixed
    # with the plan, like the rest of it; a replayed receiver never extends.
    extend_by: int = 0
    # The orphans this batch retired when it was planned (those it adopts entries of, and
    # those with nothing to adopt): all of them are done once the plan's copies exist.
    retires: tuple[int, ...] = ()

    @property
    def acknowledges(self) -> list[int]:
        """The committed batches this batch's receivers acknowledge."""
        return sorted({a.batch for a in self.acks})

    def acks_by(self, receiver: int) -> list[AckAssignment]:
        return [a for a in self.acks if a.by == receiver]

    def receiver(self, number: int) -> ReceiverPlan | None:
        for plan in self.receivers:
            if plan.receiver == number:
                return plan
        return None

    def deletes_on_journal(self, option: bool) -> bool:
        """Whether the receivers delete what they journal: as the plan recorded it, else (a
        plan from before the mode was recorded) the current ``deleteAfterJournal`` option."""
        return self.delete_after_journal if self.delete_after_journal is not None else option

    def to_json(self) -> bytes:
        doc = {
            "batch": self.batch,
            "receivers": [
                {"receiver": r.receiver, "limit": r.limit, "adoptFrom": r.adopt_from}
                | ({"queueUrl": r.queue} if r.queue is not None else {})
                | ({"visible": r.visible} if r.visible is not None else {})
                | ({"maxBytes": r.max_bytes} if r.max_bytes is not None else {})
                for r in self.receivers
            ],
            "drops": self.drops,
            "dropCount": self.drop_count,
            "deleteAfterJournal": self.delete_after_journal,
            "pending": list(self.pending),
            "acks": [[a.batch, a.receiver, a.by, a.valid_until, list(a.lost)] for a in self.acks],
        }
        if self.extend_by:
            doc["extendBy"] = self.extend_by
        if self.retires:
            doc["retires"] = list(self.retires)
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BatchPlan:
        doc = json.loads(data)
        return cls(
            batch=int(doc["batch"]),
            receivers=tuple(
                ReceiverPlan(
                    int(r["receiver"]),
                    int(r["limit"]),
                    tuple(r["adoptFrom"]) if r.get("adoptFrom") else None,  # type: ignore[arg-type]
                    r.get("queueUrl"),
                    None if r.get("visible") is None else int(r["visible"]),
                    int(r["maxBytes"]) if r.get("maxBytes") is not None else None,
                )
                for r in doc["receivers"]
            ),
            drops=doc.get("drops"),
            drop_count=int(doc.get("dropCount", 0)),
            delete_after_journal=doc.get("deleteAfterJournal"),
            pending=tuple(int(b) for b in doc.get("pending", ())),
            acks=tuple(
                AckAssignment(int(b), int(r), int(by), float(valid), tuple(lost))
                for b, r, by, valid, lost in doc.get("acks", ())
            ),
            extend_by=int(doc.get("extendBy", 0)),
            retires=tuple(int(b) for b in doc.get("retires", ())),
        )


def _ipc_bytes(table: pa.Table) -> bytes:
    """A small table (drop sets, dedupe records) as the bytes of an Arrow IPC file."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _corrupt(where: str, exc: Exception) -> JournalError:
    return JournalError(
        f"Journal entry {where} is corrupt ({exc}). It was written by an interrupted "
        "writer on a store without atomic writes. Fix: move it away; its messages "
        "reappear in SQS after their visibility timeout"
    )


def _ipc_table(data: bytes, where: str) -> pa.Table:
    try:
        return pa.ipc.open_file(pa.BufferReader(data)).read_all()
    except pa.ArrowInvalid as exc:
        raise _corrupt(where, exc) from None


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
        raise _corrupt(where, exc) from None


class _DropsCache:
    """Drop sets by digest, per process: every receiver of a batch on one executor reads it
    once, and the driver finds the set it just wrote. The newest ``sets`` sets are kept, and
    at most ``ids`` ids in all (the newest set always), so that neither a long-running driver,
    which writes one set per batch, nor an executor grows with the number of batches."""

    def __init__(self, sets: int = 8, ids: int = 1_000_000) -> None:
        self.max_sets = sets
        self.max_ids = ids
        self._sets: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, digest: str) -> frozenset[str] | None:
        with self._lock:
            found = self._sets.get(digest)
            if found is not None:
                self._sets.move_to_end(digest)
            return found

    def put(self, digest: str, ids: frozenset[str]) -> None:
        with self._lock:
            self._sets[digest] = ids
            self._sets.move_to_end(digest)
            held = sum(len(s) for s in self._sets.values())
            while len(self._sets) > 1 and (len(self._sets) > self.max_sets or held > self.max_ids):
                _, dropped = self._sets.popitem(last=False)
                held -= len(dropped)

    def clear(self) -> None:
        with self._lock:
            self._sets.clear()

    def __len__(self) -> int:
        return len(self._sets)

    @property
    def ids(self) -> int:
        return sum(len(s) for s in self._sets.values())


_DROPS_CACHE = _DropsCache()


class JournalOptions(Protocol):
    """What the journal reads of the source's options (``spark_sqs.options.SqsOptions``)."""

    @property
    def connection(self) -> Connection: ...
    @property
    def journal_sse_kms_key_id(self) -> str | None: ...
    @property
    def sns(self) -> bool: ...


class Journal:
    """Reads and writes journal records; cheap to pickle (the store opens lazily)."""

    def __init__(
        self,
        location: str,
        options: JournalOptions | None = None,
        store: JournalStore | None = None,
    ) -> None:
        self.location = location
        self._options = options
        self._store = store
        self._meta: dict[str, Any] | None = None
        # Dedupe records this process knows to be live (read at start, written since): the
        # newest acknowledged marker names them, so that a start reads them by key.
        self._dedupe_keys: dict[str, float] = {}
        # The dedupe records the newest acknowledged marker named when the state was read.
        self._marker_dedupe: list[str] = []

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

    @staticmethod
    def batch_dir(batch: int) -> str:
        return f"batches/{batch:012d}"

    @staticmethod
    def entry_name(receiver: int) -> str:
        return f"{receiver:05d}.arrow"

    def _entry_key(self, batch: int, receiver: int) -> str:
        return f"{self.batch_dir(batch)}/{self.entry_name(receiver)}"

    def _part_key(self, batch: int, receiver: int, part: int) -> str:
        return f"{self.batch_dir(batch)}/{receiver:05d}.part-{part:05d}.arrow"

    def _batch_files(self, batch: int) -> list[str]:
        """Base names of the files of ``batch`` (one LIST)."""
        prefix = self.batch_dir(batch) + "/"
        return [k[len(prefix) :] for k in self.store.list(self.batch_dir(batch))]

    # -- entries and parts ----------------------------------------------------------------------
    #
    # Read by key, never found by a LIST: the batch's plan names every receiver, and a
    # receiver's parts are numbered densely from 0. A listing may lag a write (S3-compatible
    # stores, NFS across hosts); a key that was written is read.

    def read_entry(self, batch: int, receiver: int) -> pa.Table | None:
        key = self._entry_key(batch, receiver)
        data = self.store.read(key)
        return None if data is None else _ipc_table(data, key)

    def read_receipts(self, batch: int, receiver: int) -> EntryReceipts | None:
        """Message ids, receipt handles and receive time of an entry, read without its bodies
        (``_read_columns``): an entry of 1,000 messages of 64 KiB costs about 0.5 MB, not 66."""
        table = self._read_columns(self._entry_key(batch, receiver), RECEIPT_COLUMNS)
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

    def write_entry(self, batch: int, receiver: int, table: pa.Table) -> bool:
        """Create an entry; False (nothing written) if one already exists."""
        return self._create_table(
            self._entry_key(batch, receiver), table.schema, table.to_batches()
        )

    def write_part(self, batch: int, receiver: int, part: int, table: pa.Table) -> bool:
        """One receive call's messages (deleteAfterJournal); never overwritten."""
        return self._create_table(
            self._part_key(batch, receiver, part), table.schema, table.to_batches()
        )

    def write_entry_from_parts(
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
            self._entry_key(batch, receiver),
            [self._part_key(batch, receiver, k) for k in parts],
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
                    raise _corrupt(source, exc) from None
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

    def remove_entry(self, batch: int, receiver: int) -> None:
        self.store.delete(self._entry_key(batch, receiver))

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
        key = self._part_key(batch, receiver, part)
        if columns is not None:
            return self._read_columns(key, columns)
        data = self.store.read(key)
        return None if data is None else _ipc_table(data, key)

    def receiver_ids(self, batch: int, receiver: int) -> list[str]:
        """Ids a receiver of ``batch`` journaled: its entry's, else its parts' (an attempt that
        died mid-loop under deleteAfterJournal). Bodies are not read."""
        table = self._read_columns(self._entry_key(batch, receiver), ID_COLUMNS)
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
        return self._exists(self._entry_key(batch, receiver)) or self._exists(
            self._part_key(batch, receiver, 0)
        )

    def write_extension(self, batch: int, receiver: int, until: int) -> None:
        """Record that the receiver extended its entry's messages itself (executor/extension.py).
        The driver bounds the deadline by its own clock (the batch's planning time plus the
        plan's ``extend_by``), never by ``until``, which the executor's clock measured; it is
        kept in the body for people reading the journal."""
        body = json.dumps({"until": int(until)}).encode()
        self.store.create(f"{self.batch_dir(batch)}/{receiver:05d}.extended", body)

    def extended_receivers(self, batch: int, receivers: Iterable[int]) -> set[int]:
        """Which of ``receivers`` recorded their own extension (a read each)."""
        return {
            r
            for r in sorted(set(receivers))
            if self.store.read(f"{self.batch_dir(batch)}/{r:05d}.extended") is not None
        }

    def adopt_entry(
        self,
        orphan: int,
        receiver: int,
        batch: int,
        target: int,
        keep: Collection[str] | None = None,
    ) -> bool:
        """Copy one orphaned entry (or a dead receiver's parts) into ``batch`` as receiver
        ``target``; only the ids in ``keep`` when given (an orphan narrowed by the poison
        policy: the rest were carried out or quarantined). Idempotent: an existing target is
        kept. A source that has vanished (a straggler of the orphan removed the entry it wrote
        once it found the orphan retired, leaving its messages in flight) becomes an empty
        entry, so the adopting batch's replays deliver nothing for it instead of failing.

        Streamed (``_create_streamed``): one source file at a time, never the whole of a
        receiver's parts. Parts become one entry whose messages all await deletion (whether
        the dead attempt deleted them is unknown)."""
        if self._exists(self._entry_key(batch, target)):
            return False
        empty = _empty_entry(self._options).schema
        source = self._entry_key(orphan, receiver)
        if self._exists(source):
            return self._create_streamed(self._entry_key(batch, target), [source], empty, keep=keep)
        parts = self.read_parts(orphan, receiver, ID_COLUMNS)
        if not parts:
            logger.warning(
                "batch %d: the entry of receiver %d of batch %d it adopts has vanished (its "
                "messages come back after their visibility timeout); delivering nothing for it",
                batch,
                receiver,
                orphan,
            )
            return self.write_entry(batch, target, _empty_entry(self._options))
        received = min(float((t.schema.metadata or {}).get(RECEIVED_AT, b"0")) for _, t in parts)
        ids = [i for _, t in parts for i in t.column("messageId").to_pylist()]
        metadata = {
            RECEIVED_AT: repr(received).encode(),
            PENDING_DELETE: json.dumps(sorted(ids)).encode(),
        }
        return self._create_streamed(
            self._entry_key(batch, target),
            [self._part_key(orphan, receiver, k) for k, _ in parts],
            empty,
            metadata,
            keep,
        )

    # -- a batch's life -----------------------------------------------------------------------
    #
    # A batch is live while its plan (or, for a batch of carried messages, its carry record)
    # exists. Removal deletes those first, so a batch whose removal a crash cut short is never
    # live again: what is left is garbage, removed when found. An orphan that a later batch
    # adopts is *retired* first (``_retired.json``): attempts of it stop before they delete or
    # keep anything, while it stays live until every copy exists.

    def retire(self, batch: int) -> None:
        """Mark an orphaned batch as delivered by a later one, before its entries are read for
        adoption: an attempt of it that journals later stops without deleting."""
        self.store.create(f"{self.batch_dir(batch)}/{RETIRED}", b"")

    def batch_status(self, batch: int) -> str:
        """``"live"``, ``"retired"`` (adopted by a later batch: an attempt stops, deleting
        nothing and keeping what it journaled for the adoption) or ``"removed"`` (acknowledged
        and removed, or adopted and removed: its plan is gone, and every attempt of a planned
        batch read its plan when it started). Two reads (four for a batch without a plan).

        The retirement marker is read first: a batch goes live, retired (the marker), removed
        (the plan first, the marker last), so a plan read after a marker that was absent means
        the batch was not retired before the first read, and anything journaled before it is
        seen by any adoption or acknowledgement after it. The other order could read the plan
        before a removal and the marker after it, and answer "live" for a removed batch."""
        retired = self.store.read(f"{self.batch_dir(batch)}/{RETIRED}") is not None
        if self.store.read(f"{self.batch_dir(batch)}/{PLAN}") is None:
            # A batch of carried messages has no plan, nor has a released batch whose plan a
            # crashed release left missing: both are live (``live_receivers``).
            if all(
                self.store.read(f"{self.batch_dir(batch)}/{name}") is None
                for name in (poison.CARRY, poison.RELEASED)
            ):
                return REMOVED
        return RETIRED_STATUS if retired else LIVE

    def is_finished(self, batch: int) -> bool:
        """True if no attempt of ``batch`` may journal, keep or delete anything any more."""
        return self.batch_status(batch) != LIVE

    def list_batches(self) -> list[int]:
        """Batches with files in the journal (one LIST of ``batches/``). Discovery of garbage
        only: which batches are live is read by key (``StateMarkers``, the driver's start)."""
        return sorted(
            {int(m.group(1)) for k in self.store.list("batches") if (m := _BATCH_KEY.match(k))}
        )

    def live_receivers(self, batch: int) -> tuple[int, ...] | None:
        """The receivers of ``batch`` if it is live, by key: those its plan names; for a batch
        of messages carried out of a narrowed batch (no plan), those its carry record names;
        for a released batch whose plan a crashed release left missing, its zero plan's. None
        if the batch is not live (never planned, or acknowledged or adopted and removed)."""
        plan = self.read_plan(batch) or self.released_plan(batch)
        if plan is not None:
            return tuple(r.receiver for r in plan.receivers)
        return poison.carry_receivers(self, batch)

    def remove_batch(self, batch: int) -> None:
        """Remove every file of ``batch``: first what makes it live (plan, carry and release
        records), by key, then the rest (one LIST; what it misses is garbage that the next
        start removes)."""
        for name in (PLAN, poison.CARRY, poison.RELEASED):
            self.store.delete(f"{self.batch_dir(batch)}/{name}")
        names = self._batch_files(batch)
        self.store.delete_many([f"{self.batch_dir(batch)}/{n}" for n in names])

    # -- plans --------------------------------------------------------------------------------

    def read_plan(self, batch: int) -> BatchPlan | None:
        data = self.store.read(f"{self.batch_dir(batch)}/{PLAN}")
        return None if data is None else BatchPlan.from_json(data)

    def released_plan(self, batch: int) -> BatchPlan | None:
        """The zero plan that ``spark-sqs release`` recorded for ``batch`` (None if it did not)."""
        data = self.store.read(f"{self.batch_dir(batch)}/{poison.RELEASED}")
        plan = None if data is None else json.loads(data).get("plan")
        return None if plan is None else BatchPlan.from_json(json.dumps(plan).encode())

    def write_plan(self, plan: BatchPlan) -> BatchPlan:
        """Create the batch's plan; if another call created one first, that one is the plan."""
        if self.store.create(f"{self.batch_dir(plan.batch)}/{PLAN}", plan.to_json()):
            return plan
        stored = self.read_plan(plan.batch)
        if stored is None:
            raise JournalError(
                f"The plan of batch {plan.batch} exists but cannot be read in "
                f"{self.location}. Fix: check the store's consistency and permissions"
            )
        return stored

    def write_drops(self, message_ids: frozenset[str], batch: int | None = None) -> str | None:
        """Store a drop set once, under its batch and digest; None for an empty set."""
        if not message_ids:
            return None
        ordered = sorted(message_ids)
        digest = hashlib.sha256("\n".join(ordered).encode()).hexdigest()
        if batch is not None:
            # The batch in the name tells collect_drops when no attempt can need it any more.
            digest = f"{batch:012d}-{digest}"
        table = pa.table({"messageId": pa.array(ordered, pa.string())})
        self.store.create(f"drops/{digest}.arrow", _ipc_bytes(table))
        _DROPS_CACHE.put(digest, frozenset(ordered))
        return digest

    def read_drops(self, digest: str | None) -> frozenset[str]:
        if digest is None:
            return frozenset()
        cached = _DROPS_CACHE.get(digest)
        if cached is not None:
            return cached
        key = f"drops/{digest}.arrow"
        data = self.store.read(key)
        if data is None:
            raise JournalError(
                f"The drop set {key} of a planned batch is missing from {self.location}. Fix: "
                "if journalLocation is a local path, every executor must see the same files: "
                "use an s3:// location on a cluster"
            )
        ids = frozenset(_ipc_table(data, key).column("messageId").to_pylist())
        _DROPS_CACHE.put(digest, ids)
        return ids

    def collect_drops(self, oldest_pending: int) -> int:
        """Remove the drop sets of batches before ``oldest_pending`` (every batch before it is
        acknowledged or retired): no plan of a pending batch, nor the partitions of a replay of
        one, names them. A straggling attempt of such a batch stops at its acknowledgement check;
        one that passed it just before finds its drop set gone and fails, and Spark drops a
        failed attempt of a finished task. Drop sets named by an earlier version (no batch)
        go once no stored plan names them. Returns how many were removed."""
        try:
            old: list[str] = []
            legacy: list[str] = []
            for key in self.store.list("drops"):
                match = _DROPS.match(key)
                if match is None:
                    continue
                if match.group(1) is None:
                    legacy.append(key)
                elif int(match.group(1)) < oldest_pending:
                    old.append(key)
            if legacy:
                named = {
                    f"drops/{plan.drops}.arrow"
                    for plan in map(self.read_plan, self.list_batches())
                    if plan is not None and plan.drops is not None
                }
                old.extend(k for k in legacy if k not in named)
            if old:
                self.store.delete_many(old)
        except Exception:
            # Storage, not correctness: the next acknowledgement tries again.
            logger.warning(
                "journal %s: could not remove old drop sets", self.location, exc_info=True
            )
            return 0
        return len(old)

    # -- redelivery dedupe ----------------------------------------------------------------------

    def write_dedupe(
        self, batch: int, message_ids: list[str], expires_at: float, now: float | None = None
    ) -> None:
        """Remember ids whose acknowledgement may not have taken effect until ``expires_at``.
        ``now``: records that expired by then are no longer named by new markers."""
        table = pa.table({"messageId": pa.array(sorted(message_ids), pa.string())})
        table = table.replace_schema_metadata({EXPIRES_AT: repr(expires_at)})
        data = _ipc_bytes(table)
        digest = hashlib.sha256(data).hexdigest()[:16]
        key = f"dedupe/{batch:012d}-{digest}.arrow"
        self.store.create(key, data)
        # Before the batch's acknowledged marker, which names it.
        self._dedupe_keys[key] = expires_at
        if now is not None:
            self._dedupe_keys = {k: e for k, e in self._dedupe_keys.items() if e > now}

    def read_dedupe(self, now: float) -> dict[str, float]:
        """Unexpired dedupe ids with their expiry; expired records are removed. The records
        are those the newest acknowledged marker names (read by key: ``read_state`` must have
        run), and those a LIST finds (an earlier version's, whose markers name none)."""
        out: dict[str, float] = {}
        keys = {*self._marker_dedupe, *self._dedupe_keys, *self.store.list("dedupe")}
        for key in sorted(keys):
            if not key.endswith(".arrow"):
                continue
            data = self.store.read(key)
            if data is None:
                self._dedupe_keys.pop(key, None)
                continue
            reader = pa.ipc.open_file(pa.BufferReader(data))
            expires = float((reader.schema.metadata or {}).get(EXPIRES_AT, b"0"))
            if expires <= now:
                self.store.delete(key)
                self._dedupe_keys.pop(key, None)
                continue
            self._dedupe_keys[key] = expires
            for message_id in reader.read_all().column("messageId").to_pylist():
                out[message_id] = max(expires, out.get(message_id, 0.0))
        return out

    # -- duplicate window (window.py) -------------------------------------------------------------

    def write_window(
        self, message_ids: list[str], *, batch: int, who: str, expires_at: float
    ) -> None:
        """Record acknowledged ids for the duplicate window until ``expires_at``; written
        before the messages are deleted."""
        window.write_segment(self.store, message_ids, batch=batch, who=who, expires_at=expires_at)

    def collect_window(self, now: float) -> int:
        """Remove expired duplicate-window segments (best effort). Returns how many."""
        try:
            return window.collect(self.store, now)
        except Exception:
            # Storage, not correctness: an expired segment is ignored until it is removed.
            logger.warning("journal %s: could not remove expired window segments", self.location)
            return 0

    # -- metrics ---------------------------------------------------------------------------------

    def write_metrics(
        self, batch: int, metrics: dict[str, Any], keep: int = 100, prune_every: int = 10
    ) -> None:
        """Counters of an acknowledged batch, as ``metrics/<batch>.json``; the newest ``keep``
        batches are kept, pruned on every ``prune_every``-th batch (the LIST it takes is not
        worth paying every batch: until then, a few more files stay)."""
        self.store.put(f"metrics/{batch:012d}.json", json.dumps(metrics, sort_keys=True).encode())
        if batch % max(1, prune_every):
            return
        old = [k for k in self.store.list("metrics") if k.endswith(".json")]
        for stale in old[:-keep]:
            self.store.delete(stale)

    def read_metrics(self) -> list[dict[str, Any]]:
        out = []
        for key in self.store.list("metrics"):
            data = self.store.read(key) if key.endswith(".json") else None
            if data is not None:
                out.append(json.loads(data))
        return out

    # -- state --------------------------------------------------------------------------------

    def read_state(self) -> JournalState:
        """The state, from its markers: a LIST finds the newest of each kind, then the newest
        planned marker is confirmed by key (markers are numbered densely upwards: a listing
        that lags a write must not make a batch number be handed out twice). The acknowledged
        number is a lower bound: which batches are pending is read by key (``live_batch``)."""
        found: dict[str, list[int]] = {"planned": [], "acked": [], "initial": [], "retired": []}
        for key in self.store.list("state"):
            match = _MARKER.match(key)
            if match:
                found[match.group(1)].append(int(match.group(2)))
        legacy = None if any(found.values()) else self.store.read("_state.json")
        if legacy is not None:
            # A journal of format 1 kept its state in one overwritten file.
            doc = json.loads(legacy)
            initial = doc.get("initialBatch")
            return JournalState(
                int(doc.get("plannedBatch", 0)),
                int(doc.get("ackedBatch", 0)),
                None if initial is None else int(initial),
            )
        # A listing may also lag a delete (a journal deleted and started anew): the newest
        # listed marker counts only once read by key.
        planned = self._newest_marker("planned", found["planned"])
        while self.store.read(f"state/planned-{planned + 1:012d}") is not None:
            planned += 1
        initial_doc = self.store.read(INITIAL)
        initial = (
            int(json.loads(initial_doc)["batch"])
            if initial_doc is not None
            else min(found["initial"], default=None)
        )
        acked = self._newest_marker("acked", found["acked"])
        body = self.store.read(f"state/acked-{acked:012d}") if acked else None
        # Markers of earlier versions are empty.
        self._marker_dedupe = list(json.loads(body).get("dedupe", ())) if body else []
        return JournalState(planned, acked, initial, frozenset(found["retired"]))

    def _newest_marker(self, kind: str, listed: list[int]) -> int:
        """The newest of the listed ``kind`` markers that exists when read by key (0 if none):
        a marker is removed only once a newer one exists, so the newest that exists is the
        first one read. When every listed one is gone (removed after the listing, as newer ones
        were written), the markers are listed again."""
        for _ in range(_RELISTS):
            for number in sorted(listed, reverse=True):
                if self.store.read(f"state/{kind}-{number:012d}") is not None:
                    return number
            if not listed:
                return 0
            listed = [
                int(m.group(2))
                for key in self.store.list("state")
                if (m := _MARKER.match(key)) and m.group(1) == kind
            ]
        return 0

    def write_state(
        self, state: JournalState, known: JournalState | None = None, owner: str = ""
    ) -> None:
        """Advance the state to ``state``: markers are only ever added (numbers only grow), and
        markers below the newest are removed once the newer one exists. A planned marker names
        the run that handed the number out (``owner``): a number another run created first
        is never handed out again (``JournalInUseError``)."""
        current = known if known is not None else self.read_state()
        new, old = state.planned_batch, current.planned_batch
        if new > old:
            key = f"state/planned-{new:012d}"
            if not self.store.create(key, json.dumps({"owner": owner}).encode()):
                data = self.store.read(key)
                theirs = json.loads(data).get("owner", "") if data else ""
                # An empty marker is an earlier version's; our own is a retried create whose
                # answer was lost.
                if data is None or theirs != owner:
                    raise JournalInUseError(
                        f"journalLocation {self.location}: batch {new} was numbered by "
                        f"another query ({theirs or 'unknown'}) while this one was paused or "
                        "partitioned: a journal belongs to one query at a time. Fix: stop the "
                        "other query, or give this query its own 'journalLocation'"
                    )
            # The newest planned markers stay, so that a listing that lags by fewer batches
            # still shows one of them, and read_state reads on from it by key.
            for gone in range(
                max(1, old - PLANNED_MARKERS_KEPT + 1), new - PLANNED_MARKERS_KEPT + 1
            ):
                self.store.delete(f"state/planned-{gone:012d}")
        new, old = state.acked_batch, current.acked_batch
        if new > old:
            # The dedupe records live now, read by key at the next start (read_dedupe): a
            # listing that lags their write must not hide them.
            body = json.dumps({"dedupe": sorted(self._dedupe_keys)}).encode()
            self.store.create(f"state/acked-{new:012d}", body)
            if old:
                self.store.delete(f"state/acked-{old:012d}")
        if current.initial_batch is None and state.initial_batch is not None:
            self.store.create(INITIAL, json.dumps({"batch": state.initial_batch}).encode())

    def retire_legacy_markers(self, retired: Iterable[int]) -> None:
        """Retirement markers of an earlier version (``state/retired-<N>``) become the batches'
        own (``_retired.json``), which attempts read by key."""
        for batch in retired:
            if self.read_plan(batch) is not None:
                self.retire(batch)
            self.store.delete(f"state/retired-{batch:012d}")

    def check_owner(self, queue_url: str, *more: str) -> str:
        """Bind the journal to its queues; refuse a journal that belongs to others, or that a
        newer version of spark-sqs wrote.

        With several queues (driver/queues.py) queues may be added or removed between runs: the
        journal is refused only when none of the queues it was used with is named now. Returns
        the journal's first queue, the queue of plans that record none per receiver."""
        queues = (queue_url, *more)
        doc: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "queueUrl": queue_url,
            # The journal's identity (driver/offsets.py): offsets carry it, so a checkpoint
            # is never run against another journal.
            "journalId": uuid.uuid4().hex[:16],
        }
        if more:
            doc["queueUrls"] = list(queues)
        if self.store.create(META, json.dumps(doc).encode()):
            self._meta = doc
            return queue_url
        meta = self.meta()
        for fmt in range(int(meta.get("format", 1)) + 1, FORMAT_VERSION + 1):
            # Taken over by this version: a later downgrade finds it out (meta).
            self.store.create(f"format/{fmt}", b"")
        owner = meta.get("queueUrl")
        known = {owner, *meta.get("queueUrls", ()), *self._added_queues()}
        if not known.intersection(queues):
            shown = owner if len(known) == 1 else ", ".join(sorted(q for q in known if q))
            raise JournalError(
                f"journalLocation {self.location} belongs to queue {shown}, not "
                f"{', '.join(queues)}. Fix: give each query its own 'journalLocation'"
            )
        for added in queues:
            if added not in known:
                digest = hashlib.sha256(added.encode()).hexdigest()[:16]
                self.store.create(f"queues/{digest}.json", json.dumps({"queueUrl": added}).encode())
        return owner or queue_url

    def meta(self) -> dict[str, Any]:
        """The journal's ``_meta.json`` (empty for a journal not yet bound to a queue); a journal
        of a format newer than this version reads is refused."""
        if self._meta is None:
            data = self.store.read(META)
            if data is None:
                return {}
            doc = json.loads(data)
            doc.setdefault("journalId", _legacy_identity(data))
            fmt = int(doc.get("format", 1))
            # _meta.json is never rewritten (a journal's identity may be derived from it): a
            # version that takes over a journal of an earlier format creates format/<F> for
            # each format F above it up to its own, read here by key.
            while self.store.read(f"format/{fmt + 1}") is not None:
                fmt += 1
            if fmt > FORMAT_VERSION:
                raise JournalError(
                    f"journalLocation {self.location} was written by a newer version of "
                    f"spark-sqs (journal format {fmt}; this version reads formats up to "
                    f"{FORMAT_VERSION}). Fix: install the newer spark-sqs on the driver and "
                    "every executor, or use a new journalLocation with a new checkpointLocation"
                )
            self._meta = doc
        return self._meta

    def write_alias(self, journal_id: str, batch: int, target: int) -> None:
        """Record that batch ``batch`` of journal ``journal_id``, logged by Spark while this
        checkpoint ran on that journal and was refused, stands for batch ``target`` of this
        one (driver/offsets.py, ``CheckpointGuard.absorbs``)."""
        body = json.dumps({"batch": target}).encode()
        self.store.create(f"aliases/{journal_id}-{batch:012d}.json", body)

    def read_alias(self, journal_id: str, batch: int) -> int | None:
        data = self.store.read(f"aliases/{journal_id}-{batch:012d}.json")
        return None if data is None else int(json.loads(data)["batch"])

    def collect_aliases(self, acked: int) -> None:
        """Remove aliases Spark can no longer hand back: once the batch after the one an alias
        stands for is acknowledged, its start (the aliased offset) is behind the checkpoint."""
        for key in self.store.list("aliases"):
            data = self.store.read(key)
            if data is not None and int(json.loads(data)["batch"]) < acked:
                self.store.delete(key)

    def identity(self) -> str | None:
        """The journal's identity, which offsets carry (driver/offsets.py); None for a location
        that holds no journal yet."""
        return self.meta().get("journalId")

    def _added_queues(self) -> list[str]:
        """Queues added to the journal's family after it was created."""
        out = []
        for key in self.store.list("queues"):
            data = self.store.read(key) if key.endswith(".json") else None
            if data is not None:
                out.append(json.loads(data)["queueUrl"])
        return out

    def probe_writable(self) -> None:
        """At query start, on the store itself: a create must succeed, and a second create of
        the same key must fail. A store that answers the second with success (an S3-compatible
        store that accepts ``If-None-Match`` and ignores it) would let two attempts of one task
        both believe they journaled a receiver's messages: it is refused."""
        key = f"_probe/{uuid.uuid4().hex}"
        try:
            self.store.create(key, b"first")
            again = self.store.create(key, b"second")
            self.store.delete(key)
        except UnsafeStoreError:
            raise
        except (OSError, JournalError) as exc:
            raise JournalError(
                f"journalLocation {self.location} is not writable ({exc}). Fix: point "
                "'journalLocation' at a directory this cluster can create and write files in"
            ) from None
        if again:
            raise UnsafeStoreError(
                f"journalLocation {self.location} does not honour create-if-absent: a second "
                "create of one key succeeded. Exactly-once needs an atomic create-if-absent on "
                "the store itself (S3 PutObject with If-None-Match: *, a link() of a local "
                "file). Known to have it: AWS S3 and local POSIX file systems (tested); "
                "S3-compatible stores vary by product and version, and some accept the header "
                "and ignore it. Fix: use an AWS S3 bucket (s3://bucket/prefix), a local path, "
                "or a store whose conditional writes are documented and tested "
                "(docs/operations.md says how to check one)"
            )
        try:
            # Probes of drivers that died between the create and the delete. A concurrent
            # probe removed here has already done its creates, which is all it tests.
            leftover = self.store.list("_probe")
            if leftover:
                self.store.delete_many(leftover)
        except (OSError, JournalError):
            logger.debug("journal %s: could not remove old probe objects", self.location)


def _empty_entry(options: JournalOptions | None) -> pa.Table:
    from ..schema import messages_to_table

    return messages_to_table([], "", sns=bool(options is not None and options.sns))


def _legacy_identity(meta: bytes) -> str:
    """The identity of a journal created before journals had one: derived from its
    ``_meta.json``, which is written once and never changed (a copy of the journal keeps it)."""
    return "m" + hashlib.sha256(meta).hexdigest()[:15]


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
