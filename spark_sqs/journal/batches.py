"""A batch's life in the journal: live, retired, removed. Runs on: driver and executors.

Keys::

    batches/<N>/_retired.json    empty: the batch was adopted by a later one

(the other files under ``batches/<N>/`` are plans.py's, entries.py's and poison.py's)

A batch is live while its plan (or, for a batch of carried messages, its carry record; for a
released batch whose plan a crashed release left missing, its release record) exists. Removal
deletes those first, so a batch whose removal a crash cut short is never live again: what is
left is garbage, removed when found. An orphan that a later batch adopts is *retired* first
(``_retired.json``): attempts of it stop before they delete or keep anything, while it stays
live until every copy exists.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .stores import JournalRoot, Record

logger = logging.getLogger(__name__)

PREFIX = "batches"
RETIRED = "_retired.json"
_BATCH_KEY = re.compile(r"^batches/(\d{12})/")
# Batches.status
LIVE, RETIRED_STATUS, REMOVED = "live", "retired", "removed"


def batch_dir(batch: int) -> str:
    return f"{PREFIX}/{batch:012d}"


class _Plan(Protocol):
    """A batch's plan (plans.py ``BatchPlan``), as far as its receivers go."""

    @property
    def receivers(self) -> Sequence[Any]: ...


class _Plans(Protocol):
    """What a batch's life reads of its plan (plans.py ``Plans``)."""

    def exists(self, batch: int) -> bool: ...
    def read(self, batch: int) -> _Plan | None: ...
    def remove(self, batch: int) -> None: ...


class _Poison(Protocol):
    """What it reads of the poison records (poison.py ``PoisonRecords``)."""

    def is_carry(self, batch: int) -> bool: ...
    def is_released(self, batch: int) -> bool: ...
    def released_plan(self, batch: int) -> _Plan | None: ...
    def carry_receivers(self, batch: int) -> tuple[int, ...] | None: ...
    def remove_markers(self, batch: int) -> None: ...


class _Window(Protocol):
    """What a removal asks of the duplicate window (window.py ``Window``)."""

    def before_removal(
        self, batch: int, receivers: Callable[[], Sequence[int] | None], probed: bool = False
    ) -> None: ...


