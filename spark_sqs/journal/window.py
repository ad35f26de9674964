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

    window/<expires>-<N>-r<receiver>-ack.arrow      ids a receiver of <N> acknowledged
    window/<expires>-<N>-r<receiver>-p<k>.arrow     deleteAfterJournal: part k's ids
    window/<expires>-<N>-r<receiver>-d<hash>.arrow  redeliveries the receiver dropped
    window/<expires>-<N>-driver.arrow               ids of <N> the driver acknowledged
    window/<expires>-<N>-q-<hash>.arrow             a message sent to the dead-letter queue
    window/<expires>-<N>-merged.arrow               the r-segments of <N>, merged by one
                                                    receiver of the next batch (the one its
                                                    stored plan puts at <N> modulo the
                                                    receivers: executor/filtering.py)

``<expires>`` is the epoch second after which the ids may be forgotten, first in the key so that
expiry and collection read key names only. A segment stores no id itself: two unsigned 64-bit
columns ``h1``/``h2`` hold each id's 128-bit BLAKE2b digest, sorted by ``h1``, so a lookup is a
binary search and two different ids match with probability below 2**-100 in any realistic
window. Segments are written create-if-absent and never changed.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from .stores import JournalStore, Record

logger = logging.getLogger(__name__)

PREFIX = "window"
_SEGMENT = re.compile(r"^window/(\d{12})-(\d{12})-([a-z0-9-]+)\.arrow$")


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


@dataclass(frozen=True, order=True)
class SegmentKey:
    expires: int
    batch: int
    # "r000003-ack", "r000003-p00001" (a receiver's: merged later), "driver", "q-<digest>" (a
    # quarantined message, driver/poison.py) or "merged"
    who: str

    @property
    def key(self) -> str:
        return f"{PREFIX}/{self.expires:012d}-{self.batch:012d}-{self.who}.arrow"

    @classmethod
    def parse(cls, key: str) -> SegmentKey | None:
        m = _SEGMENT.match(key)
        return cls(int(m.group(1)), int(m.group(2)), m.group(3)) if m else None


def segment_table(message_ids: Iterable[str]) -> pa.Table:
    """The digests of ``message_ids``, sorted by ``h1`` (duplicates removed)."""
    pairs = sorted({digest(i) for i in message_ids})
    return pa.table(
        {
            "h1": pa.array([p[0] for p in pairs], pa.uint64()),
            "h2": pa.array([p[1] for p in pairs], pa.uint64()),
        }
    )


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def write_segment(
    store: JournalStore,
    message_ids: Iterable[str],
    *,
    batch: int,
    who: str,
    expires_at: float,
) -> SegmentKey | None:
    """Record ``message_ids`` as acknowledged until ``expires_at`` (epoch seconds). Nothing is
    written for no ids. A retried writer creates a second segment (its expiry differs) or finds
    its own: both are harmless, since a segment only ever adds ids."""
    table = segment_table(message_ids)
    if table.num_rows == 0:
        return None
    name = SegmentKey(int(expires_at) + 1, batch, who)
    store.create(name.key, _ipc(table))
    return name


def read_segment(store: JournalStore, name: SegmentKey) -> pa.Table | None:
    """A segment's digests, or None if it was removed (merged or expired) meanwhile."""
    data = store.read(name.key)
    if data is None:
        return None
    return pa.ipc.open_file(pa.BufferReader(data)).read_all()


def list_segments(store: JournalStore) -> list[SegmentKey]:
    return sorted(n for k in store.list(PREFIX) if (n := SegmentKey.parse(k)) is not None)


def live(names: Iterable[SegmentKey], now: float) -> list[SegmentKey]:
    """The segments that still count at ``now``: unexpired, and for a batch whose receivers'
    segments were merged, the merged one only."""
    names = [n for n in names if n.expires > now]
    merged = {n.batch for n in names if n.who == "merged"}
    return [n for n in names if not n.who.startswith("r") or n.batch not in merged]


def merge_batch(store: JournalStore, batch: int) -> SegmentKey | None:
    """Merge the receivers' segments of ``batch`` into one (runs on the receiver its plan names):
    readers then fetch one object per batch instead of one per receiver. Idempotent: the merged
    segment is created if absent, then the parts are removed; a crash between leaves both, and
    readers prefer the merged one. A batch with one part (one receiver acknowledged) is left
    as it is: readers fetch one object for it already, and merging would cost a read, a write
    and a removal for nothing."""
    parts = [n for n in list_segments(store) if n.batch == batch and n.who.startswith("r")]
    if len(parts) < 2:
        return None
    tables = [t for n in parts if (t := read_segment(store, n)) is not None]
    if not tables:
        return None
    table = pa.concat_tables(tables).sort_by("h1")
    name = SegmentKey(max(n.expires for n in parts), batch, "merged")
    store.create(name.key, _ipc(table))
    store.delete_many([n.key for n in parts])
    logger.info(
        "duplicate window: merged %d segments of batch %d (%d ids)",
        len(parts),
        batch,
        table.num_rows,
    )
    return name


def collect(store: JournalStore, now: float) -> int:
    """Remove expired segments, and parts whose merged segment exists. Returns how many."""
    names = list_segments(store)
    keep = set(live(names, now))
    gone = [n.key for n in names if n not in keep]
    if gone:
        store.delete_many(gone)
    return len(gone)


class Window(Record):
    """The journal's duplicate-window segments (the functions above, on its store)."""

    def write(self, message_ids: list[str], *, batch: int, who: str, expires_at: float) -> None:
        """Record acknowledged ids for the duplicate window until ``expires_at``; written
        before the messages are deleted."""
        write_segment(self.store, message_ids, batch=batch, who=who, expires_at=expires_at)

    def collect(self, now: float) -> int:
        """Remove expired duplicate-window segments (best effort). Returns how many."""
        try:
            return collect(self.store, now)
        except Exception:
            # Storage, not correctness: an expired segment is ignored until it is removed.
            logger.warning("journal %s: could not remove expired window segments", self.location)
            return 0
