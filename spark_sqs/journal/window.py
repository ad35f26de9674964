"""The duplicate window's records: ids of cleanly acknowledged messages, kept for
``duplicateWindow`` seconds. Runs on: driver and executors.

A standard queue may deliver a copy of a message after the message was deleted (the delete
reached one SQS server, a copy on another is handed out later). Whoever deletes messages (a
receiver of the next batch acknowledging its share, the driver when no next batch comes, a
``deleteAfterJournal`` receiver after each part, a receiver deleting a redelivery it dropped,
the quarantine of a poison message) first writes the ids it is about to delete as a *segment*,
then deletes them; a receiver that later gets a message whose id is in a live segment drops it
and deletes the copy. Writing before deleting means a copy can only exist after its segment
does, so a receiver that looks the window up after its receive calls sees it.

Keys::

    window/<N>/r<receiver>-<k>.arrow   segment k of receiver <receiver> of batch <N> (its
                                       acknowledgement, deleteAfterJournal parts, dropped
                                       redeliveries), numbered densely from 0
    window/<N>/x-<k>.arrow             the driver's segments of <N> (its acknowledgement, the
                                       quarantine) and segments forwarded from a sealed batch,
                                       numbered densely from 0
    window/<N>/merged.arrow            the seal of <N>: its segments merged, with the ids its
                                       sealer acknowledged (the receiver of <N+1> its plan
                                       names, or the driver before <N>'s plan is removed)
    window/<expires>-<N>-<who>.arrow   an earlier version's segments (read, never written)

No lookup lists: every key is found by key. A writer creates ``<who>-<k>`` at the first ``k``
that is free (create-if-absent; a concurrent attempt that lost takes the next number; a create
whose outcome is unknown is read back). A batch is *sealed* once ``merged.arrow`` exists; its
plan is removed only after that (``Batches.remove``). A reader reads a sealed batch's merged
segment once, and an unsealed batch's segments by probing each writer's numbers until the first
absent one (its receivers are its plan's). A segment created after its batch's merged segment
is hidden from readers that read the merged one: its writer checks for the seal after creating
it and, if sealed, writes the same segment again into the next batch not sealed (``forward``,
which passes sealed batches by without a copy); the sealer probes once more after sealing and
forwards what appeared in between. The seal records each writer's end as its sealer read it, so
whoever finds the seal made by another (a retry of the sealer's task, a concurrent sealer, the
driver before the removal unless the sealer is known to have finished) probes from those ends
too: a sealer killed between its create and its probe hides nothing. A writer that finds no
seal reads the plan too: a batch without one was sealed and removed, its seal maybe swept after
the writer stalled past the window, so the segment goes on (to the newest numbered batch, by
the planned markers of state.py, if the batch is older). A batch after a sealed one that has
neither plan nor seal is taken for one not numbered yet only if the batch before it is the
newest number: else it was numbered (its marker gone since) and never planned or removed, and
the segment goes on likewise. Which batches may hold live ids is the driver's to say
(``WindowRange``, carried by each plan as ``windowFrom``), judged on its monotonic clock.

A segment stores no id itself: two unsigned 64-bit columns ``h1``/``h2`` hold each id's 128-bit
BLAKE2b digest, sorted by ``h1``, so a lookup is a binary search and two different ids match
with probability below 2**-100 in any realistic window. A segment holds no time: its ids count
while its batch is in the reader's plan's range (``windowFrom`` upwards), never by a writer's
wall clock. A merged segment's schema metadata holds the ``windowFrom`` of its sealer and each
writer's end as it read it (``sealedEnds``; none in an earlier version's seal).
Segments are written create-if-absent and never changed. Only an earlier version's segments
carry an expiry (in their names): the one wall-clock comparison of another host's time left
(docs/design.md, clocks), once after an upgrade.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from ..errors import JournalOutcomeUnknown
from .plans import BatchPlan, plan_key
from .state import PLANNED_MARKERS_KEPT
from .state import PREFIX as STATE_PREFIX
from .stores import JournalRoot, JournalStore, Record, ipc_bytes

logger = logging.getLogger(__name__)

PREFIX = "window"
DRIVER = "x"  # the driver's and forwarded segments' writer name
MERGED = "merged"
WINDOW_FROM = b"spark_sqs.windowFrom"
# Each writer's end (its first absent number) as the sealer read it, in the seal's metadata:
# whoever finds the seal made probes from there (``probe_sealed``).
SEALED_ENDS = b"spark_sqs.sealedEnds"
# Earlier versions' keys: window/<expires>-<N>-<who>.arrow (read at a worker's first lookup
# while the driver says some may be live, WindowRange.legacy_until).
_LEGACY = re.compile(r"^window/(\d{12})-(\d{12})-([a-z0-9-]+)\.arrow$")
_BATCH = re.compile(r"^window/(\d{12})/")
# Planned markers a writer of a removed batch probes, PLANNED_MARKERS_KEPT numbers apart, for
# a newer number (_kept_above): a writer that stalled for up to 65,536 batches finds one.
FORWARD_PROBES = 4096
# Batches a starting driver reads down from the newest acknowledged one for a recorded
# ``windowFrom`` when that batch has no seal (``Window.start_from``).
START_PROBES = 16
# Creates of one key whose outcome stays unknown before the error is passed on.
_UNKNOWN_RETRIES = 3
# Margin on the driver's monotonic clock before a removed batch leaves the range: covers a
# deleter's re-segment after a stall (RESEGMENT_AFTER in acknowledgement/deletes.py: its last
# segment may precede its delete by that much) and the clocks' rate errors (docs/design.md).
EXPIRY_MARGIN = 60.0


def digest(message_id: str) -> tuple[int, int]:
    """The 128-bit digest of a message id, as two unsigned 64-bit halves."""
    raw = hashlib.blake2b(message_id.encode(), digest_size=16).digest()
    return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")


def attribute_key(value: str) -> str:
    """The window's key for a ``duplicateAttribute`` value: never equal to a message id."""
    return "attribute\0" + value


