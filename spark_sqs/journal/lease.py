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

Records are deleted to keep the journal small (each renewal removes every record below its
previous one), and a deleted key can be created again. Two rules keep the sequence sound anyway:
a record is deleted only once a newer one exists, so a record that vanished between a listing
and its read means "list again", never "no lease"; and whoever creates record ``seq`` checks
that no newer record exists: if one does, ``seq`` had been renewed past and deleted, and the
create only filled a hole (a claim on a journal someone else owns).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import JournalError, JournalInUseError
from .stores import JournalStore

logger = logging.getLogger(__name__)

_RECORD = re.compile(r"^lease/(\d{12})\.json$")
# How often ``newest`` lists again when the newest record vanished before it could be read (a
# renewal deleted it): each retry needs two more renewals in between, so a few are plenty.
_RELISTS = 8
# How often ``acquire`` starts over after its record turned out to fill a hole.
_CLAIMS = 4


def _key(seq: int) -> str:
    return f"lease/{seq:012d}.json"


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
        for _ in range(_RELISTS):
            seqs = self._seqs()
            if not seqs:
                return None
            data = self._store.read(_key(seqs[-1]))
            if data is not None:
                doc = json.loads(data)
                return LeaseRecord(
                    seqs[-1],
                    doc["owner"],
                    float(doc["writtenAt"]),
                    bool(doc.get("released")),
                    float(doc.get("interval", 0.0)),
                )
            # Deleted since the listing: a newer record exists now (falling back to an older
            # record, or to "none", would let this query claim a journal that is in use).
        raise JournalError(
            f"journal {self._location}: the lease records kept changing while being read",
            retriable=True,
        )

    def _seqs(self) -> list[int]:
        return sorted(int(m.group(1)) for m in map(_RECORD.match, self._store.list("lease")) if m)

    def acquire(self) -> None:
        """Take the journal, waiting at most two intervals for a silent owner to lapse."""
        for _ in range(_CLAIMS):
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
            listed = self._listing_if_newest(seq)
            if listed is not None:
                self.seq = seq
                self._collect(seq, listed)
                logger.info("journal %s: lease %d taken by run %s", self._location, seq, self.owner)
                return
            # A newer record exists: what this query read was renewed past (and deleted) before
            # its create, which only filled a hole. Look again; the owner's GC removes the hole.
            logger.info(
                "journal %s: lease %d was renewed past while being taken; looking again",
                self._location,
                seq,
            )
        self._raise_in_use(self.newest())

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
        listed = self._listing_if_newest(seq)
        if listed is None:
            # A run that took over has renewed past seq and deleted it (this query paused for
            # longer than two intervals): the create filled a hole, it did not renew.
            self._raise_in_use(self.newest(), taken=True)
        self.seq = seq
        self._collect(seq, listed)

    def _listing_if_newest(self, seq: int) -> list[int] | None:
        """The records listed now if none is newer than ``seq``, else None."""
        seqs = self._seqs()
        return None if seqs and seqs[-1] > seq else seqs

    def _collect(self, seq: int, seqs: list[int]) -> None:
        """Delete the records below ``seq - 1``: two are enough for anyone to see the sequence
        move; a crashed run's records and filled holes go too. Best effort: what a failed
        delete leaves, the next renewal removes."""
        try:
            for old in seqs:
                if old >= seq - 1:
                    break
                self._store.delete(_key(old))
        except Exception:
            logger.debug("journal %s: could not delete old lease records", self._location)

    def release(self) -> None:
        if self.seq is None:
            return
        seq = self.seq + 1
        self._write(seq, released=True)
        self.seq = None
        try:
            # What a renewal cut short by the stop left behind.
            self._collect(seq, self._seqs())
        except Exception:
            logger.debug("journal %s: could not list the lease records", self._location)

    def _write(self, seq: int, released: bool = False) -> bool:
        doc = {
            "owner": self.owner,
            "writtenAt": self._wall(),
            "released": released,
            "interval": self._interval,
        }
        return self._store.create(_key(seq), json.dumps(doc).encode())

    def _raise_in_use(self, record: LeaseRecord | None, taken: bool = False) -> None:
        who = f"run {record.owner}" if record is not None else "another run"
        what = "took over" if taken else "is using"
        raise JournalInUseError(
            f"Another query ({who}) {what} journalLocation {self._location}: a journal belongs "
            "to one query at a time. Fix: stop the other query, or give this query its own "
            "'journalLocation' (like its own checkpointLocation)"
        )
