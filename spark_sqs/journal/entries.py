"""The durable record of what each receiver got. Runs on: driver and executors.

Layout under ``journalLocation`` (keys of a ``JournalStore``)::

    _meta.json                               queue the journal belongs to
    state/planned-<N>, acked-<N>, initial-<N> markers: highest batch numbered, acknowledged
    lease/<seq>.json                         the live query that owns the journal
    batches/<N>/_plan.json                   the batch's plan, written once, before any receive
    batches/<N>/<receiver>.arrow             messages one receiver got (Arrow IPC file)
    batches/<N>/<receiver>.part-<k>.arrow    deleteAfterJournal: one receive call's messages
    batches/<N>/<receiver>.extended-<T>      empty: the receiver extended its entry's messages
                                             until epoch second T (executor/extension.py)
    drops/<N>-<sha256>.arrow                 a drop set of batch N (by content), referenced by its
                                             plan or by the partitions of its replay
    acks/<N>/<receiver>.s-<summary>.json     what a receiver of N acknowledged, summed per batch
                                             in the name (read from the LIST alone), or
    acks/<N>/<receiver>.json                 the same when only the body can hold it (uncertain
                                             ids, a long summary, or an earlier version)
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
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import JournalError
from ..schema import RECEIPT_HANDLE as RECEIPT
from . import reports, window
from .reports import AckedEntry, AckReport
from .stores import JournalStore, open_store

if TYPE_CHECKING:
    from ..options import SqsOptions

logger = logging.getLogger(__name__)

_ENTRY = re.compile(r"^(\d{5,})\.arrow$")
_PART = re.compile(r"^(\d{5,})\.part-(\d{5})\.arrow$")
_EXTENDED = re.compile(r"^(\d{5,})\.extended-(\d+)$")
# drops/<batch>-<sha256>.arrow; a journal of an earlier version named them drops/<sha256>.arrow.
_ACK_REPORT = re.compile(r"^acks/(\d{12})/")
_DROPS = re.compile(r"^drops/(?:(\d{12})-)?([0-9a-f]{64})\.arrow$")
_BATCH_KEY = re.compile(r"^batches/(\d{12})/")
_MARKER = re.compile(r"^state/(planned|acked|initial|retired)-(\d{12})$")
FORMAT_VERSION = 2

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
# duplicateAttribute: JSON list of the window keys of the entry's rows' attribute values.
WINDOW_KEYS = b"spark_sqs.windowKeys"
# With deleteAfterJournal: marks the empty part that closes a receiver's parts (see receiver).
SEAL = b"spark_sqs.seal"
# Why the receiver stopped receiving (``ReceiveStats.stopped_by``), for the batch's counters.
STOPPED_BY = b"spark_sqs.stoppedBy"


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
    # Orphaned batches whose entries a later batch delivers: a straggler of one must stop as
    # if its batch were acknowledged.
    retired: frozenset[int] = frozenset()

    def finished(self, batch: int) -> bool:
        """True if no attempt of ``batch`` may journal or delete anything any more."""
        return batch <= self.acked_batch or batch in self.retired


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
        )


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _ipc_table(data: bytes, where: str) -> pa.Table:
    try:
        return pa.ipc.open_file(pa.BufferReader(data)).read_all()
    except pa.ArrowInvalid as exc:
        raise JournalError(
            f"Journal entry {where} is corrupt ({exc}). It was written by an interrupted "
            "writer on a store without atomic writes. Fix: move it away; its messages "
            "reappear in SQS after their visibility timeout"
        ) from None


# Drop sets by digest, per process: every receiver of a batch on one executor reads it once.
_DROPS_CACHE: dict[str, frozenset[str]] = {}


class Journal:
    """Reads and writes journal records; cheap to pickle (the store opens lazily)."""

    def __init__(
        self,
        location: str,
        options: SqsOptions | None = None,
        store: JournalStore | None = None,
    ) -> None:
        self.location = location
        self._options = options
        self._store = store

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def store(self) -> JournalStore:
        if self._store is None:
            try:
                self._store = open_store(self.location, self._options)
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

    # -- entries ------------------------------------------------------------------------------

    def read_entry(self, batch: int, receiver: int) -> pa.Table | None:
        key = self._entry_key(batch, receiver)
        data = self.store.read(key)
        return None if data is None else _ipc_table(data, key)

    def read_receipts(self, batch: int, receiver: int) -> EntryReceipts | None:
        """Message ids, receipt handles and receive time of an entry (one read)."""
        table = self.read_entry(batch, receiver)
        return None if table is None else receipts_of(batch, receiver, table)

    def batch_receipts(self, batch: int) -> list[EntryReceipts]:
        out = []
        for receiver in self.receivers(batch):
            receipts = self.read_receipts(batch, receiver)
            if receipts is not None:
                out.append(receipts)
        return out

    def write_entry(self, batch: int, receiver: int, table: pa.Table) -> bool:
        """Create an entry; False (nothing written) if one already exists."""
        return self.store.create(self._entry_key(batch, receiver), _ipc_bytes(table))

    def write_part(self, batch: int, receiver: int, part: int, table: pa.Table) -> bool:
        """One receive call's messages (deleteAfterJournal); never overwritten."""
        return self.store.create(self._part_key(batch, receiver, part), _ipc_bytes(table))

    def remove_entry(self, batch: int, receiver: int) -> None:
        self.store.delete(self._entry_key(batch, receiver))

    def read_parts(self, batch: int, receiver: int) -> list[tuple[int, pa.Table]]:
        parts = []
        for name in self._batch_files(batch):
            match = _PART.match(name)
            if match and int(match.group(1)) == receiver:
                key = f"{self.batch_dir(batch)}/{name}"
                data = self.store.read(key)
                if data is not None:
                    parts.append((int(match.group(2)), _ipc_table(data, key)))
        return sorted(parts, key=lambda p: p[0])

    def unfinished_parts(self, batch: int) -> dict[int, set[str]]:
        """Receivers of ``batch`` with parts but no entry (``deleteAfterJournal``: an attempt
        that died mid-loop), with the message ids of their parts. Those messages belong to
        that receiver's rows; the ones it could not delete yet come back once their visibility
        times out, and any receiver of the batch must then drop them."""
        names = self._batch_files(batch)
        finished = {int(m.group(1)) for n in names if (m := _ENTRY.match(n))}
        out: dict[int, set[str]] = {}
        for name in names:
            match = _PART.match(name)
            if not match or int(match.group(1)) in finished:
                continue
            key = f"{self.batch_dir(batch)}/{name}"
            data = self.store.read(key)
            if data is None:
                continue
            ids = _ipc_table(data, key).column("messageId").to_pylist()
            out.setdefault(int(match.group(1)), set()).update(ids)
        return out

    def batch_message_ids(self, batch: int, but: int) -> frozenset[str]:
        """Ids journaled by ``batch``'s receivers other than ``but`` (entries and parts)."""
        ids: set[str] = set()
        for name in self._batch_files(batch):
            match = _ENTRY.match(name) or _PART.match(name)
            if match and int(match.group(1)) != but:
                key = f"{self.batch_dir(batch)}/{name}"
                data = self.store.read(key)
                if data is not None:
                    ids.update(_ipc_table(data, key).column("messageId").to_pylist())
        return frozenset(ids)

    def part_receivers(self, batch: int) -> list[int]:
        """Receivers of ``batch`` that journaled parts and have no entry."""
        names = self._batch_files(batch)
        finished = {int(m.group(1)) for n in names if (m := _ENTRY.match(n))}
        parts = {int(m.group(1)) for n in names if (m := _PART.match(n))}
        return sorted(parts - finished)

    def receivers(self, batch: int) -> list[int]:
        return sorted(int(m.group(1)) for n in self._batch_files(batch) if (m := _ENTRY.match(n)))

    def batch_index(self, batch: int) -> tuple[list[int], dict[int, float]]:
        """The receivers of ``batch`` with an entry, and the latest wall-clock time each
        receiver that recorded an extension extended its messages to (one LIST)."""
        names = self._batch_files(batch)
        receivers = sorted(int(m.group(1)) for n in names if (m := _ENTRY.match(n)))
        extended: dict[int, float] = {}
        for name in names:
            if match := _EXTENDED.match(name):
                receiver = int(match.group(1))
                extended[receiver] = max(extended.get(receiver, 0.0), float(match.group(2)))
        return receivers, extended

    def write_extension(self, batch: int, receiver: int, until: int) -> None:
        """Record that the messages of the entry of ``receiver`` stay invisible until epoch
        second ``until`` at least: the deadline is in the (empty) marker's name, so the
        heartbeat learns it from the LIST it makes anyway."""
        self.store.create(f"{self.batch_dir(batch)}/{receiver:05d}.extended-{int(until)}", b"")

    def batches(self) -> list[int]:
        """Batches with files in the journal (one LIST of everything under ``batches/``)."""
        return sorted(
            {int(m.group(1)) for k in self.store.list("batches") if (m := _BATCH_KEY.match(k))}
        )

    def combined_parts(self, batch: int, receiver: int) -> pa.Table | None:
        """The parts of a receiver that has no entry, as one entry whose messages all await
        deletion (whether the dead attempt deleted them is unknown)."""
        tables = [t for _, t in self.read_parts(batch, receiver)]
        if not tables:
            return None
        combined = pa.concat_tables([t.replace_schema_metadata(None) for t in tables])
        received = min(float((t.schema.metadata or {}).get(RECEIVED_AT, b"0")) for t in tables)
        ids = combined.column("messageId").to_pylist()
        return combined.replace_schema_metadata(
            {RECEIVED_AT: repr(received), PENDING_DELETE: json.dumps(sorted(ids))}
        )

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
        kept; a missing source means an earlier call copied it and removed the orphan."""
        if self.store.read(self._entry_key(batch, target)) is not None:
            return False
        table = self.read_entry(orphan, receiver)
        if table is None:
            table = self.combined_parts(orphan, receiver)
        if table is None:
            return False
        if keep is not None:
            wanted = set(keep)
            mask = [i in wanted for i in table.column("messageId").to_pylist()]
            table = table.filter(pa.array(mask, pa.bool_()))
        return self.write_entry(batch, target, table)

    def remove_batch(self, batch: int) -> None:
        """Remove every file of ``batch``, the plan last (it is what marks a batch planned)."""
        names = sorted(self._batch_files(batch), key=lambda n: n == "_plan.json")
        files = [f"{self.batch_dir(batch)}/{n}" for n in names if n != "_plan.json"]
        self.store.delete_many(files)
        if "_plan.json" in names:
            self.store.delete(f"{self.batch_dir(batch)}/_plan.json")

    # -- plans --------------------------------------------------------------------------------

    def read_plan(self, batch: int) -> BatchPlan | None:
        data = self.store.read(f"{self.batch_dir(batch)}/_plan.json")
        return None if data is None else BatchPlan.from_json(data)

    def write_plan(self, plan: BatchPlan) -> BatchPlan:
        """Create the batch's plan; if another call created one first, that one is the plan."""
        if self.store.create(f"{self.batch_dir(plan.batch)}/_plan.json", plan.to_json()):
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
        _DROPS_CACHE[digest] = frozenset(ordered)
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
        if len(_DROPS_CACHE) > 8:
            _DROPS_CACHE.clear()
        _DROPS_CACHE[digest] = ids
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
                    for plan in map(self.read_plan, self.batches())
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

    # -- acknowledgement reports ---------------------------------------------------------------

    def write_ack_report(self, batch: int, receiver: int, entries: Sequence[AckedEntry]) -> None:
        """What receiver ``receiver`` of ``batch`` acknowledged of earlier batches, created if
        absent (journal/reports.py). A retried attempt repeats the same deletes and may name
        its report differently: the reader keeps one report per receiver (and every attempt's
        uncertain ids)."""
        self.store.create(reports.report_key(batch, receiver, entries), reports.body_of(entries))

    def read_ack_reports(self, batch: int) -> list[AckReport]:
        """One report per receiver of ``batch`` that wrote one: from the key's name when it
        holds the summary, else from the bodies (with every attempt's uncertain ids)."""
        by_receiver: dict[int, list[tuple[str, str | None]]] = {}
        for key in self.store.list(f"acks/{batch:012d}"):
            parsed = reports.parse_key(key)
            if parsed is not None:
                by_receiver.setdefault(parsed[0], []).append((key, parsed[1]))
        out = []
        for receiver in sorted(by_receiver):
            keys = by_receiver[receiver]
            bodies = [
                reports.parse_body(data)
                for key, summary in keys
                if summary is None and (data := self.store.read(key)) is not None
            ]
            if bodies:
                out.append(reports.merge_attempts(receiver, bodies))
            elif named := [s for _, s in keys if s is not None]:
                out.append(AckReport(receiver, tuple(reports.entries_of_summary(named[0]))))
        return out

    def remove_ack_reports(self, batch: int) -> None:
        self.store.delete_many(self.store.list(f"acks/{batch:012d}"))

    def collect_ack_reports(self, oldest_pending: int, keep: set[int]) -> int:
        """Remove the reports written by batches before ``oldest_pending`` (acknowledged or
        retired) that no pending batch's acknowledgement still reads (``keep``): those of a
        batch whose assignments went to a replanned or adopted batch, or were read by a driver
        that died before it removed them. Returns how many were removed."""
        try:
            old = [
                key
                for key in self.store.list("acks")
                if (m := _ACK_REPORT.match(key))
                and int(m.group(1)) < oldest_pending
                and int(m.group(1)) not in keep
            ]
            if old:
                self.store.delete_many(old)
        except Exception:
            # Storage, not correctness: the next acknowledgement tries again.
            logger.warning(
                "journal %s: could not remove old acknowledgement reports",
                self.location,
                exc_info=True,
            )
            return 0
        return len(old)

    # -- redelivery dedupe ----------------------------------------------------------------------

    def write_dedupe(self, batch: int, message_ids: list[str], expires_at: float) -> None:
        """Remember ids whose acknowledgement may not have taken effect until ``expires_at``."""
        table = pa.table({"messageId": pa.array(sorted(message_ids), pa.string())})
        table = table.replace_schema_metadata({EXPIRES_AT: repr(expires_at)})
        data = _ipc_bytes(table)
        digest = hashlib.sha256(data).hexdigest()[:16]
        self.store.create(f"dedupe/{batch:012d}-{digest}.arrow", data)

    def read_dedupe(self, now: float) -> dict[str, float]:
        """Unexpired dedupe ids with their expiry; expired records are removed."""
        out: dict[str, float] = {}
        for key in self.store.list("dedupe"):
            if not key.endswith(".arrow"):
                continue
            data = self.store.read(key)
            if data is None:
                continue
            reader = pa.ipc.open_file(pa.BufferReader(data))
            expires = float((reader.schema.metadata or {}).get(EXPIRES_AT, b"0"))
            if expires <= now:
                self.store.delete(key)
                continue
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

    def write_metrics(self, batch: int, metrics: dict[str, Any], keep: int = 100) -> None:
        """Counters of an acknowledged batch, as ``metrics/<batch>.json``; the newest ``keep``
        batches are kept."""
        self.store.put(f"metrics/{batch:012d}.json", json.dumps(metrics, sort_keys=True).encode())
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
        """The state, from its markers (one LIST)."""
        found: dict[str, list[int]] = {"planned": [], "acked": [], "initial": [], "retired": []}
        for key in self.store.list("state"):
            match = _MARKER.match(key)
            if match:
                found[match.group(1)].append(int(match.group(2)))
        if not any(found.values()):
            legacy = self.store.read("_state.json")
            if legacy is not None:
                # A journal of format 1 kept its state in one overwritten file.
                doc = json.loads(legacy)
                initial = doc.get("initialBatch")
                return JournalState(
                    int(doc.get("plannedBatch", 0)),
                    int(doc.get("ackedBatch", 0)),
                    None if initial is None else int(initial),
                )
        return JournalState(
            max(found["planned"], default=0),
            max(found["acked"], default=0),
            min(found["initial"], default=None),
            frozenset(found["retired"]),
        )

    def write_state(self, state: JournalState, known: JournalState | None = None) -> None:
        """Advance the state to ``state``: markers are only ever added (numbers only grow), and
        markers below the newest are removed once the newer one exists."""
        current = known if known is not None else self.read_state()
        for kind, new, old in (
            ("planned", state.planned_batch, current.planned_batch),
            ("acked", state.acked_batch, current.acked_batch),
        ):
            if new > old:
                self.store.create(f"state/{kind}-{new:012d}", b"")
                if old:
                    self.store.delete(f"state/{kind}-{old:012d}")
        if state.acked_batch > current.acked_batch:
            for retired in current.retired:
                if retired <= state.acked_batch:
                    self.store.delete(f"state/retired-{retired:012d}")
        if current.initial_batch is None and state.initial_batch is not None:
            self.store.create(f"state/initial-{state.initial_batch:012d}", b"")

    def retire(self, batch: int) -> None:
        """Mark an orphaned batch as delivered by a later one, before its entries are listed
        for adoption: an attempt of it that journals later stops without deleting."""
        self.store.create(f"state/retired-{batch:012d}", b"")

    def check_owner(self, queue_url: str, *more: str) -> str:
        """Bind the journal to its queues; refuse a journal that belongs to others.

        With several queues (driver/queues.py) queues may be added or removed between runs: the
        journal is refused only when none of the queues it was used with is named now. Returns
        the journal's first queue, the queue of plans that record none per receiver."""
        queues = (queue_url, *more)
        doc: dict[str, Any] = {"format": FORMAT_VERSION, "queueUrl": queue_url}
        if more:
            doc["queueUrls"] = list(queues)
        if self.store.create("_meta.json", json.dumps(doc).encode()):
            return queue_url
        data = self.store.read("_meta.json")
        meta = json.loads(data) if data else {}
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

    def _added_queues(self) -> list[str]:
        """Queues added to the journal's family after it was created."""
        out = []
        for key in self.store.list("queues"):
            data = self.store.read(key) if key.endswith(".json") else None
            if data is not None:
                out.append(json.loads(data)["queueUrl"])
        return out

    def probe_writable(self) -> None:
        key = f"_probe/{uuid.uuid4().hex}"
        try:
            self.store.create(key, b"ok")
            self.store.delete(key)
        except (OSError, JournalError) as exc:
            raise JournalError(
                f"journalLocation {self.location} is not writable ({exc}). Fix: point "
                "'journalLocation' at a directory this cluster can create and write files in"
            ) from None
        try:
            # Probes of drivers that died between the create and the delete. A concurrent
            # probe removed here has already done its create, which is all it tests.
            leftover = self.store.list("_probe")
            if leftover:
                self.store.delete_many(leftover)
        except (OSError, JournalError):
            logger.debug("journal %s: could not remove old probe objects", self.location)


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
        journaled=journaled,
        window_keys=tuple(json.loads(metadata.get(WINDOW_KEYS, b"[]"))),
        metadata=dict(metadata),
        queue_urls=tuple(queues),
    )