def is_fifo(queue_url: str | None) -> bool:
    """FIFO queues (names end in ``.fifo``) never deliver a copy: they need no window."""
    return bool(queue_url) and queue_url.rstrip("/").endswith(".fifo")  # type: ignore[union-attr]


def receiver_writer(receiver: int) -> str:
    """The writer name of a receiver's segments."""
    return f"r{receiver:06d}"


def part_key(batch: int, who: str, k: int) -> str:
    return f"{PREFIX}/{batch:012d}/{who}-{k:05d}.arrow"


def merged_key(batch: int) -> str:
    return f"{PREFIX}/{batch:012d}/{MERGED}.arrow"


def batch_of(key: str) -> int | None:
    """The batch of a key of this layout, None for another key."""
    m = _BATCH.match(key)
    return int(m.group(1)) if m else None


@dataclass(frozen=True, order=True)
class LegacyKey:
    """A segment key of an earlier version: the expiry first, so it was read by name."""

    expires: int
    batch: int
    who: str  # "r000003-ack", "driver", "q-<digest>", "merged", ...

    @property
    def key(self) -> str:
        return f"{PREFIX}/{self.expires:012d}-{self.batch:012d}-{self.who}.arrow"

    @classmethod
    def parse(cls, key: str) -> LegacyKey | None:
        m = _LEGACY.match(key)
        return cls(int(m.group(1)), int(m.group(2)), m.group(3)) if m else None


def segment_table(message_ids: Iterable[str], window_from: int | None = None) -> pa.Table:
    """The digests of ``message_ids``, sorted by ``h1`` (duplicates removed)."""
    pairs = sorted({digest(i) for i in message_ids})
    table = pa.table(
        {
            "h1": pa.array([p[0] for p in pairs], pa.uint64()),
            "h2": pa.array([p[1] for p in pairs], pa.uint64()),
        }
    )
    return _with_metadata(table, window_from)