class Batches(Record):
    def __init__(
        self, journal: JournalRoot, plans: _Plans, poison: _Poison, window: _Window | None = None
    ) -> None:
        super().__init__(journal)
        self._plans = plans
        self._poison = poison
        self._window = window

    def files(self, batch: int) -> list[str]:
        """Base names of the files of ``batch`` (one LIST)."""
        prefix = batch_dir(batch) + "/"
        return [k[len(prefix) :] for k in self.store.list(batch_dir(batch))]

    def retire(self, batch: int) -> None:
        """Mark an orphaned batch as delivered by a later one, before its entries are read for
        adoption: an attempt of it that journals later stops without deleting."""
        self.store.create(f"{batch_dir(batch)}/{RETIRED}", b"")

    def status(self, batch: int, plan_id: str | None = None) -> str:
        """``"live"``, ``"retired"`` (adopted by a later batch: an attempt stops, deleting
        nothing and keeping what it journaled for the adoption) or ``"removed"`` (acknowledged
        and removed, or adopted and removed: its plan is gone, and every attempt of a planned
        batch read its plan when it started). Two reads (four for a batch without a plan).

        The retirement marker is read first: a batch goes live, retired (the marker), removed
        (the plan first, the marker last), so a plan read after a marker that was absent means
        the batch was not retired before the first read, and anything journaled before it is
        seen by any adoption or acknowledgement after it. The other order could read the plan
        before a removal and the marker after it, and answer "live" for a removed batch.

        ``plan_id``: the identity of the plan the caller's attempt belongs to: a plan of the
        batch with another identity was created after that one was removed (by a driver that
        lost the journal while paused, planning a batch another query adopted): "removed"."""
        retired = self.store.read(f"{batch_dir(batch)}/{RETIRED}") is not None
        if plan_id is not None:
            plan = self._plans.read(batch)
            if plan is not None and plan.plan_id not in (None, plan_id):
                return REMOVED
            planned = plan is not None
        else:
            planned = self._plans.exists(batch)
        if not planned:
            # A batch of carried messages has no plan, nor has a released batch whose plan a
            # crashed release left missing: both are live (``live_receivers``).
            if not self._poison.is_carry(batch) and not self._poison.is_released(batch):
                return REMOVED
        return RETIRED_STATUS if retired else LIVE

    def plan_and_retirement(self, batch: int) -> tuple[_Plan | None, bool]:
        """The stored plan of ``batch`` (None if it has none) and whether it is retired, in
        ``status``'s order: the retirement marker first, then the plan, read whole instead of
        for its existence. A receiver starting its task reads both at once (two reads, not a
        plan read and then ``status``'s two); with a plan, retired is ``status``'s "retired"
        and not retired its "live"."""
        retired = self.store.read(f"{batch_dir(batch)}/{RETIRED}") is not None
        return self._plans.read(batch), retired

    def is_finished(self, batch: int) -> bool:
        """True if no attempt of ``batch`` may journal, keep or delete anything any more."""
        return self.status(batch) != LIVE

    def list(self) -> list[int]:
        """Batches with files in the journal (one LIST of ``batches/``). Discovery of garbage
        only: which batches are live is read by key (``StateMarkers``, the driver's start)."""
        return sorted(
            {int(m.group(1)) for k in self.store.list(PREFIX) if (m := _BATCH_KEY.match(k))}
        )

    def live_receivers(self, batch: int) -> tuple[int, ...] | None:
        """The receivers of ``batch`` if it is live, by key: those its plan names; for a batch
        of messages carried out of a narrowed batch (no plan), those its carry record names;
        for a released batch whose plan a crashed release left missing, its zero plan's. None
        if the batch is not live (never planned, or acknowledged or adopted and removed)."""
        plan = self._plans.read(batch) or self._poison.released_plan(batch)
        if plan is not None:
            return tuple(r.receiver for r in plan.receivers)
        return self._poison.carry_receivers(batch)

    def remove(
        self,
        batch: int,
        also: Sequence[str] = (),
        files: Sequence[str] | None = None,
        probed: bool = False,
    ) -> None:
        """Remove the files of ``batch``: first what makes it live (plan, carry and release
        records), by key, then the rest in one ``delete_many`` (a few keys: free single deletes
        on S3; more: one multi-object delete). ``files``: the base names its receivers are
        known to write (entries, extension markers: ``Entries.names``),
        removed by key with the retirement record, without a LIST; files a batch holds only
        when something went wrong (parts, attempt and poison records, a straggler's writes
        after the removal) are then left to ``collect``. Without it, one LIST finds them (what
        it misses is garbage that a sweep removes). ``also``: other keys that go in the same
        ``delete_many`` (the acknowledgement reports the settlement read: nothing reads
        them after the acked marker). On the driver the duplicate window seals the batch first
        (window.py): readers of a batch with no plan read its seal; ``probed``: the batch's
        sealer is known to have finished (window.py ``Window.before_removal``)."""
        if self._window is not None:
            self._window.before_removal(batch, lambda: self.live_receivers(batch), probed)
        self._plans.remove(batch)
        self._poison.remove_markers(batch)
        names = self.files(batch) if files is None else [*files, RETIRED]
        self.store.delete_many([f"{batch_dir(batch)}/{n}" for n in names] + list(also))

    def collect(self, below: int) -> int:
        """Remove the files left of batches before ``below`` (every one acknowledged or
        retired) that are not live by key: what a by-key removal leaves (parts, attempt and
        poison records, writes of stragglers after their batch's removal) and what a removal
        a crash cut short left. One LIST of ``batches/``; best effort (storage only). Returns
        how many batches were removed."""
        try:
            done = [b for b in self.list() if b < below and self.live_receivers(b) is None]
            for batch in done:
                self.remove(batch)
        except Exception:
            # Storage, not correctness: the next sweep tries again.
            logger.warning(
                "journal %s: could not remove files of finished batches",
                self.location,
                exc_info=True,
            )
            return 0
        return len(done)
