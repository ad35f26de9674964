"""Redelivery dedupe: ids whose acknowledgement may not have taken effect (a delete whose
outcome is unknown, or made with a handle that may have expired), dropped if SQS delivers them
again within ``dedupeWindow``. Runs on: driver (writes at acknowledgement, reads at start;
receivers that acknowledge their share report their uncertain ids, and the driver records
them when it settles the batch).

A record's lifetime is judged on the driver's monotonic clock only: the ids it records are
kept for the window from when it recorded them, and a record read at start (an earlier
driver's, maybe on another host) for a whole window from that reading. Its written expiry is
the writer's wall clock: it is kept for earlier versions (which judge by it) and for people
reading the journal, never compared with this host's clock. Each acknowledged marker names the
records kept and how long each has left then (a duration on its writer's monotonic clock, not a
time): a restart keeps a named record that long from its start, and any other (written but not
named yet, or an earlier version's) a whole window. A restart may so keep an id longer (by the
time the query was stopped), never shorter, and a query restarted often still lets a record go
once its runs add up to the window; the ids are message ids, unique to their message, so
keeping one longer drops nothing but its redeliveries.

Keys::

    dedupe/<N>-<digest>.arrow   ids of batch N whose acknowledgement is uncertain, with their
                                writer's wall-clock expiry in the schema metadata; the newest
                                acknowledged marker (state.py) names the live ones, so a
                                start reads them by key
"""

from __future__ import annotations

import hashlib

import pyarrow as pa

from .stores import JournalRoot, Record, ipc_bytes

PREFIX = "dedupe"
# Schema metadata of a dedupe record: its writer's wall-clock expiry (epoch seconds), for
# earlier versions and people; this version judges a record on its own monotonic clock.
EXPIRES_AT = b"spark_sqs.expiresAt"


class Dedupe(Record):
    def __init__(self, journal: JournalRoot) -> None:
        super().__init__(journal)
        # Dedupe records this process knows to be live (read at start, written since), with
        # until when it keeps them (its monotonic clock): the newest acknowledged marker names
        # them, so that a start reads them by key.
        self.keys: dict[str, float] = {}
        # Records this process kept for their window and let go: removed by key (``collect``),
        # and never read again by it.
        self._expired: set[str] = set()
        # The dedupe records the newest acknowledged marker named when the state was read,
        # with the seconds each had left when it was written (None: a whole window).
        self.named: dict[str, float | None] = {}
        # When ``expire`` last ran (the caller's monotonic clock): ``left`` is counted from it.
        self._as_of = 0.0

    def write(
        self, batch: int, message_ids: list[str], *, now: float, window: float, wall: float
    ) -> None:
        """Remember ids whose acknowledgement may not have taken effect for ``window``
        seconds from ``now`` (the caller's monotonic clock). ``wall``: the wall time now; the
        record holds ``wall + window`` for earlier versions and people reading it."""
        table = pa.table({"messageId": pa.array(sorted(message_ids), pa.string())})
        table = table.replace_schema_metadata({EXPIRES_AT: repr(wall + window)})
        data = ipc_bytes(table)
        digest = hashlib.sha256(data).hexdigest()[:16]
        key = f"{PREFIX}/{batch:012d}-{digest}.arrow"
        self.store.create(key, data)
        # Before the batch's acknowledged marker, which names it.
        self.keys[key] = now + window
        self._expired.discard(key)
        self.expire(now)

    def expire(self, now: float) -> None:
        """Let go of the records kept until ``now`` (the caller's monotonic clock): markers
        written from here on no longer name them (no I/O: ``collect`` removes them)."""
        self._as_of = now
        gone = [k for k, until in self.keys.items() if until <= now]
        for key in gone:
            del self.keys[key]
        self._expired.update(gone)

    def left(self) -> dict[str, float]:
        """The records kept, with the seconds each has left as of the last ``expire``: what an
        acknowledged marker names, so that a restart keeps each no longer than that."""
        return {
            k: round(max(0.0, until - self._as_of), 3) for k, until in sorted(self.keys.items())
        }

    def collect(self, now: float) -> None:
        """Remove the records this process let go of by ``now``, by key (best effort: a record
        left behind is read again by a later start, and kept a window more)."""
        self.expire(now)
        if self._expired:
            self.store.delete_many(sorted(self._expired))
            self._expired.clear()

    def read(self, now: float, window: float) -> dict[str, float]:
        """Dedupe ids with until when (the caller's monotonic clock, as ``now``) they are kept:
        a record this process wrote or read keeps its time; one the newest acknowledged marker
        names is kept what it had left then (at most ``window``) from ``now``; any other
        ``window`` from ``now`` (its written expiry is another clock's). The records are those
        the newest acknowledged marker names (read by key: ``state.read`` must have run), and
        those a LIST finds (not named yet, or an earlier version's, whose markers name none)."""
        self.expire(now)
        out: dict[str, float] = {}
        keys = {*self.named, *self.keys, *self.store.list(PREFIX)} - self._expired
        for key in sorted(keys):
            if not key.endswith(".arrow"):
                continue
            data = self.store.read(key)
            if data is None:
                self.keys.pop(key, None)
                continue
            left = self.named.get(key)
            until = self.keys.setdefault(key, now + (window if left is None else min(left, window)))
            reader = pa.ipc.open_file(pa.BufferReader(data))
            for message_id in reader.read_all().column("messageId").to_pylist():
                out[message_id] = max(until, out.get(message_id, 0.0))
        return out