def _with_metadata(
    table: pa.Table, window_from: int | None = None, ends: dict[str, int] | None = None
) -> pa.Table:
    meta = {WINDOW_FROM: str(window_from).encode()} if window_from is not None else {}
    if ends is not None:
        meta[SEALED_ENDS] = json.dumps(ends, sort_keys=True).encode()
    return table.replace_schema_metadata(meta or None)


def window_from_of(table: pa.Table) -> int | None:
    value = (table.schema.metadata or {}).get(WINDOW_FROM)
    return int(value) if value is not None else None


def sealed_ends(table: pa.Table) -> dict[str, int] | None:
    """Each writer's end as the seal's sealer read it; None for a seal of an earlier version."""
    value = (table.schema.metadata or {}).get(SEALED_ENDS)
    return {str(k): int(v) for k, v in json.loads(value).items()} if value is not None else None


def read_table(store: JournalStore, key: str) -> pa.Table | None:
    """A segment's digests, or None if it does not exist."""
    data = store.read(key)
    if data is None:
        return None
    return pa.ipc.open_file(pa.BufferReader(data)).read_all()


def _create(store: JournalStore, key: str, data: bytes) -> bool:
    """Create ``key`` if absent; True if this writer's bytes are there now. A create whose
    outcome is unknown is resolved by reading the key back: our bytes (it took effect), absent
    (create again), or another writer's (lost)."""
    for attempt in range(_UNKNOWN_RETRIES):
        try:
            return store.create(key, data)
        except JournalOutcomeUnknown:
            found = store.read(key)
            if found is not None:
                return found == data
            if attempt == _UNKNOWN_RETRIES - 1:
                raise
    return False  # pragma: no cover (the loop returns or raises)


def create_dense(store: JournalStore, batch: int, who: str, data: bytes, start: int = 0) -> int:
    """Create ``data`` as ``who``'s first free segment number of ``batch`` from ``start``:
    numbers stay dense (a reader stops at the first absent one), and two attempts of one task
    writing at once both land, one after the other. Returns the number."""
    k = start
    while not _create(store, part_key(batch, who, k), data):
        k += 1
    return k


def read_run(
    store: JournalStore, batch: int, who: str, start: int = 0
) -> tuple[list[pa.Table], int]:
    """``who``'s segments of ``batch`` from number ``start`` until the first absent one, and
    that number."""
    tables = []
    k = start
    while (table := read_table(store, part_key(batch, who, k))) is not None:
        tables.append(table)
        k += 1
    return tables, k


def forward(store: JournalStore, data: bytes, batch: int, numbered: bool = True) -> int:
    """A segment created in ``batch``: if the batch is sealed (its merged segment exists
    now) or removed (its plan is gone: sealed first, and the seal maybe swept since),
    create it again in a later batch (passing by, with no copy, the batches after a sealed
    one that it finds sealed too), and so on, until one that is live and not sealed, or not
    numbered yet (its receivers read it once it is planned). A segment created before the
    seal was read by the sealer or by its probe after sealing; one created after finds the
    seal here, or, if its writer stalled past the window and the seal was swept, no plan.
    ``numbered``: ``batch`` is known to have been numbered (the writer's own); else (it
    follows a sealed batch) the planned markers say (``_not_numbered_yet``): a batch
    numbered long ago without plan or seal (removed, or never planned) is treated as
    removed. Returns the batch that holds it."""
    while True:
        if store.read(merged_key(batch)) is not None:
            after, numbered = batch + 1, False
            while store.read(merged_key(after)) is not None:
                # Sealed already: passed by without a copy. A copy there would be forwarded
                # again by every reader that probes the seal (``probe_sealed``), and each of
                # those forwards would leave copies in the sealed batches after it: along a
                # run of sealed batches probed one after the other, the copies would double
                # per batch.
                after += 1
        elif store.read(plan_key(batch)) is not None:
            return batch
        elif not numbered and _not_numbered_yet(store, batch):
            return batch
        else:
            after = _after_removed(store, batch)
            if after is None:
                return batch
            numbered = after != batch + 1
        batch = after
        create_dense(store, batch, DRIVER, data)
        logger.info(
            "duplicate window: a segment written after a seal or removal, forwarded to batch %d",
            batch,
        )


