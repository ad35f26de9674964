"""Redelivery dedupe: ids whose acknowledgement may not have taken effect (a delete whose
outcome is unknown, or made with a handle that may have expired), dropped if SQS delivers them
again within ``dedupeWindow``. Runs on: driver (writes at acknowledgement, reads at start;
receivers that acknowledge their share report their uncertain ids, and the driver records
them when it settles the batch).

A record's lifetime is judged on the driver's monotonic clock only: the ids it records are
kept for the window from when it recorded them, and a record read at start (an earlier
driver's, maybe on another host) for a whole window from that reading. Its written expiry is
the writer's wall clock: it is kept for earlier versions (which judge by it) and for people
reading the journal, never compared with this host's clock. A restart may so keep an id longer
(a window from each start that reads it), never shorter; the ids are message ids, unique to
their message, so keeping one longer drops nothing but its redeliveries.

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
        # The dedupe records the newest acknowledged marker named when the state was read.
        self.named: list[str] = []

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
        gone = [k for k, until in self.keys.items() if until <= now]
        for key in gone:
            del self.keys[key]
        self._expired.update(gone)

    def collect(self, now: float) -> None:
        """Remove the records this process let go of by ``now``, by key (best effort: a record
        left behind is read again by a later start, and kept a window more)."""
        self.expire(now)
        if self._expired:
            self.store.delete_many(sorted(self._expired))
            self._expired.clear()

    def read(self, now: float, window: float) -> dict[str, float]:
        """Dedupe ids with until when (the caller's monotonic clock, as ``now``) they are kept:
        a record this process wrote or read keeps its time, any other is kept for ``window``
        from ``now`` (its written expiry is another clock's). The records are those the newest
        acknowledged marker names (read by key: ``state.read`` must have run), and those a LIST
        finds (an earlier version's, whose markers name none)."""
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
            until = self.keys.setdefault(key, now + window)
            reader = pa.ipc.open_file(pa.BufferReader(data))
            for message_id in reader.read_all().column("messageId").to_pylist():
                out[message_id] = max(until, out.get(message_id, 0.0))
        return out
