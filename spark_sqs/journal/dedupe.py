"""Redelivery dedupe: ids whose acknowledgement may not have taken effect (a delete whose
outcome is unknown, or made with a handle that may have expired), dropped if SQS delivers them
again before they expire. Runs on: driver (writes at acknowledgement, reads at start) and
executors (receivers acknowledging their share write them).

Keys::

    dedupe/<N>-<digest>.arrow   ids of batch N whose acknowledgement is uncertain, with their
                                expiry in the schema metadata; the newest acknowledged marker
                                (state.py) names the live ones, so a start reads them by key
"""

from __future__ import annotations

import hashlib

import pyarrow as pa

from .stores import JournalRoot, Record, ipc_bytes

PREFIX = "dedupe"
# Schema metadata of a dedupe record: when its ids may be forgotten (epoch seconds).
EXPIRES_AT = b"spark_sqs.expiresAt"


class Dedupe(Record):
    def __init__(self, journal: JournalRoot) -> None:
        super().__init__(journal)
        # Dedupe records this process knows to be live (read at start, written since): the
        # newest acknowledged marker names them, so that a start reads them by key.
        self.keys: dict[str, float] = {}
        # The dedupe records the newest acknowledged marker named when the state was read.
        self.named: list[str] = []

    def write(
        self, batch: int, message_ids: list[str], expires_at: float, now: float | None = None
    ) -> None:
        """Remember ids whose acknowledgement may not have taken effect until ``expires_at``.
        ``now``: records that expired by then are no longer named by new markers."""
        table = pa.table({"messageId": pa.array(sorted(message_ids), pa.string())})
        table = table.replace_schema_metadata({EXPIRES_AT: repr(expires_at)})
        data = ipc_bytes(table)
        digest = hashlib.sha256(data).hexdigest()[:16]
        key = f"{PREFIX}/{batch:012d}-{digest}.arrow"
        self.store.create(key, data)
        # Before the batch's acknowledged marker, which names it.
        self.keys[key] = expires_at
        if now is not None:
            self.keys = {k: e for k, e in self.keys.items() if e > now}

    def read(self, now: float) -> dict[str, float]:
        """Unexpired dedupe ids with their expiry; expired records are removed. The records
        are those the newest acknowledged marker names (read by key: ``state.read`` must have
        run), and those a LIST finds (an earlier version's, whose markers name none)."""
        out: dict[str, float] = {}
        keys = {*self.named, *self.keys, *self.store.list(PREFIX)}
        for key in sorted(keys):
            if not key.endswith(".arrow"):
                continue
            data = self.store.read(key)
            if data is None:
                self.keys.pop(key, None)
                continue
            reader = pa.ipc.open_file(pa.BufferReader(data))
            expires = float((reader.schema.metadata or {}).get(EXPIRES_AT, b"0"))
            if expires <= now:
                self.store.delete(key)
                self.keys.pop(key, None)
                continue
            self.keys[key] = expires
            for message_id in reader.read_all().column("messageId").to_pylist():
                out[message_id] = max(expires, out.get(message_id, 0.0))
        return out
