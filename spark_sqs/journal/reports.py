"""Acknowledgement reports: what the receivers of a batch deleted of earlier batches. Runs on:
executors (written after a receiver's deletes) and the driver (read to settle a batch).

A receiver of batch N+1 deletes the entries of batch N the plan assigned to it, then writes one
report, ``acks/<N+1>/<receiver>.json``, with one ``AckedEntry`` per entry. The driver reads the
reports of the receivers the plan assigned, by key: a LIST may lag a write, and a report it
missed would make the driver forget an uncertain delete. An earlier version named reports after
their counters (``<receiver>.s-<summary>.json``) so that a LIST alone settled a batch; such
reports are still read (``entries_of_summary``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..lag import combine

_NAME = re.compile(r"^acks/\d{12}/(\d{5,})(?:\.s-([0-9a-z_-]+))?\.json$")
_SEGMENT = re.compile(
    r"^b(\d+)e(\d+)r(\d+)p(\d+)d(\d+)f(\d+)(?:w(\d+))?(?:l(\d+)-(\d+)-(\d+))?"
    r"(?:x((?:[a-z]\d+)+))?$"
)
# The key of an entry's metadata that holds its receiver's stop reason (below).
STOPPED_BY = b"spark_sqs.stoppedBy"
# Why a receiver stopped receiving (executor/receiver.py ``receive_messages``): logged,
# recorded in its entry (``STOPPED_BY``) and counted in its batch's metrics (``receiveStops``).
STOP_LIMIT = "limit"  # its share of the batch's limit
STOP_EMPTY = "empty receive"
STOP_CAUGHT_UP = "caught up"  # short answers
STOP_WAITED = "long poll waited"
STOP_VISIBLE = "visible when planned"  # its part of the planned count, and the margin
STOP_BUDGET = "time budget"
STOP_ERROR = "error"
STOP_IN_FLIGHT = "in-flight limit"
STOP_BYTES = "byte limit"  # maxBytesPerReceiver, or its share of maxBytesPerTrigger
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
