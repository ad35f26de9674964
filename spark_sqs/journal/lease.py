"""One live query per journal. Runs on: driver.

A query owns its journal through a lease: a sequence of ``lease/<seq>.json`` records, each
created if absent. The owner creates the next record at every heartbeat interval; whoever
creates record ``seq`` owns the journal from then on, so two drivers can never both renew (the
store decides, not a read followed by a write).

Liveness is judged by watching, never by comparing clocks: a starting query that finds a record
of another run that is not released watches it for two of the owner's intervals on its own
monotonic clock. A renewal means the other query is alive, and this one stops with an error
naming ``journalLocation``; none means its driver died (or is paused for longer than that), and
this one takes over. The record's ``writtenAt`` (the owner's wall clock) is never compared with
anything. A query stopped with SIGTERM (``query.stop()``) writes a released record, so its
restart does not wait.

The owner confirms that it still holds the lease before every acknowledgement and delete
(``confirm``): if its last renewal is older than one interval on its own monotonic clock (a GC
pause, a frozen VM, a slow store), it renews first, and a renewal that finds its next record
taken stops the query. A takeover needs two intervals of silence after the owner's last record,
so an owner that renewed within the last interval holds the lease for at least one more.

Records are deleted to keep the journal small (each renewal removes every record below its
previous one), and a deleted key can be created again. Three rules keep the sequence sound
anyway. A record is deleted only once a newer one exists, so a record that vanished between a
listing and its read means "list again", never "no lease". Whoever creates record ``seq``
checks that no newer record exists: if one does, ``seq`` had been renewed past and deleted, and
the create only filled a hole (a claim on a journal someone else owns). And the record by which
a query took over from an owner that did not release is a **fence**, never deleted: it is the
one number that owner creates next, should it only be paused, so its renewal fails after a
pause of any length, whatever the store's listing shows. Every record names the fences its
owner keeps (``fences``), and an owner inherits those of the record it took over from, so every
later owner keeps them too, without a read: one small record per takeover from a query that
died, for the journal's life. The newest record is found by a LIST, then confirmed by reading
the following numbers by key (records are created densely), so a listing that lags a write by
less than the two intervals a newcomer watches cannot hide a renewal.

Keys::

    lease/<seq>.json    a record of the lease (the newest few are kept, and every fence)
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
# Records kept below the newest (``_collect``).
RECORDS_KEPT = 4


def lease_key(seq: int) -> str:
    """The key of lease record number ``seq``."""
    return f"lease/{seq:012d}.json"


@dataclass(frozen=True)
class LeaseRecord:
    seq: int
    owner: str
    written_at: float
    released: bool = False
    interval: float = 0.0  # the owner's renewal interval
    fences: tuple[int, ...] = ()  # the takeovers' records its owner keeps


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
        # This process's monotonic time of the last record it created (acquire or renew).
        self._renewed_at = 0.0
        # The records of takeovers this run keeps for good (inherited, and its own).
        self._fences: frozenset[int] = frozenset()

    def newest(self) -> LeaseRecord | None:
        for _ in range(_RELISTS):
            seqs = self._seqs()
            if not seqs:
                return None
            seq = seqs[-1]
            data = self._store.read(lease_key(seq))
            if data is None:
                # Deleted since the listing: a newer record exists now (falling back to an
                # older record, or to "none", would let this query claim a journal in use).
                continue
            # The listing may lag the newest records: read on by key.
            while (newer := self._store.read(lease_key(seq + 1))) is not None:
                seq, data = seq + 1, newer
            doc = json.loads(data)
            return LeaseRecord(
                seq,
                doc["owner"],
                float(doc["writtenAt"]),
                bool(doc.get("released")),
                float(doc.get("interval", 0.0)),
                tuple(int(f) for f in doc.get("fences", ())),
            )
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
                # Whether the owner lives is seen by watching its record, on this process's
                # clock: its writtenAt is another host's clock, which may be far ahead.
                current = self._wait_for_lapse(current)
            seq = 0 if current is None else current.seq + 1
            # Taking over from an owner that did not release: this record is the number that
            # owner renews next, should it be only paused. It is kept for good (a fence).
            fence = current is not None and current.owner != self.owner and not current.released
            inherited = frozenset(current.fences) if current is not None else frozenset()
            self._fences = inherited | {seq} if fence else inherited
            if not self._write(seq):
                newest = self.newest()
                # A retried PUT whose first answer was lost finds its own record.
                if newest is None or newest.seq != seq or newest.owner != self.owner:
                    self._raise_in_use(newest)
            listed = self._listing_if_newest(seq)
            if listed is not None:
                self.seq = seq
                self._renewed_at = self._clock()
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
        # The owner renews at its own interval, which a restart with other options may have
        # made longer than ours.
        wait = 2 * max(self._interval, seen.interval)
        logger.warning(
            "journal %s is leased by run %s; watching its lease for %.0fs to tell whether that "
            "query is still running",
            self._location,
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
        """Create the next record; raises ``JournalInUseError`` if another run took over. The
        heartbeat renews, and so does ``confirm`` on the driver's thread: when both race for
        one number, or one goes past the other, the newest record is still this run's, and
        this call renews past it. A renewal counts from the moment before its create (this
        process's monotonic clock): a pause inside the call, after the create, is not
        mistaken for a fresh renewal."""
        assert self.seq is not None
        for _ in range(_CLAIMS):
            started = self._clock()
            seq = self.seq + 1
            listed = self._listing_if_newest(seq) if self._write(seq) else None
            if listed is not None:
                self.seq = seq
                self._renewed_at = started
                self._collect(seq, listed)
                return
            # Not created, or a newer record exists: fine only if the newest is this run's (a
            # concurrent renewal of its own, or a retried create whose answer was lost). Else a
            # run that took over has renewed past seq (this query paused for longer than two
            # intervals), and a create only filled a hole.
            newest = self.newest()
            if newest is None or newest.owner != self.owner or newest.released:
                self._raise_in_use(newest, taken=True)
            assert newest is not None
            # When this run's newest record was written is unknown here (the other thread may
            # have paused after creating it): go past it, so that a renewal happens now.
            self.seq = max(seq, newest.seq)
        # Every create met one of this run's own: the next tick or confirmation renews.

    def confirm(self) -> None:
        """Before an acknowledgement or a delete: make sure this query still holds the lease.
        A renewal within the last interval (this process's monotonic clock) leaves at least
        one more before anyone may take over; an older one is renewed now, which raises
        ``JournalInUseError`` if another run took the journal over meanwhile. A renewal that
        itself stalled past an interval is not enough: it is renewed again."""
        if self.seq is None:
            return
        for _ in range(_CLAIMS):
            if self._clock() - self._renewed_at <= self._interval:
                return
            logger.info(
                "journal %s: last lease renewal %.1fs ago; renewing before acknowledging",
                self._location,
                self._clock() - self._renewed_at,
            )
            self.renew()
        raise JournalError(
            f"journal {self._location}: the lease could not be renewed within "
            f"{self._interval:.0f}s {_CLAIMS} times in a row (the driver is stalling)",
            retriable=True,
        )

    def _listing_if_newest(self, seq: int) -> list[int] | None:
        """The records listed now if none is newer than ``seq`` (the next number is also read
        by key: a listing may lag), else None."""
        seqs = self._seqs()
        if (seqs and seqs[-1] > seq) or self._store.read(lease_key(seq + 1)) is not None:
            return None
        return seqs

    def _collect(self, seq: int, seqs: list[int]) -> None:
        """Delete the records below the newest ``RECORDS_KEPT``, but for fences: a few are
        kept so that a listing that lags by fewer renewals still shows one, from which
        ``newest`` reads on by key; a crashed run's records and filled holes go too. Best
        effort: what a failed delete leaves, the next renewal removes."""
        try:
            for old in seqs:
                if old > seq - RECORDS_KEPT:
                    break
                if old not in self._fences:
                    self._store.delete(lease_key(old))
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
            "fences": sorted(self._fences),
        }
        return self._store.create(lease_key(seq), json.dumps(doc).encode())

    def _raise_in_use(self, record: LeaseRecord | None, taken: bool = False) -> None:
        who = f"run {record.owner}" if record is not None else "another run"
        what = "took over" if taken else "is using"
        raise JournalInUseError(
            f"Another query ({who}) {what} journalLocation {self._location}: a journal belongs "
            "to one query at a time. Fix: stop the other query, or give this query its own "
            "'journalLocation' (like its own checkpointLocation)"
        )
