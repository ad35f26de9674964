"""Acknowledgement reports: what the receivers of a batch deleted of earlier batches, and the
per-batch counters made from them. Runs on: both (executors write a report after their deletes,
the driver reads it to settle a batch).

A receiver of batch N+1 deletes the entries of batch N the plan assigned to it, then writes one
report, ``acks/<N+1>/<receiver>.json``, with one ``AckedEntry`` per entry. The driver reads the
reports of the receivers the plan assigned, by key: a LIST may lag a write, and a report it
missed would make the driver forget an uncertain delete. An earlier version named reports after
their counters (``<receiver>.s-<summary>.json``) so that a LIST alone settled a batch; such
reports are still read (``entries_of_summary``). ``AckReports`` keeps them in the journal's
store; the rest of the journal's records are ``spark_sqs.journal.Journal``'s.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..journal.stops import (
    STOP_BUDGET,
    STOP_BYTES,
    STOP_CAUGHT_UP,
    STOP_EMPTY,
    STOP_ERROR,
    STOP_IN_FLIGHT,
    STOP_LIMIT,
    STOP_VISIBLE,
    STOP_WAITED,
    STOPPED_BY,
)
from ..lag import LAG, batch_lag, combine

if TYPE_CHECKING:
    from ..journal import EntryReceipts, Journal

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^acks/\d{12}/(\d{5,})(?:\.s-([0-9a-z_-]+))?\.json$")
_BATCH = re.compile(r"^acks/(\d{12})/")
_SEGMENT = re.compile(
    r"^b(\d+)e(\d+)r(\d+)p(\d+)d(\d+)f(\d+)(?:w(\d+))?(?:l(\d+)-(\d+)-(\d+))?"
    r"(?:x((?:[a-z]\d+)+))?$"
)
# One letter each in a summary's ``x`` part ("xe3v1": three empty receives, one at the count).
STOP_CODES = {
    STOP_LIMIT: "l",
    STOP_EMPTY: "e",
    STOP_CAUGHT_UP: "c",
    STOP_WAITED: "w",
    STOP_VISIBLE: "v",
    STOP_BUDGET: "t",
    STOP_ERROR: "r",
    STOP_IN_FLIGHT: "i",
    STOP_BYTES: "b",
}
_OTHER_STOP = "o"
_STOP_NAMES = {code: name for name, code in STOP_CODES.items()} | {_OTHER_STOP: "other"}
# Object keys may be 1024 bytes; a summary longer than this goes in the body only.
NAME_LIMIT = 900


@dataclass(frozen=True)
class AckedEntry:
    """What one receiver did about one journal entry of an earlier batch, or, read from a
    report's name, about all the entries of that batch it acknowledged (``entries`` of them,
    ``receiver`` unknown)."""

    batch: int
    rows: int  # rows journaled in the entry
    dropped: int  # redeliveries its receiver dropped
    deleted: int
    delete_failures: int
    window_dropped: int = 0  # of the dropped, copies the duplicate window caught
    expired_dropped: int = 0  # received, not journaled: the handle expired meanwhile
    entries: int = 1
    receiver: int | None = None  # the acknowledged entry's receiver
    uncertain: tuple[str, ...] = ()  # ids whose delete may not have taken effect
    lag: str | None = None  # the entry's lag summary, JSON (lag.py)
    # Why its receiver stopped receiving, as (reason, entries) pairs: one pair for an entry
    # (none if it did not say), counts summed over the batch when read from a report's name.
    stops: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        # The keys a report body has always had: a driver reads reports of an earlier version.
        return {
            "batch": self.batch,
            "receiver": self.receiver,
            "rows": self.rows,
            "dropped": self.dropped,
            "windowDropped": self.window_dropped,
            "expiredDropped": self.expired_dropped,
            "deleted": self.deleted,
            "deleteFailures": self.delete_failures,
            "uncertain": sorted(self.uncertain),
            "lag": self.lag,
            "stops": dict(self.stops),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AckedEntry:
        receiver = doc.get("receiver")
        return cls(
            batch=int(doc["batch"]),
            rows=int(doc["rows"]),
            dropped=int(doc["dropped"]),
            deleted=int(doc["deleted"]),
            delete_failures=int(doc["deleteFailures"]),
            window_dropped=int(doc.get("windowDropped", 0)),
            expired_dropped=int(doc.get("expiredDropped", 0)),
            receiver=None if receiver is None else int(receiver),
            uncertain=tuple(sorted(doc.get("uncertain", ()))),
            lag=doc.get("lag"),
            stops=tuple(sorted((str(k), int(v)) for k, v in doc.get("stops", {}).items())),
        )


def stops_of(metadata: Mapping[bytes, bytes] | None) -> tuple[tuple[str, int], ...]:
    """An entry's stop reason (its ``STOPPED_BY`` metadata) as ``AckedEntry.stops``."""
    reason = (metadata or {}).get(STOPPED_BY, b"").decode()
    return ((reason, 1),) if reason else ()


