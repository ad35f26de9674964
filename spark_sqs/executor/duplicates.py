"""The duplicate window, as receivers look it up. Runs on: executors.

Each Python worker keeps the live segments of ``spark_sqs.journal.window`` it has read, so a
receiver task fetches only the segments written since the worker's previous task, by key: one
GET of a sealed batch's merged segment, once; for a batch not sealed (the task's own, usually
the one before), a GET per writer's next number (its receivers', the driver's) until the first
absent one; for a batch with neither plan nor seal, its driver's (forwarded) segments, once.
Which batches: from the plan's ``windowFrom`` (the driver's view, on its monotonic clock) to the
task's, and a batch's ids are kept exactly while it is in that range: no time is
compared here. An earlier version's segments are read by one LIST at a worker's first lookup,
while the plan says some may be live, and forgotten when their expiry passes (the one exception,
once after an upgrade).

In memory the digests are kept in a few sorted runs, one per slice of consecutive batches (a
quarter of the plan's range when the slice began), merged in Arrow's C code as segments arrive:
16 bytes per id, and a lookup is one binary search per run, whatever the window holds. A
slice's newest segments form small runs of their own until they are an eighth of the slice,
then are merged into it, so a task rarely re-sorts a slice. A whole slice is forgotten once its
newest batch is below the plan's ``windowFrom``; slices beyond ``MAX_SLICES`` (left by a range
that grew) are merged with a neighbour.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from ..journal import window
from ..journal.stores import JournalStore
from ..per_process import PerProcess

logger = logging.getLogger(__name__)

# A slice's newer runs are merged into its first once they hold 1/MERGE_RATIO of it, or number
# more than MAX_RUNS: a refresh then sorts a small run, and a lookup searches a few runs.
MERGE_RATIO = 8
MAX_RUNS = 8
# A new slice spans a SLICES-th of the plan's range of batches: the range keeps about SLICES + 1
# of them, and a slice outlives its batches' range by at most its own span. Past MAX_SLICES
# (a range that grew: its first slices were narrow) the two neighbours of least span merge.
SLICES = 4
MAX_SLICES = 8


@dataclass(frozen=True)
class Lookup:
    """What a receiver task's lookup must see: its batch and receivers, the oldest batch that
    may hold live ids (the plan's ``windowFrom``), and until when an earlier version's
    segments may be live (epoch seconds; None: none)."""

    batch: int
    receivers: tuple[int, ...]
    window_from: int
    legacy_until: float | None = None


@dataclass
class _Run:
    """Digests sorted by ``h1``; ``h1``/``h2`` are zero-copy views of the Arrow buffers."""

    table: pa.Table
    h1: Sequence[int] = field(init=False, repr=False)
    h2: Sequence[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.h1 = _view(self.table.column("h1"))
        self.h2 = _view(self.table.column("h2"))

    def __contains__(self, pair: tuple[int, int]) -> bool:
        h1, h2 = pair
        i = bisect.bisect_left(self.h1, h1)
        while i < len(self.h1) and self.h1[i] == h1:
            if self.h2[i] == h2:
                return True
            i += 1
        return False


def _view(column: pa.ChunkedArray) -> Sequence[int]:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(array) == 0:
        return ()
    data = array.buffers()[1]
    start = array.offset * 8
    return memoryview(data).cast("B")[start : start + len(array) * 8].cast("Q")


@dataclass
class _Slice:
    """The digests read from batches ``lo`` up to ``end`` (exclusive; fixed when it began):
    sorted runs, the first the largest. ``newest``: the newest batch whose ids it holds, so it
    is forgotten once that is below the range."""

    lo: int
    end: int
    newest: int
    runs: list[_Run] = field(default_factory=list)

    def add(self, run: _Run) -> None:
        self.runs.append(run)
        base, newer = self.runs[0].table.num_rows, sum(r.table.num_rows for r in self.runs[1:])
        if len(self.runs) > 1 and (newer * MERGE_RATIO > base or len(self.runs) > MAX_RUNS):
            # Re-sorting a slice costs its size: do it once the newer runs are a fraction of
            # it, not at every task.
            self.runs = [_merged([r.table for r in self.runs])]


def _merged(tables: list[pa.Table]) -> _Run:
    return _Run(pa.concat_tables(tables).sort_by("h1").combine_chunks())


class DuplicateWindow:
    """The ids acknowledged within the window, as far as this worker has read them."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        # Slices of consecutive batches, by their first batch (ascending, not overlapping).
        self._slices: list[_Slice] = []
        # An earlier version's segments (read once), and their latest expiry (epoch seconds).
        self._legacy_runs: list[_Run] = []
        self._legacy_expires = 0.0
        # Per batch: sealed and read (never read again), else each writer's next number and its
        # receivers (from its plan).
        self._final: set[int] = set()
        self._next: dict[tuple[int, str], int] = {}
        self._receivers: dict[int, tuple[int, ...]] = {}
        self._legacy = False  # an earlier version's segments were listed
        # The highest windowFrom applied: what a concurrent refresh read below it is not noted
        # as read (its ids may be forgotten meanwhile; a plan that names it reads it again).
        self._floor = 0
        self._lock = threading.Lock()

    def _all_runs(self) -> list[_Run]:
        return [r for s in self._slices for r in s.runs] + self._legacy_runs

    @property
    def size(self) -> int:
        """Digests held (an id read twice, e.g. in a part and its merged segment, counts twice)."""
        return sum(r.table.num_rows for r in self._all_runs())

    @property
    def nbytes(self) -> int:
        return sum(r.table.nbytes for r in self._all_runs())

    @property
    def slices(self) -> int:
        """Slices held (an earlier version's segments not counted)."""
        return len(self._slices)

    def refresh(
        self,
        store: JournalStore,
        now: float,
        lookup: Lookup,
        live_receivers: Callable[[int], Sequence[int] | None] = lambda batch: None,
    ) -> int:
        """Read the segments written since the last refresh that ``lookup`` (a task of its
        batch) must see, and forget what is below its range. Returns how many segments were
        read. ``now``: this host's wall clock, compared only with an earlier version's
        expiries. ``live_receivers``: a batch's receivers while it has a plan, else None."""
        with self._lock:
            self._forget_below(lookup.window_from)
            if self._legacy_runs and now >= self._legacy_expires:
                self._legacy_runs = []
            read = _Read(set(self._final), dict(self._next), dict(self._receivers))
            legacy = not self._legacy
        legacy_tables: list[pa.Table] = []
        legacy_expires = 0.0
        if lookup.legacy_until is not None and now < lookup.legacy_until and legacy:
            # Once per worker: an earlier version's segments, found by their names.
            names = window.live_legacy(window.list_legacy(store), now)
            for name in names:
                table = window.read_legacy(store, name)
                if table is not None:
                    legacy_tables.append(table)
                    legacy_expires = max(legacy_expires, float(name.expires))
            read.legacy = True
        found: dict[int, list[pa.Table]] = {}
        segments = len(legacy_tables)
        for batch in range(lookup.window_from, lookup.batch + 1):
            tables = _read_batch(store, batch, lookup, live_receivers, read)
            segments += len(tables)
            if any(t.num_rows for t in tables):
                found[batch] = [t.replace_schema_metadata(None) for t in tables if t.num_rows]
        # A new slice spans a quarter of this plan's range (at least one batch).
        width = max(1, -(-(lookup.batch - lookup.window_from + 1) // SLICES))
        with self._lock:
            added: dict[int, list[pa.Table]] = {}
            for batch, tables in found.items():
                held = self._slice_of(batch, width)
                held.newest = max(held.newest, batch)
                added.setdefault(held.lo, []).extend(tables)
            for held in self._slices:
                if held.lo in added:
                    held.add(_merged(added[held.lo]))
            self._merge_narrowest()
            if legacy_tables:
                self._legacy_runs.append(_merged(legacy_tables))
                self._legacy_expires = max(self._legacy_expires, legacy_expires)
            # What was read counts as read only once its digests are held (another task of
            # this worker may look up meanwhile: it reads again, never misses).
            self._legacy = self._legacy or read.legacy
            self._final |= {b for b in read.final if b >= self._floor}
            for key, end in read.next.items():
                if key[0] not in self._final and key[0] >= self._floor:
                    self._next[key] = max(end, self._next.get(key, 0))
            self._receivers.update(
                (b, r)
                for b, r in read.receivers.items()
                if b not in self._final and b >= self._floor
            )
            for key in [k for k in self._next if k[0] in self._final]:
                del self._next[key]
            for b in [b for b in self._receivers if b in self._final]:
                del self._receivers[b]
        return segments

    def _forget_below(self, window_from: int) -> None:
        """Forget the slices whose batches are all below ``window_from``, and what was noted
        of those batches (a later plan that names one again reads it again)."""
        self._floor = max(self._floor, window_from)
        self._slices = [s for s in self._slices if s.newest >= window_from]
        for b in [b for b in self._final if b < window_from]:
            self._final.discard(b)
        for key in [k for k in self._next if k[0] < window_from]:
            del self._next[key]
        for b in [b for b in self._receivers if b < window_from]:
            del self._receivers[b]

    def _slice_of(self, batch: int, width: int) -> _Slice:
        """The slice that holds ``batch``'s ids: the one whose batches include it, else a new
        one from it, ``width`` batches or up to the next slice."""
        i = bisect.bisect_right([s.lo for s in self._slices], batch) - 1
        if i >= 0 and batch < self._slices[i].end:
            return self._slices[i]
        end = batch + width
        if i + 1 < len(self._slices):
            end = min(end, self._slices[i + 1].lo)
        held = _Slice(batch, end, batch)
        self._slices.insert(i + 1, held)
        return held

    def _merge_narrowest(self) -> None:
        """Keep at most ``MAX_SLICES``: merge the two neighbours of least span."""
        while len(self._slices) > MAX_SLICES:
            pairs = range(len(self._slices) - 1)
            i = min(pairs, key=lambda j: self._slices[j + 1].end - self._slices[j].lo)
            a, b = self._slices[i], self._slices[i + 1]
            tables = [r.table for r in (*a.runs, *b.runs)]
            merged = _Slice(a.lo, b.end, max(a.newest, b.newest))
            if tables:
                merged.runs = [_merged(tables)]
            self._slices[i : i + 2] = [merged]

    def seen(self, message_ids: Sequence[str]) -> set[str]:
        """The ids among ``message_ids`` that were acknowledged within the window."""
        with self._lock:
            runs = self._all_runs()
        if not runs:
            return set()
        out = set()
        for message_id in message_ids:
            pair = window.digest(message_id)
            if any(pair in run for run in runs):
                out.add(message_id)
        return out


@dataclass
class _Read:
    """One refresh's view of what its worker read before, and what it reads now."""

    final: set[int]
    next: dict[tuple[int, str], int]
    receivers: dict[int, tuple[int, ...]]
    legacy: bool = False


def _read_batch(
    store: JournalStore,
    batch: int,
    lookup: Lookup,
    live_receivers: Callable[[int], Sequence[int] | None],
    read: _Read,
) -> list[pa.Table]:
    """What ``batch`` holds that the worker has not read: its merged segment once it is sealed
    (then never again: a segment created after the seal is forwarded to a later batch), else
    its writers' segments from the numbers read so far."""
    if batch in read.final:
        return []
    receivers: Sequence[int] | None
    if batch == lookup.batch:
        # The task's own batch is sealed only after it committed (a straggler's lookup).
        receivers = lookup.receivers
    else:
        merged = window.read_table(store, window.merged_key(batch))
        if merged is not None:
            read.final.add(batch)
            return [merged]
        receivers = read.receivers.get(batch)
        if receivers is None:
            receivers = live_receivers(batch)
            if receivers is None:
                # No plan: removed (sealed first, so the seal exists now), or never planned.
                merged = window.read_table(store, window.merged_key(batch))
                read.final.add(batch)
                return [merged] if merged is not None else _unplanned(store, batch, read)
            read.receivers[batch] = tuple(receivers)
    out: list[pa.Table] = []
    for who in [window.receiver_writer(r) for r in sorted(set(receivers))] + [window.DRIVER]:
        found, end = window.read_run(store, batch, who, read.next.get((batch, who), 0))
        out += found
        read.next[(batch, who)] = end
    return out


def _unplanned(store: JournalStore, batch: int, read: _Read) -> list[pa.Table]:
    """What a batch with neither plan nor seal holds: a number a driver handed out and died
    before Spark logged it (or one reserved for a carry batch whose record is not written
    yet). A segment forwarded into it before it was handed out rests there as the driver's,
    with no seal to merge it: its ``x`` run, read once. Nothing else can rest there: receivers
    write only into a planned batch, and a forward reads the planned marker after its create,
    so one that stays was created before the number was handed out, before this task's plan."""
    found, _ = window.read_run(
        store, batch, window.DRIVER, read.next.get((batch, window.DRIVER), 0)
    )
    return found


_WINDOWS: PerProcess[tuple[str, float], DuplicateWindow] = PerProcess()


def worker_window(location: str, window_seconds: float) -> DuplicateWindow:
    """This worker's window of journal ``location`` (kept across the tasks it runs)."""
    return _WINDOWS.get_or_build(
        (location, window_seconds), lambda: DuplicateWindow(window_seconds)
    )


def forget_all() -> None:
    """Drop every worker's window (the simulation starts each seed with fresh workers)."""
    _WINDOWS.clear()


def copies(
    store: JournalStore,
    location: str,
    window_seconds: float,
    message_ids: Sequence[str],
    *,
    queue_url: str,
    now: float,
    lookup: Lookup,
    live_receivers: Callable[[int], Sequence[int] | None] = lambda batch: None,
) -> set[str]:
    """The ids among ``message_ids`` (just received from ``queue_url``) that are copies of
    messages acknowledged within the window. A FIFO queue never delivers such a copy: it is not
    looked up and costs no store request."""
    if window_seconds <= 0 or not message_ids or window.is_fifo(queue_url):
        return set()
    cache = worker_window(location, window_seconds)
    cache.refresh(store, now, lookup, live_receivers)
    return cache.seen(message_ids)
