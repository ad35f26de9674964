"""Counters of acknowledged batches, kept for ``spark-sqs inspect`` and monitoring. Runs on:
driver.

Keys::

    metrics/<N>.json    counters of acknowledged batch N (the newest 100 are kept); the only
                        records written by ``put`` (overwritten): no decision depends on them
"""

from __future__ import annotations

import json
from typing import Any

from .stores import Record

PREFIX = "metrics"


class Metrics(Record):
    def write(
        self, batch: int, metrics: dict[str, Any], keep: int = 100, prune_every: int = 10
    ) -> None:
        """Counters of an acknowledged batch, as ``metrics/<batch>.json``; the newest ``keep``
        batches are kept, pruned on every ``prune_every``-th batch (the LIST it takes is not
        worth paying every batch: until then, a few more files stay)."""
        self.store.put(f"{PREFIX}/{batch:012d}.json", json.dumps(metrics, sort_keys=True).encode())
        if batch % max(1, prune_every):
            return
        old = [k for k in self.store.list(PREFIX) if k.endswith(".json")]
        for stale in old[:-keep]:
            self.store.delete(stale)

    def read(self) -> list[dict[str, Any]]:
        out = []
        for key in self.store.list(PREFIX):
            data = self.store.read(key) if key.endswith(".json") else None
            if data is not None:
                out.append(json.loads(data))
        return out