def _not_numbered_yet(store: JournalStore, batch: int) -> bool:
    """Whether ``batch``, which follows a sealed batch, is not numbered yet (its receivers read
    a segment there once it is planned). Its absent marker alone does not say so: a batch
    numbered PLANNED_MARKERS_KEPT or more numbers ago has lost its marker too, and may have
    been removed, its seal swept, or never planned (its driver died before Spark logged the
    offset): no plan and no seal, so no reader looks there. So the batch before it must be the
    newest number: its marker exists with its predecessors' (``_newest``, read after
    ``batch``'s: had ``batch`` been numbered and its marker removed before, they would be
    gone). Otherwise ``batch`` was numbered, and ``_after_removed`` finds where its segment
    goes."""
    return not _planned(store, batch) and _planned(store, batch - 1) and _newest(store, batch - 1)


def _planned(store: JournalStore, batch: int) -> bool:
    """Whether ``batch`` has its planned marker: one of the newest numbers handed out (or one
    a driver that died between a marker's create and its deletes left behind)."""
    return store.read(f"{STATE_PREFIX}/planned-{batch:012d}") is not None


def _after_removed(store: JournalStore, batch: int) -> int | None:
    """Where a segment of removed ``batch`` goes on to, found by key (no LIST: a listing that
    lags could show only batches already swept). The markers of the newest
    PLANNED_MARKERS_KEPT numbers exist (State.write creates each number's marker, then
    removes the one PLANNED_MARKERS_KEPT below it), so:

    - ``batch``'s marker and the next one exist: the next batch is numbered, and the segment
      goes to the newest number (``_top``);
    - ``batch``'s marker exists, the next one not, and its PLANNED_MARKERS_KEPT - 1
      predecessors do (``_newest``): the next batch is not numbered yet;
    - else ``batch``'s marker is gone (removed once ``batch`` + PLANNED_MARKERS_KEPT was
      numbered), or is one a driver that died before its deletes left behind: either way the
      newest number is at least ``batch`` + PLANNED_MARKERS_KEPT, and ``_kept_above`` finds
      one of the newest markers by key.

    None if nothing was found above a removed ``batch``: a batch of a journal deleted and
    started anew, not numbered in this one yet, where the segment stays for its receivers."""
    present = _planned(store, batch)
    if present and _planned(store, batch + 1):
        return _top(store, batch + 1)
    if present and _newest(store, batch):
        return batch + 1
    found = _kept_above(store, batch)
    if found is not None:
        return _top(store, found)
    if present:
        # Only a journal whose markers an earlier version removed (all but its newest):
        # ``batch``'s marker says it was numbered, and nothing was found above it.
        return batch + 1
    logger.info(
        "duplicate window: batch %d is removed and no newer batch was found numbered: its "
        "segment stays there",
        batch,
    )
    return None


def _newest(store: JournalStore, batch: int) -> bool:
    """Whether ``batch``, whose marker exists and whose next one did not, is the newest
    number: its PLANNED_MARKERS_KEPT - 1 predecessors (those from 1) exist with it, where a
    marker a driver that died between its create and its deletes left behind has its
    neighbours removed (all of them would have to be left behind, by as many drivers that each
    died there in turn). Else the next marker is read again: a number handed out meanwhile
    removes a predecessor."""
    below = range(batch - 1, max(0, batch - PLANNED_MARKERS_KEPT), -1)
    return all(_planned(store, n) for n in below) or _planned(store, batch + 1)


