"""The journal's state markers: the newest batch planned, the newest acknowledged, the offset
first handed to Spark. Runs on: driver (driver/state.py ``StateMarkers`` holds what the lease
holder wrote).

Keys::

    state/planned-<N>        the newest batches numbered (the newest PLANNED_MARKERS_KEPT stay),
                             naming the run that numbered them
    state/acked-<N>          a batch acknowledged, naming the live dedupe records, with the
                             batch's counters (``metrics``); the newest ACKED_MARKERS_KEPT stay
                             (journal/metrics.py reads them); the newest one is the state
    state/initial.json       the batch the journal's first offset named
    state/initial-<N>        an earlier version's initial marker (read, never written)
    state/retired-<N>        an earlier version's retirement of batch N (converted at start to
                             the batch's own ``_retired.json``, then removed)
    _state.json              format 1's state, one overwritten file (read, never written)

Every marker is created once (numbers only grow) and older ones are removed once a newer one
exists, so a driver that dies between two writes leaves a state that is behind, never ahead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import JournalInUseError
from .dedupe import Dedupe
from .stores import JournalRoot, Record

PREFIX = "state"
INITIAL = "state/initial.json"
_MARKER = re.compile(r"^state/(planned|acked|initial|retired)-(\d{12})$")
# How many of the newest planned markers are kept (State.write): all of the newest ones exist,
# which a stalled window segment writer relies on to find the newest number by key (window.py).
PLANNED_MARKERS_KEPT = 16
# How many of the newest acknowledged markers are kept: they hold the counters of their batches
# (``spark-sqs inspect``'s recent batches, ``Journal.metrics``), so older ones go by key as each
# new one is written, with no LIST.
ACKED_MARKERS_KEPT = 100
# How often a listing whose markers all vanished is taken again (State.read).
_RELISTS = 3


@dataclass(frozen=True)
class JournalState:
    planned_batch: int = 0
    acked_batch: int = 0
    # The offset first handed to Spark as initialOffset. Spark asks for it again when it
    # restarts a query whose first batch never committed, and must get the same answer.
    initial_batch: int | None = None
    # Retirement markers of an earlier version (``state/retired-<N>``), converted at start to
    # the batches' own markers (``State.retire_legacy``).
    retired: frozenset[int] = frozenset()


class _Plans(Protocol):
    def exists(self, batch: int) -> bool: ...


class _Batches(Protocol):
    def retire(self, batch: int) -> None: ...


class State(Record):
    def __init__(
        self, journal: JournalRoot, dedupe: Dedupe, plans: _Plans, batches: _Batches
    ) -> None:
        super().__init__(journal)
        self._dedupe = dedupe
        self._plans = plans
        self._batches = batches
        # Acknowledged markers the last ``read`` listed that are older than the kept ones (a
        # driver that died between a marker's create and its predecessor's delete, or an
        # earlier version): removed by key with the next acknowledged marker.
        self._stale_acked: list[int] = []

    def read(self) -> JournalState:
        """The state, from its markers: a LIST finds the newest of each kind, then both are
        confirmed by key. Planned markers are numbered densely: the following numbers are read
        (a listing that lags a write must not make a batch number be handed out twice).
        Acknowledged markers are not dense (adopted and reserved numbers have none), so every
        number from the newest planned one down to the newest listed acknowledged one is read
        until one exists: a listing that lags the newest acknowledged marker must not make a
        batch acknowledged (its plan not removed yet by a driver that died) pending again,
        nor hide the dedupe records that marker names."""
        found: dict[str, list[int]] = {"planned": [], "acked": [], "initial": [], "retired": []}
        for key in self.store.list(PREFIX):
            match = _MARKER.match(key)
            if match:
                found[match.group(1)].append(int(match.group(2)))
        legacy = None if any(found.values()) else self.store.read("_state.json")
        if legacy is not None:
            # A journal of format 1 kept its state in one overwritten file.
            doc = json.loads(legacy)
            initial = doc.get("initialBatch")
            return JournalState(
                int(doc.get("plannedBatch", 0)),
                int(doc.get("ackedBatch", 0)),
                None if initial is None else int(initial),
            )
        # A listing may also lag a delete (a journal deleted and started anew): the newest
        # listed marker counts only once read by key.
        planned = self._newest_marker("planned", found["planned"])
        while self.store.read(f"{PREFIX}/planned-{planned + 1:012d}") is not None:
            planned += 1
        initial_doc = self.store.read(INITIAL)
        initial = (
            int(json.loads(initial_doc)["batch"])
            if initial_doc is not None
            else min(found["initial"], default=None)
        )
        acked, body = self._newest_acked(found["acked"], planned)
        self._stale_acked = [n for n in found["acked"] if n <= acked - ACKED_MARKERS_KEPT]
        # Markers of earlier versions are empty, or name records without what they had left.
        doc = json.loads(body) if body else {}
        left = doc.get("dedupeLeft", {})
        self._dedupe.named = {key: left.get(key) for key in doc.get("dedupe", ())}
        return JournalState(planned, acked, initial, frozenset(found["retired"]))

    def _newest_acked(self, listed: list[int], planned: int) -> tuple[int, bytes | None]:
        """The newest acknowledged marker that exists, with its body: the newest listed one
        that exists, or a newer one up to ``planned`` (read by key, the newest first: a read for
        each number above the newest listed one, usually the one or two batches a stopped
        query left unacknowledged)."""
        below = self._newest_marker("acked", listed)
        for number in range(planned, below, -1):
            body = self.store.read(f"{PREFIX}/acked-{number:012d}")
            if body is not None:
                return number, body
        return below, self.store.read(f"{PREFIX}/acked-{below:012d}") if below else None

    def _newest_marker(self, kind: str, listed: list[int]) -> int:
        """The newest of the listed ``kind`` markers that exists when read by key (0 if none):
        a marker is removed only once a newer one exists, so the newest that exists is the
        first one read. When every listed one is gone (removed after the listing, as newer ones
        were written), the markers are listed again."""
        for _ in range(_RELISTS):
            for number in sorted(listed, reverse=True):
                if self.store.read(f"{PREFIX}/{kind}-{number:012d}") is not None:
                    return number
            if not listed:
                return 0
            listed = [
                int(m.group(2))
                for key in self.store.list(PREFIX)
                if (m := _MARKER.match(key)) and m.group(1) == kind
            ]
        return 0

    def write(
        self,
        state: JournalState,
        known: JournalState | None = None,
        owner: str = "",
        metrics: dict[str, Any] | None = None,
    ) -> None:
        """Advance the state to ``state``: markers are only ever added (numbers only grow), and
        markers below the newest are removed once the newer one exists. A planned marker names
        the run that handed the number out (``owner``): a number another run created first
        is never handed out again (``JournalInUseError``). An acknowledged marker holds the
        batch's counters (``metrics``, journal/metrics.py): create-if-absent like every
        marker, so a retried create whose first answer was lost leaves the first counters."""
        current = known if known is not None else self.read()
        new, old = state.planned_batch, current.planned_batch
        if new > old:
            key = f"{PREFIX}/planned-{new:012d}"
            if not self.store.create(key, json.dumps({"owner": owner}).encode()):
                data = self.store.read(key)
                theirs = json.loads(data).get("owner", "") if data else ""
                # An empty marker is an earlier version's; our own is a retried create whose
                # answer was lost.
                if data is None or theirs != owner:
                    raise JournalInUseError(
                        f"journalLocation {self.location}: batch {new} was numbered by "
                        f"another query ({theirs or 'unknown'}) while this one was paused or "
                        "partitioned: a journal belongs to one query at a time. Fix: stop the "
                        "other query, or give this query its own 'journalLocation'"
                    )
            # The newest planned markers stay, so that a listing that lags by fewer batches
            # still shows one of them, and ``read`` reads on from it by key.
            for gone in range(
                max(1, old - PLANNED_MARKERS_KEPT + 1), new - PLANNED_MARKERS_KEPT + 1
            ):
                self.store.delete(f"{PREFIX}/planned-{gone:012d}")
        new, old = state.acked_batch, current.acked_batch
        if new > old:
            # The dedupe records live now, read by key at the next start (``Dedupe.read``):
            # a listing that lags their write must not hide them.
            # Each with the seconds it has left (a duration, judged by no other clock): a
            # restart keeps it no longer, so records of a query restarted often still go.
            left = self._dedupe.left()
            doc: dict[str, Any] = {"dedupe": sorted(left), "dedupeLeft": left}
            if metrics is not None:
                doc["metrics"] = metrics
            self.store.create(f"{PREFIX}/acked-{new:012d}", json.dumps(doc).encode())
            # The newest ACKED_MARKERS_KEPT stay (they hold the counters); older ones go by key.
            gone = [*range(max(1, old - ACKED_MARKERS_KEPT + 1), new - ACKED_MARKERS_KEPT + 1)]
            gone += [n for n in self._stale_acked if n <= new - ACKED_MARKERS_KEPT]
            self._stale_acked = []
            for number in sorted(set(gone)):
                self.store.delete(f"{PREFIX}/acked-{number:012d}")
        if current.initial_batch is None and state.initial_batch is not None:
            self.store.create(INITIAL, json.dumps({"batch": state.initial_batch}).encode())

    def retire_legacy(self, retired: Iterable[int]) -> None:
        """Retirement markers of an earlier version (``state/retired-<N>``) become the batches'
        own (``_retired.json``), which attempts read by key."""
        for batch in retired:
            if self._plans.exists(batch):
                self._batches.retire(batch)
            self.store.delete(f"{PREFIX}/retired-{batch:012d}")