def summed_stops(stops: Iterable[tuple[tuple[str, int], ...]]) -> dict[str, int]:
    """Entries by why their receivers stopped receiving, summed over ``AckedEntry.stops``."""
    out: dict[str, int] = {}
    for pairs in stops:
        for reason, count in pairs:
            out[reason] = out.get(reason, 0) + count
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class AckReport:
    """One acknowledging receiver's report: ``receiver`` is its number in the acknowledging
    batch, ``entries`` what it did about each entry (or each batch, from a name)."""

    receiver: int
    entries: tuple[AckedEntry, ...]
    # Assigned entries (batch, receiver) the reporter did not find: it deleted nothing of
    # them, and the driver then deletes their batch itself.
    missing: tuple[tuple[int, int], ...] = ()

    def of_batch(self, batch: int) -> list[AckedEntry]:
        return [e for e in self.entries if e.batch == batch]

    def missing_of(self, batch: int) -> list[int]:
        return [r for b, r in self.missing if b == batch]


def report_key(batch: int, receiver: int) -> str:
    """The key of receiver ``receiver``'s report in ``batch``: the driver reads it by name."""
    return f"acks/{batch:012d}/{receiver:05d}.json"


def body_of(entries: Sequence[AckedEntry], missing: Sequence[tuple[int, int]] = ()) -> bytes:
    doc: dict[str, Any] = {"entries": [e.to_json() for e in entries]}
    if missing:
        doc["missing"] = [list(m) for m in missing]
    return json.dumps(doc, sort_keys=True).encode()


def parse_key(key: str) -> tuple[int, str | None] | None:
    """(reporting receiver, summary or None) of a report key; None if it is no report."""
    match = _NAME.match(key)
    return None if match is None else (int(match.group(1)), match.group(2))


def parse_body(data: bytes) -> list[AckedEntry]:
    return [AckedEntry.from_json(e) for e in json.loads(data).get("entries", ())]


def parse_missing(data: bytes) -> tuple[tuple[int, int], ...]:
    return tuple((int(b), int(r)) for b, r in json.loads(data).get("missing", ()))


def merge_attempts(receiver: int, bodies: Sequence[list[AckedEntry]]) -> AckReport:
    """One report from the bodies that attempts of one receiver wrote: the counters of the
    first, the uncertain ids of all (an attempt may doubt a delete that another did not)."""
    uncertain: dict[tuple[int, int | None], set[str]] = {}
    for body in bodies:
        for e in body:
            uncertain.setdefault((e.batch, e.receiver), set()).update(e.uncertain)
    return AckReport(
        receiver,
        tuple(
            replace(e, uncertain=tuple(sorted(uncertain[(e.batch, e.receiver)]))) for e in bodies[0]
        ),
    )