def _kept_above(store: JournalStore, batch: int) -> int | None:
    """A number above ``batch`` whose planned marker exists, when the newest number is at
    least ``batch`` + PLANNED_MARKERS_KEPT: every PLANNED_MARKERS_KEPT-th number from there is
    probed by key. A probe at or below the newest number whose marker is absent is
    PLANNED_MARKERS_KEPT or more below it (the newest PLANNED_MARKERS_KEPT are kept, and
    numbers only grow), so the next probe is still at or below it, and the first probe among
    the newest numbers finds its marker. One GET per PLANNED_MARKERS_KEPT numbers the writer
    stalled for, at most FORWARD_PROBES (a writer that stalled for more batches than that
    covers, or a batch of another journal at this location, finds none)."""
    for j in range(1, FORWARD_PROBES + 1):
        probe = batch + PLANNED_MARKERS_KEPT * j
        if _planned(store, probe):
            return probe
    return None


def _top(store: JournalStore, batch: int) -> int:
    """The newest number from ``batch``, whose marker exists, on: the following markers read
    until the first absent one (at most PLANNED_MARKERS_KEPT)."""
    while _planned(store, batch + 1):
        batch += 1
    return batch


def forward_late(store: JournalStore, batch: int, data: bytes) -> None:
    """A segment of ``batch`` its sealer found after sealing: created while the sealer read,
    its writer may have seen no seal. It goes on to the next batch not sealed."""
    forward(store, data, batch)


def seal_batch(
    store: JournalStore,
    batch: int,
    receivers: Sequence[int],
    table: pa.Table | None = None,
    *,
    window_from: int | None = None,
) -> bool:
    """Seal ``batch``: read its receivers' and the driver's segments by key, and create
    ``merged.arrow`` of them and of ``table`` (the sealer's own ids, if any), with each
    writer's end as read. Then probe each writer's next number once more: a segment created
    between the reads and the seal, whose writer saw no seal yet, is forwarded here. False if
    the batch was sealed already (or by a concurrent sealer): ``table`` is then not in the
    window, and the caller writes it itself; the probe is made from the ends that seal
    records (its sealer may have died before its own probe)."""
    writers = [receiver_writer(r) for r in sorted(set(receivers))] + [DRIVER]
    tables: list[pa.Table] = []
    ends: dict[str, int] = {}
    for who in writers:
        found, ends[who] = read_run(store, batch, who)
        tables.extend(found)
    own = [table] if table is not None else []
    merged = pa.concat_tables(
        [t.replace_schema_metadata(None) for t in [*tables, *own]]
        or [segment_table([]).replace_schema_metadata(None)]
    ).sort_by("h1")
    merged = _with_metadata(merged.combine_chunks(), window_from, ends)
    if not _create(store, merged_key(batch), ipc_bytes(merged)):
        sealed = read_table(store, merged_key(batch))
        if sealed is not None:
            probe_sealed(store, batch, sealed)
        return False
    _forward_after(store, batch, ends)
    logger.info(
        "duplicate window: sealed batch %d (%d segments, %d ids)",
        batch,
        len(tables) + len(own),
        merged.num_rows,
    )
    return True


def probe_sealed(store: JournalStore, batch: int, sealed: pa.Table) -> None:
    """For whoever finds ``batch`` sealed by another (a retry of the sealer's task, a
    concurrent sealer, the driver before the removal): the sealer may have died between its
    seal's create and its probe, so each writer's next number from the ends the seal records
    is probed here, and what is found forwarded. A segment its writer forwarded itself (it saw
    the seal) goes on a second time: harmless, the ids are the same, and one copy more each
    time (``forward`` leaves none in the sealed batches it passes). A seal of an earlier
    version records no ends: nothing is probed (as that version did)."""
    ends = sealed_ends(sealed)
    if ends is not None:
        _forward_after(store, batch, ends)


def _forward_after(store: JournalStore, batch: int, ends: dict[str, int]) -> None:
    for who, end in sorted(ends.items()):
        late, _ = read_run(store, batch, who, end)
        for t in late:
            forward_late(store, batch, ipc_bytes(t))


def list_legacy(store: JournalStore) -> list[LegacyKey]:
    """An earlier version's segments (one LIST)."""
    return sorted(n for k in store.list(PREFIX) if (n := LegacyKey.parse(k)) is not None)


def read_legacy(store: JournalStore, name: LegacyKey) -> pa.Table | None:
    """An earlier version's segment (its expiry is in its name)."""
    table = read_table(store, name.key)
    return table.replace_schema_metadata(None) if table is not None else None


