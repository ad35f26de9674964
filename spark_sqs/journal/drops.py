"""Drop sets: the ids a planned batch's receivers drop (redeliveries of messages that pending
batches journaled). Runs on: driver (writes, collects) and executors (read).

Keys::

    drops/<N>-<sha256>.arrow    a drop set of batch N (by content), referenced by its plan or by
                                the partitions of its replay
    drops/<sha256>.arrow        an earlier version's, without the batch (removed once no stored
                                plan names it)
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from ..errors import JournalError
from .stores import JournalRoot, Record, ipc_bytes, ipc_table

if TYPE_CHECKING:
    from .plans import BatchPlan

logger = logging.getLogger(__name__)

PREFIX = "drops"
_DROPS = re.compile(r"^drops/(?:(\d{12})-)?([0-9a-f]{64})\.arrow$")


def _key(digest: str) -> str:
    return f"{PREFIX}/{digest}.arrow"


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


class _Plans(Protocol):
    def read(self, batch: int) -> BatchPlan | None: ...


class _Batches(Protocol):
    def list(self) -> list[int]: ...


class Drops(Record):
    """Drop sets, written once per batch, read by digest (cached per process)."""

    def __init__(self, journal: JournalRoot, plans: _Plans, batches: _Batches) -> None:
        super().__init__(journal)
        self._plans = plans
        self._batches = batches

    def write(self, message_ids: frozenset[str], batch: int | None = None) -> str | None:
        """Store a drop set once, under its batch and digest; None for an empty set."""
        if not message_ids:
            return None
        ordered = sorted(message_ids)
        digest = hashlib.sha256("\n".join(ordered).encode()).hexdigest()
        if batch is not None:
            # The batch in the name tells collect when no attempt can need it any more.
            digest = f"{batch:012d}-{digest}"
        table = pa.table({"messageId": pa.array(ordered, pa.string())})
        self.store.create(_key(digest), ipc_bytes(table))
        _DROPS_CACHE.put(digest, frozenset(ordered))
        return digest

    def read(self, digest: str | None) -> frozenset[str]:
        if digest is None:
            return frozenset()
        cached = _DROPS_CACHE.get(digest)
        if cached is not None:
            return cached
        key = _key(digest)
        data = self.store.read(key)
        if data is None:
            raise JournalError(
                f"The drop set {key} of a planned batch is missing from {self.location}. Fix: "
                "if journalLocation is a local path, every executor must see the same files: "
                "use an s3:// location on a cluster"
            )
        ids = frozenset(ipc_table(data, key).column("messageId").to_pylist())
        _DROPS_CACHE.put(digest, ids)
        return ids

    def collect(self, oldest_pending: int) -> int:
        """Remove the drop sets of batches before ``oldest_pending`` (every batch before it is
        acknowledged or retired): no plan of a pending batch, nor the partitions of a replay of
        one, names them. A straggling attempt of such a batch stops at its acknowledgement check;
        one that passed it just before finds its drop set gone and fails, and Spark drops a
        failed attempt of a finished task. Drop sets named by an earlier version (no batch)
        go once no stored plan names them. Returns how many were removed."""
        try:
            old: list[str] = []
            legacy: list[str] = []
            for key in self.store.list(PREFIX):
                match = _DROPS.match(key)
                if match is None:
                    continue
                if match.group(1) is None:
                    legacy.append(key)
                elif int(match.group(1)) < oldest_pending:
                    old.append(key)
            if legacy:
                named = {
                    _key(plan.drops)
                    for plan in map(self._plans.read, self._batches.list())
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
