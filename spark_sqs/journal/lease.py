"""One live query per journal. Runs on: driver.

A query owns its journal through a lease: a sequence of ``lease/<seq>.json`` records, each
created if absent. The owner creates the next record at every heartbeat interval; whoever
creates record ``seq`` owns the journal from then on, so two drivers can never both renew (the
store decides, not a read followed by a write).

At start, a query that finds a record of another run newer than two heartbeat intervals (by the
wall clock) watches it for up to two intervals: a renewal means the other query is alive and
this one stops with an error naming ``journalLocation``; none means its driver died and this one
takes over. A query that finds its lease taken over stops at the next batch boundary. A query
stopped with SIGTERM (``query.stop()``) writes a released record, so its restart does not wait.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import JournalInUseError
from .stores import JournalStore

logger = logging.getLogger(__name__)

_RECORD = re.compile(r"^lease/(\d{12})\.json$")


@dataclass(frozen=True)
class LeaseRecord:
    seq: int
    owner: str
    written_at: float
    released: bool = False
    interval: float = 0.0  # the owner's renewal interval


class Lease:
    def __init__(
        self,
        store: JournalStore,
        location: str,
        owner: str,
        interval: float,
        *,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._store = store
        self._location = location
        self.owner = owner
        self._interval = interval
        self._wall = wall_clock
        self._clock = clock
        self._sleep = sleep
        self.seq: int | None = None

    def newest(self) -> LeaseRecord | None:
        keys = [k for k in self._store.list("lease") if _RECORD.match(k)]
        for key in reversed(keys):
            data = self._store.read(key)
            if data is not None:
                doc = json.loads(data)
                return LeaseRecord(
                    int(_RECORD.match(key).group(1)),  # type: ignore[union-attr]
                    doc["owner"],
                    float(doc["writtenAt"]),
                    bool(doc.get("released")),
                    float(doc.get("interval", 0.0)),
                )
        return None

    def acquire(self) -> None:
        """Take the journal, waiting at most two intervals for a silent owner to lapse."""
        current = self.newest()
        if current is not None and current.owner != self.owner and not current.released:
            age = self._wall() - current.written_at
            # The owner renews at its own interval, which a restart with other options may
            # have made longer than ours.
            if age < 2 * max(self._interval, current.interval):
                current = self._wait_for_lapse(current)
        seq = 0 if current is None else current.seq + 1
        if not self._write(seq):
            newest = self.newest()
            # A retried PUT whose first answer was lost finds its own record.
            if newest is None or newest.seq != seq or newest.owner != self.owner:
                self._raise_in_use(newest)
        self.seq = seq
        logger.info("journal %s: lease %d taken by run %s", self._location, seq, self.owner)

    def _wait_for_lapse(self, seen: LeaseRecord) -> LeaseRecord:
        wait = 2 * max(self._interval, seen.interval)
        logger.warning(
            "journal %s was renewed %.0fs ago by run %s; waiting up to %.0fs to tell whether "
            "that query is still running",
            self._location,
            self._wall() - seen.written_at,
            seen.owner,
            wait,
        )
        deadline = self._clock() + wait
        while self._clock() < deadline:
            self._sleep(min(1.0, self._interval / 4))
            newest = self.newest()
            if newest is not None and newest.seq > seen.seq:
                if newest.released:
                    return newest
                self._raise_in_use(newest)
        logger.warning(
            "journal %s: run %s did not renew its lease; taking over", self._location, seen.owner
        )
        return seen

    def renew(self) -> None:
        """Create the next record; raises ``JournalInUseError`` if another run took over."""
        assert self.seq is not None
        seq = self.seq + 1
        if not self._write(seq):
            newest = self.newest()
            if newest is None or newest.owner != self.owner:
                self._raise_in_use(newest, taken=True)
        self.seq = seq
        # Two records are enough for anyone to see the sequence move.
        if seq >= 2:
            self._store.delete(f"lease/{seq - 2:012d}.json")

    def release(self) -> None:
        if self.seq is None:
            return
        self._write(self.seq + 1, released=True)
        self.seq = None

    def _write(self, seq: int, released: bool = False) -> bool:
        doc = {
            "owner": self.owner,
            "writtenAt": self._wall(),
            "released": released,
            "interval": self._interval,
        }
        return self._store.create(f"lease/{seq:012d}.json", json.dumps(doc).encode())

    def _raise_in_use(self, record: LeaseRecord | None, taken: bool = False) -> None:
        who = f"run {record.owner}" if record is not None else "another run"
        what = "took over" if taken else "is using"
        raise JournalInUseError(
            f"Another query ({who}) {what} journalLocation {self._location}: a journal belongs "
            "to one query at a time. Fix: stop the other query, or give this query its own "
            "'journalLocation' (like its own checkpointLocation)"
        )