def live_legacy(names: Iterable[LegacyKey], now: float) -> list[LegacyKey]:
    """An earlier version's segments that still count at ``now``: unexpired, and for a batch
    whose receivers' segments were merged, the merged one only (that version's rule)."""
    names = [n for n in names if n.expires > now]
    merged = {n.batch for n in names if n.who == "merged"}
    return [n for n in names if not n.who.startswith("r") or n.batch not in merged]


class WindowRange:
    """The driver's view of which batches may hold live window ids: every batch not yet
    removed, and those removed less than the window (and a margin) ago on its monotonic clock.
    Readers keep a batch's ids exactly while it is in this range. Segments of a removed batch
    were all written before its removal (its seal precedes it; later ones are forwarded to a
    batch not yet sealed), and each delete follows its ids' last segment by at most
    ``RESEGMENT_AFTER`` (acknowledgement/deletes.py), within the margin: so every id stays in
    the range for the window after its delete, judged on this one clock."""

    def __init__(
        self,
        window_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        start_from: int = 0,
    ) -> None:
        self.window_seconds = window_seconds
        self._clock = clock
        # Batches removed before this driver started: their removal times are unknown, so they
        # count as removed at start.
        self._floor = start_from
        self._started = clock()
        self._removed: dict[int, float] = {}
        # Until when (epoch seconds) an earlier version's segments may be live: readers list
        # them once (``DuplicateWindow``).
        self.legacy_until: float | None = None

    def removed(self, batch: int) -> None:
        self._removed.setdefault(batch, self._clock())

    def window_from(self, oldest_pending: int) -> int:
        """The oldest batch a reader must consider, for a plan made now (``oldest_pending``:
        the oldest batch not yet removed, or the batch being planned)."""
        now = self._clock()
        keep = self.window_seconds + EXPIRY_MARGIN
        for batch in [b for b, at in self._removed.items() if now - at > keep]:
            del self._removed[batch]
        start = oldest_pending
        if now - self._started <= keep:
            start = min(start, self._floor)
        if self._removed:
            start = min(start, min(self._removed))
        return start


@dataclass(frozen=True)
class Seal:
    """The batch a writer seals with its segment (``Window.write``): its receivers, and the
    ``windowFrom`` of the sealer's plan (a later driver's start reads it back)."""

    batch: int
    receivers: tuple[int, ...]
    window_from: int | None = None