def summary_of(entries: Iterable[AckedEntry]) -> str | None:
    """The counters of a report, summed per acknowledged batch, as a key name fragment; None
    if the report holds uncertain ids (only its body can)."""
    per_batch: dict[int, list[AckedEntry]] = {}
    for e in entries:
        if e.uncertain:
            return None
        per_batch.setdefault(e.batch, []).append(e)
    segments = []
    for b, group in sorted(per_batch.items()):
        counts = (
            sum(e.entries for e in group),
            sum(e.rows for e in group),
            sum(e.dropped for e in group),
            sum(e.deleted for e in group),
            sum(e.delete_failures for e in group),
        )
        segment = f"b{b}" + "".join(f"{tag}{n}" for tag, n in zip("erpdf", counts, strict=True))
        # Copies dropped by the duplicate window; written only when some were (shorter names).
        copies = sum(e.window_dropped for e in group)
        if copies:
            segment += f"w{copies}"
        lag = combine(json.loads(e.lag) if e.lag else None for e in group)
        if lag is not None:
            segment += f"l{lag['messages']}-{lag['oldestAgeMs']}-{lag['medianAgeMs']}"
        by_code: dict[str, int] = {}
        for reason, count in summed_stops(e.stops for e in group).items():
            code = STOP_CODES.get(reason, _OTHER_STOP)
            by_code[code] = by_code.get(code, 0) + count
        if by_code:
            segment += "x" + "".join(f"{c}{n}" for c, n in sorted(by_code.items()))
        segments.append(segment)
    return "_".join(segments) or "none"


def entries_of_summary(summary: str) -> list[AckedEntry]:
    """The per-batch entries of a report from its key's summary (``summary_of``)."""
    out: list[AckedEntry] = []
    for segment in summary.split("_"):
        match = _SEGMENT.match(segment)
        if match is None:
            continue  # "none": the receiver had nothing to acknowledge
        b, entries, rows, dropped, deleted, failures, copies, messages, oldest, median, stops = (
            match.groups()
        )
        lag = None
        if messages is not None:
            lag = json.dumps(
                {"messages": int(messages), "oldestAgeMs": int(oldest), "medianAgeMs": int(median)},
                sort_keys=True,
            )
        out.append(
            AckedEntry(
                batch=int(b),
                rows=int(rows),
                dropped=int(dropped),
                deleted=int(deleted),
                delete_failures=int(failures),
                window_dropped=int(copies or 0),
                entries=int(entries),
                lag=lag,
                stops=tuple(
                    (_STOP_NAMES[c], int(n)) for c, n in re.findall(r"([a-z])(\d+)", stops or "")
                ),
            )
        )
    return out


def entry_of(
    receipts: EntryReceipts,
    *,
    deleted: int = 0,
    delete_failures: int = 0,
    uncertain: Iterable[str] = (),
) -> AckedEntry:
    """What was done about the journal entry ``receipts`` reads: its counters, lag and stop
    reason, with the deletes made of it."""
    return AckedEntry(
        batch=receipts.batch,
        receiver=receipts.receiver,
        rows=receipts.rows,
        dropped=receipts.dropped,
        window_dropped=receipts.window_dropped,
        expired_dropped=receipts.expired_dropped,
        deleted=deleted,
        delete_failures=delete_failures,
        uncertain=tuple(sorted(uncertain)),
        lag=receipts.metadata.get(LAG, b"").decode() or None,
        stops=stops_of(receipts.metadata),
    )


