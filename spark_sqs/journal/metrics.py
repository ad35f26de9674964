"""Counters of acknowledged batches, kept for ``spark-sqs inspect`` and monitoring. Runs on:
driver.

Each acknowledged batch's counters are part of its acknowledged marker's body
(``state/acked-<N>``, ``{"dedupe": [...], "metrics": {...}}``, written by journal/state.py, whose
newest ``ACKED_MARKERS_KEPT`` stay): one create-if-absent that the acknowledgement makes anyway,
so counters cost no request of their own. An earlier version wrote them apart, overwritten; those
are read until the newest kept markers are all newer, and then removed by the sweep.

Keys::

    metrics/<N>.json    an earlier version's counters of acknowledged batch N (read, removed once
                        older than the kept markers, never written)
"""

from __future__ import annotations

import json
import re
from typing import Any

from .state import ACKED_MARKERS_KEPT
from .state import PREFIX as STATE_PREFIX
from .stores import Record

PREFIX = "metrics"
_ACKED = re.compile(rf"^{STATE_PREFIX}/acked-(\d{{12}})$")
_LEGACY = re.compile(rf"^{PREFIX}/(\d+)\.json$")


class Metrics(Record):
    def read(self) -> list[dict[str, Any]]:
        """The counters of the newest ``ACKED_MARKERS_KEPT`` acknowledged batches, oldest first:
        from their acknowledged markers, and from an earlier version's ``metrics/`` files for
        batches whose marker holds none (a marker wins over a file of the same batch)."""
        found: dict[int, dict[str, Any]] = {}
        for key in self.store.list(PREFIX):
            batch = _legacy_batch(key)
            if batch is not None and (data := self.store.read(key)) is not None:
                found[batch] = json.loads(data)
        for key in self.store.list(STATE_PREFIX):
            match = _ACKED.match(key)
            data = self.store.read(key) if match else None
            # An earlier version's markers are empty or hold no counters.
            doc = json.loads(data) if data else {}
            if match and isinstance(doc.get("metrics"), dict):
                found[int(match.group(1))] = doc["metrics"]
        return [found[b] for b in sorted(found)[-ACKED_MARKERS_KEPT:]]

    def collect_legacy(self, acked: int) -> bool:
        """Remove an earlier version's ``metrics/`` files older than the kept acknowledged
        markers (one LIST); True while some remain (a later sweep lists again), False once the
        prefix holds none, so a journal that never had them is listed once a run."""
        keys = {k: b for k in self.store.list(PREFIX) if (b := _legacy_batch(k)) is not None}
        old = [k for k, b in keys.items() if b <= acked - ACKED_MARKERS_KEPT]
        if old:
            self.store.delete_many(old)
        return len(old) < len(keys)


def _legacy_batch(key: str) -> int | None:
    match = _LEGACY.match(key)
    return int(match.group(1)) if match else None
