"""The duplicate window, as receivers look it up. Runs on: executors.

Each Python worker keeps the live segments of ``spark_sqs.journal.window`` it has read, so a
receiver task fetches only the segments written since the worker's previous task: one LIST of
``window/`` and a GET per new segment (one per earlier batch once merged). In memory the digests
are kept in a few sorted runs, one per slice of expiry times (a quarter of the window), merged
in Arrow's C code as segments arrive: 16 bytes per id, and a lookup is one binary search per
run, whatever the window holds. A slice's newest segments form small runs of their own until
they are an eighth of the slice, then are merged into it, so a task rarely re-sorts a slice. A
whole slice is forgotten once it has expired.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from ..journal import window
from ..journal.stores import JournalStore

logger = logging.getLogger(__name__)

# A slice's newer runs are merged into its first once they hold 1/MERGE_RATIO of it, or number
# more than MAX_RUNS: a refresh then sorts a small run, and a lookup searches a few runs.
MERGE_RATIO = 8
MAX_RUNS = 8


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


class DuplicateWindow:
    """The ids acknowledged within the window, as far as this worker has read them."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._slice = max(1, int(window_seconds // 4))
        # Per slice of expiry times: sorted runs, the first the largest.
        self._runs: dict[int, list[_Run]] = {}
        self._loaded: set[window.SegmentKey] = set()
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """Digests held (an id read twice, e.g. in a part and its merged segment, counts twice)."""
        return sum(r.table.num_rows for runs in self._runs.values() for r in runs)

    @property
    def nbytes(self) -> int:
        return sum(r.table.nbytes for runs in self._runs.values() for r in runs)

    def refresh(
        self,
        store: JournalStore,
        now: float,
        listed: list[list[window.SegmentKey]] | None = None,
    ) -> int:
        """Read the segments written since the last refresh and forget expired slices. Returns
        how many segments were read. ``listed``: gets the listing this refresh made appended."""
        listing = window.list_segments(store)
        if listed is not None:
            listed.append(listing)
        names = window.live(listing, now)
        with self._lock:
            for s in [s for s in self._runs if (s + 1) * self._slice <= now]:
                del self._runs[s]
            self._loaded = {n for n in self._loaded if n.expires > now}
            fresh = [n for n in names if n not in self._loaded]
        added: dict[int, list[pa.Table]] = {}
        for name in fresh:
            table = window.read_segment(store, name)
            if table is not None:
                added.setdefault(name.expires // self._slice, []).append(table)
        with self._lock:
            for s, tables in added.items():
                runs = self._runs.setdefault(s, [])
                runs.append(_Run(pa.concat_tables(tables).sort_by("h1").combine_chunks()))
                base, newer = runs[0].table.num_rows, sum(r.table.num_rows for r in runs[1:])
                if len(runs) > 1 and (newer * MERGE_RATIO > base or len(runs) > MAX_RUNS):
                    # Re-sorting a slice costs its size: do it once the newer runs are a
                    # fraction of it, not at every task.
                    merged = pa.concat_tables([r.table for r in runs]).sort_by("h1")
                    self._runs[s] = [_Run(merged.combine_chunks())]
            self._loaded.update(fresh)
        return len(fresh)

    def seen(self, message_ids: Sequence[str]) -> set[str]:
        """The ids among ``message_ids`` that were acknowledged within the window."""
        with self._lock:
            runs = [r for slice_runs in self._runs.values() for r in slice_runs]
        if not runs:
            return set()
        out = set()
        for message_id in message_ids:
            pair = window.digest(message_id)
            if any(pair in run for run in runs):
                out.add(message_id)
        return out


_WINDOWS: dict[tuple[str, float], DuplicateWindow] = {}
_WINDOWS_LOCK = threading.Lock()


def worker_window(location: str, window_seconds: float) -> DuplicateWindow:
    """This worker's window of journal ``location`` (kept across the tasks it runs)."""
    with _WINDOWS_LOCK:
        found = _WINDOWS.get((location, window_seconds))
        if found is None:
            found = _WINDOWS[(location, window_seconds)] = DuplicateWindow(window_seconds)
        return found


def forget_all() -> None:
    """Drop every worker's window (the simulation starts each seed with fresh workers)."""
    with _WINDOWS_LOCK:
        _WINDOWS.clear()


def copies(
    store: JournalStore,
    location: str,
    window_seconds: float,
    message_ids: Sequence[str],
    *,
    queue_url: str,
    now: float,
    listed: list[list[window.SegmentKey]] | None = None,
) -> set[str]:
    """The ids among ``message_ids`` (just received from ``queue_url``) that are copies of
    messages acknowledged within the window. A FIFO queue never delivers such a copy: it is not
    looked up and costs no store request. ``listed``: gets the segment listing appended."""
    if window_seconds <= 0 or not message_ids or window.is_fifo(queue_url):
        return set()
    cache = worker_window(location, window_seconds)
    cache.refresh(store, now, listed)
    return cache.seen(message_ids)
