"""The journal's state markers as the driver that holds the lease knows them. Runs on: driver.

The state is three numbers kept as marker objects (``journal.state``, journal/state.py):
the newest batch planned (confirmed by key: numbers are never handed out twice), the newest
acknowledged (confirmed by key too: a listing that lags the newest marker must not make an
acknowledged batch pending again), and the offset first handed to Spark.
Markers are only ever added, so a driver that dies between two writes leaves a state that is
behind, never ahead. Only the lease holder advances them; it reads them once at start and then
writes through this object, which remembers what it wrote instead of listing again.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..journal import Journal, JournalState

logger = logging.getLogger(__name__)


class StateMarkers:
    def __init__(self, journal: Journal, owner: str = "") -> None:
        self._journal = journal
        # The run that writes the markers: named in each planned marker (``State.write``).
        self.owner = owner
        current = journal.state.read()
        if current.retired:
            # An earlier version kept retirements in the state; they are the batches' own now.
            journal.state.retire_legacy(current.retired)
            current = replace(current, retired=frozenset())
        self.current: JournalState = current

    @property
    def planned(self) -> int:
        return self.current.planned_batch

    @property
    def acked(self) -> int:
        return self.current.acked_batch

    @property
    def initial(self) -> int | None:
        return self.current.initial_batch

    def advance(
        self,
        *,
        planned: int | None = None,
        acked: int | None = None,
        initial: int | None = None,
        metrics: dict[str, Any] | None = None,
    ) -> None:
        """Record the given numbers; a number that is not newer than the known one is kept.
        Each marker is created before the older one is removed (``State.write``); ``metrics``:
        the counters of batch ``acked``, written in its marker."""
        known = self.current
        state = replace(
            known,
            planned_batch=known.planned_batch if planned is None else planned,
            acked_batch=known.acked_batch if acked is None else acked,
            initial_batch=known.initial_batch if initial is None else initial,
        )
        self._journal.state.write(state, known=known, owner=self.owner, metrics=metrics)
        self.current = state
        logger.debug(
            "journal state: planned %d, acknowledged %d", state.planned_batch, state.acked_batch
        )

    def reserve_batch(self) -> int:
        """A new batch number that no plan will take: planned is advanced past it first."""
        new = self.current.planned_batch + 1
        self.advance(planned=new)
        return new