class Window(Record):
    """The journal's duplicate-window segments (the functions above, on its store). On the
    driver, ``range`` is its ``WindowRange`` (set by the coordinator): then a batch's removal
    seals it first (``before_removal``)."""

    def __init__(self, journal: JournalRoot) -> None:
        super().__init__(journal)
        self.range: WindowRange | None = None
        # (batch, writer) -> the next number this process's writer tries first.
        self._next: dict[tuple[int, str], int] = {}
        # Batches this process sealed or found sealed and probed (``seal_batch`` returned):
        # their removal need not probe again.
        self._probed: set[int] = set()

    def __getstate__(self) -> dict[str, object]:
        # Executors never seal on removal: the driver's view stays on the driver.
        return {**self.__dict__, "range": None, "_next": {}, "_probed": set()}

    def write(
        self,
        message_ids: list[str],
        *,
        batch: int,
        who: str,
        seal: Seal | None = None,
    ) -> None:
        """Record acknowledged ids for the duplicate window; written before the messages are
        deleted, as writer ``who``'s next segment of ``batch``. With
        ``seal`` (the receiver of the next batch its plan names, or the driver deleting a batch
        itself), the ids go into that batch's seal instead, created even with no ids; if the
        batch was sealed already, they are written as usual."""
        table = segment_table(message_ids)
        if seal is not None:
            sealed = seal_batch(
                self.store, seal.batch, seal.receivers, table, window_from=seal.window_from
            )
            if self.range is not None:
                self._probed.add(seal.batch)
            if sealed:
                return
        if table.num_rows == 0:
            return
        data = ipc_bytes(table)
        k = create_dense(self.store, batch, who, data, self._next.get((batch, who), 0))
        self._next[(batch, who)] = k + 1
        forward(self.store, data, batch)

    def driver_seal(self, batch: int, receivers: Sequence[int]) -> Seal | None:
        """The seal of ``batch`` when the driver deletes its messages itself (no receiver of a
        next batch will seal it), on the driver with the window on; else None."""
        if self.range is None:
            return None
        return Seal(batch, tuple(receivers), self.range.window_from(batch))

    def before_removal(
        self,
        batch: int,
        receivers: Callable[[], Sequence[int] | None],
        probed: bool = False,
    ) -> None:
        """On the driver, before ``batch``'s plan (or carry record) is removed: seal it if no one
        did (readers of a batch with no plan read its seal), and note when it went. A seal
        found made by another is probed from the ends it records (``probe_sealed``: its sealer
        may have died before its own probe), unless ``probed``: the caller knows the sealer's
        task finished (the next batch's sealer reported, so its ``seal_batch`` returned), or
        this process sealed it."""
        if self.range is None:
            return
        sealed = read_table(self.store, merged_key(batch))
        if sealed is None:
            live = receivers()
            if live is not None:
                seal_batch(
                    self.store,
                    batch,
                    live,
                    window_from=self.range.window_from(batch),
                )
        elif not probed and batch not in self._probed:
            probe_sealed(self.store, batch, sealed)
        self._probed.discard(batch)
        self.range.removed(batch)

    def start_from(self, acked: int) -> int:
        """At the driver's start: the oldest batch that may hold live ids. The seal of the
        newest acknowledged batch names its sealer's ``windowFrom``. A driver that died
        between the acknowledged marker and the seal (``before_removal``) left none: then the
        batch's plan names the ``windowFrom`` it was planned with (removed only after the
        seal), and a batch with neither (a carry batch) defers to the one below it. A record
        judged earlier is never too late: every batch removed since was pending then, so at
        or above it. The batch after ``acked`` only when the seal has no ``windowFrom`` (an
        earlier version's, whose segments expire by name) or nothing is found within
        START_PROBES batches (their segments were swept: below an earlier driver's range)."""
        table = read_table(self.store, merged_key(acked)) if acked > 0 else None
        if table is not None:
            found = window_from_of(table)
            return found if found is not None else acked + 1
        for batch in range(acked, max(0, acked - START_PROBES), -1):
            sealed = read_table(self.store, merged_key(batch)) if batch != acked else None
            found = window_from_of(sealed) if sealed is not None else None
            if found is None and sealed is None:
                data = self.store.read(plan_key(batch))
                found = BatchPlan.from_json(data).window_from if data is not None else None
            if found is not None:
                return found
        return acked + 1

    def legacy_until(self, now: float) -> float | None:
        """At the driver's start (one LIST): the latest expiry of an earlier version's live
        segments, or None if none is live."""
        names = live_legacy(list_legacy(self.store), now)
        return float(max(n.expires for n in names)) if names else None

    def collect(self, now: float, oldest_pending: int | None = None) -> int:
        """Remove segments of batches below the driver's range (given ``oldest_pending``, the
        oldest batch not removed) and expired ones of an earlier version (best effort; one
        LIST). Returns how many."""
        try:
            keys = self.store.list(PREFIX)
            below = (
                self.range.window_from(oldest_pending)
                if self.range is not None and oldest_pending is not None
                else None
            )
            gone = []
            legacy = [n for k in keys if (n := LegacyKey.parse(k)) is not None]
            keep = set(live_legacy(legacy, now))
            gone += [n.key for n in legacy if n not in keep]
            if below is not None:
                gone += [k for k in keys if (b := batch_of(k)) is not None and b < below]
            if gone:
                self.store.delete_many(gone)
            return len(gone)
        except Exception:
            # Storage, not correctness: segments below the range are never read.
            logger.warning("journal %s: could not remove expired window segments", self.location)
            return 0