def batch_counters(
    batch: int,
    entries: Sequence[AckedEntry],
    *,
    uncertain: int,
    deleted: int | None = None,
    delete_failures: int | None = None,
    acknowledged_by: int | None = None,
) -> dict[str, Any]:
    """The counters of an acknowledged batch (its metrics, driver/metrics.py), from what was
    done about its entries. ``deleted``, ``delete_failures``: when the driver deleted the batch
    in one call, its totals (its entries then carry none); ``acknowledged_by``: the batch whose
    receivers deleted it."""
    counters: dict[str, Any] = {
        "batch": batch,
        "receivers": sum(e.entries for e in entries),
        "journaled": sum(e.rows for e in entries),
        "duplicatesDropped": sum(e.dropped for e in entries),
        "duplicateWindowDropped": sum(e.window_dropped for e in entries),
        "expiredHandlesDropped": sum(e.expired_dropped for e in entries),
        "deleted": sum(e.deleted for e in entries) if deleted is None else deleted,
        "deleteFailures": (
            sum(e.delete_failures for e in entries) if delete_failures is None else delete_failures
        ),
        "uncertainAcknowledgements": uncertain,
    }
    if acknowledged_by is not None:
        counters["acknowledgedBy"] = acknowledged_by
    counters["receiveStops"] = summed_stops(e.stops for e in entries)
    # oldestMessageAgeMs, medianMessageAgeMs (lag.py)
    counters.update(batch_lag(_lag_metadata(e.lag) for e in entries))
    return counters


def _lag_metadata(value: str | None) -> dict[bytes, bytes] | None:
    return {LAG: value.encode()} if value else None


class AckReports:
    """The acknowledgement reports of a journal, ``acks/<N>/<receiver>.json`` in its store
    (``Journal.store``, opened lazily: the record is as cheap to pickle as the journal)."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal

    def write(
        self,
        batch: int,
        receiver: int,
        entries: Sequence[AckedEntry],
        missing: Sequence[tuple[int, int]] = (),
    ) -> None:
        """What receiver ``receiver`` of ``batch`` acknowledged of earlier batches, created if
        absent under a key the driver reads by name. A retried or concurrent attempt repeats
        the same deletes; the first report stands: it was written after that attempt's deletes,
        so what it calls certain was deleted with a valid handle."""
        self._journal.store.create(report_key(batch, receiver), body_of(entries, missing))

    def read(self, batch: int, receiver: int) -> AckReport | None:
        """The report of receiver ``receiver`` of ``batch``, by key; a report that an earlier
        version named after its counters is found by a LIST, only when the key is absent."""
        store = self._journal.store
        data = store.read(report_key(batch, receiver))
        if data is not None:
            return AckReport(receiver, tuple(parse_body(data)), parse_missing(data))
        for key in store.list(f"acks/{batch:012d}"):
            parsed = parse_key(key)
            if parsed is not None and parsed[0] == receiver and parsed[1] is not None:
                return AckReport(receiver, tuple(entries_of_summary(parsed[1])))
        return None

    def remove(self, batch: int, receivers: Iterable[int]) -> None:
        """Remove the reports of ``receivers`` of ``batch``, by key (what else is under
        ``acks/``, e.g. reports named by an earlier version, ``collect`` finds)."""
        self._journal.store.delete_many(self.keys(batch, receivers))

    @staticmethod
    def keys(batch: int, receivers: Iterable[int]) -> list[str]:
        """The keys of the reports of ``receivers`` of ``batch``, for a removal that deletes
        them along with other keys (``Batches.remove(..., also=)``)."""
        return [report_key(batch, r) for r in sorted(set(receivers))]

    def collect(self, oldest_pending: int, keep: set[int]) -> int:
        """Remove the reports written by batches before ``oldest_pending`` (acknowledged or
        retired) that no pending batch's acknowledgement still reads (``keep``): those of a
        batch whose assignments went to a replanned or adopted batch, or were read by a driver
        that died before it removed them. Returns how many were removed."""
        try:
            store = self._journal.store
            old = [
                key
                for key in store.list("acks")
                if (m := _BATCH.match(key))
                and int(m.group(1)) < oldest_pending
                and int(m.group(1)) not in keep
            ]
            if old:
                store.delete_many(old)
        except Exception:
            # Storage, not correctness: the next acknowledgement tries again.
            logger.warning(
                "journal %s: could not remove old acknowledgement reports",
                self._journal.location,
                exc_info=True,
            )
            return 0
        return len(old)
