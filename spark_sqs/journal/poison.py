"""Poison batches: the journal records they are counted and narrowed by (attempts, narrowing
steps, carries), read by both sides. Runs on: driver and executors. Executors record attempts and
apply the narrowing to a replay (``spark_sqs.executor.poison``); the driver decides the narrowing,
carries messages out and quarantines them, and ``spark-sqs release`` releases a batch
(``spark_sqs.driver.poison``).

SQS never sees a replayed batch (the journal replays it), so the queue's redrive policy cannot
catch a message that makes every attempt of its batch fail. The source counts instead:

- The attempt that journals an entry is named in the entry's schema metadata (no extra write
  in steady state); every later read of the entry (a retried task, a new run that replays it)
  creates ``batches/<N>/attempts/<receiver>-<run>-s<stage attempt>-t<task attempt>-n<step>.json``
  (create-if-absent: a retried record of one attempt is one record). An attempt is one
  (run, stage attempt, task attempt): several Spark jobs of one ``foreachBatch`` call read the
  batch again but count once.
- ``poisonMessagePolicy=fail``: once ``maxBatchAttempts`` attempts read a batch that is still not
  acknowledged, every further read raises ``PoisonBatchError`` saying how to release it.
- ``deadLetter``: when a run replays a batch that failed ``maxBatchAttempts`` times (or once,
  at a narrowing step), the driver *narrows* it (``batches/<N>/_narrow-<step>.json``): the replay
  delivers the first half of the candidate messages; the other half is *carried* into a new
  journal batch ``X`` (``batches/<X>/_carry.json`` plus one entry per receiver, no plan), which
  is in no offset log, so the next new batch adopts it as an orphan (see driver/coordinator.py
  ``_adopt``) and delivers it, alone, as a *suspect* batch that narrows after a single failure.
  When the candidate is one message and it failed, that message is quarantined: the decision is
  created in ``quarantine/<N>-<messageId>.json`` before it is sent to the dead-letter queue, a
  ``.sent`` marker follows the send, and every later plan of the batch finishes what a crash left
  undone. While a receiver of the batch that receives has no entry (it was killed or cancelled
  before it journaled in every attempt), no attempt handed the batch to the sink and a replay
  does not isolate the candidate (that receiver receives fresh messages): the quarantine waits
  ``maxBatchAttempts`` more failed attempts at the step (``driver/poison.py`` ``decide``).

Carrying out rather than releasing to SQS: the carried messages stay journaled (their receipt
handles may have expired, and a message made visible again could be received under the batch's
own drop set), and batch N's acknowledgement may delete them from SQS as for every other message
of N, because the journal, not the queue, holds them from then on (as with
``deleteAfterJournal``).

``PoisonRecords`` builds every key of these records. Keys::

    batches/<N>/attempts/<receiver>-<run>-s<S>-t<T>-n<step>.json  an attempt that read N
    batches/<N>/_narrow-<step>.json       a narrowing step of N
    batches/<X>/_carry.json               X holds messages carried out of a narrowed batch
    batches/<N>/_carried-<step>.json      the carry batch of N's step was adopted
    batches/<N>/_suspect.json             N adopted a carry batch: narrowed after one failure
    batches/<N>/_released.json            ``spark-sqs release`` gave N's messages back
    quarantine/<N>-<messageId>.json       the decision to quarantine a message of N
    quarantine/<N>-<messageId>.sent       the message was sent to the dead-letter queue
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..errors import JournalError
from .batches import batch_dir
from .plans import PLAN, BatchPlan
from .stores import Record

FAIL = "fail"
DEAD_LETTER = "deadLetter"

ATTEMPT_RECORD = re.compile(r"^attempts/(\d{5,})-(.+)-n(\d+)\.json$")
NARROW_RECORD = re.compile(r"^_narrow-(\d{4})\.json$")
CARRY = "_carry.json"
SUSPECT = "_suspect.json"
RELEASED = "_released.json"
QUARANTINE = "quarantine"
# Schema metadata of an entry: the attempt that journaled it (its first read, counted without a
# record of its own).
FIRST_ATTEMPT = b"spark_sqs.firstAttempt"


@dataclass(frozen=True)
class Attempt:
    receiver: int
    key: str  # run, stage attempt, task attempt: one attempt of the batch
    step: int  # the narrowing step the attempt read under (0: not narrowed)


@dataclass(frozen=True)
class Narrowing:
    """One narrowing step of a batch: what its replays deliver from now on."""

    step: int
    keep: dict[int, list[str]]  # receiver -> the message ids it delivers (receivers covered)
    carried: dict[int, list[str]] = field(default_factory=dict)  # receiver -> ids carried out
    carry_batch: int | None = None  # the journal batch the carried messages went to
    quarantined: tuple[str, ...] = ()
    attempts: int = 0  # attempts of the batch when the step was decided

    def to_json(self) -> bytes:
        doc = {
            "step": self.step,
            "keep": {str(r): ids for r, ids in sorted(self.keep.items())},
            "carried": {str(r): ids for r, ids in sorted(self.carried.items())},
            "carryBatch": self.carry_batch,
            "quarantined": list(self.quarantined),
            "attempts": self.attempts,
        }
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Narrowing:
        doc = json.loads(data)
        return cls(
            step=int(doc["step"]),
            keep={int(r): list(ids) for r, ids in doc["keep"].items()},
            carried={int(r): list(ids) for r, ids in doc.get("carried", {}).items()},
            carry_batch=doc.get("carryBatch"),
            quarantined=tuple(doc.get("quarantined", ())),
            attempts=int(doc.get("attempts", 0)),
        )


def attempts_by_step(attempts: list[Attempt]) -> dict[int, int]:
    """Distinct attempts per narrowing step; an attempt seen under two steps (a straggler)
    counts under the earlier one."""
    first: dict[str, int] = {}
    for a in attempts:
        first[a.key] = min(a.step, first.get(a.key, a.step))
    out: dict[int, int] = {}
    for step in first.values():
        out[step] = out.get(step, 0) + 1
    return out


def narrowing_key(batch: int, step: int) -> str:
    return f"{batch_dir(batch)}/_narrow-{step:04d}.json"


def carried_key(batch: int, step: int) -> str:
    """Marks that the carry batch of ``batch``'s narrowing ``step`` was adopted."""
    return f"{batch_dir(batch)}/_carried-{step:04d}.json"


def attempt_key(batch: int, receiver: int, attempt: str, step: int) -> str:
    return f"{batch_dir(batch)}/attempts/{receiver:05d}-{attempt}-n{step}.json"


def _quarantine_key(batch: int, message_id: str, suffix: str) -> str:
    return f"{QUARANTINE}/{batch:012d}-{message_id}{suffix}"


class PoisonRecords(Record):
    """The records of poison batches, read and written by key (except ``names``, one LIST)."""

    def names(self, batch: int) -> list[str]:
        """Base names of the files of ``batch`` (one LIST)."""
        prefix = batch_dir(batch) + "/"
        return [k[len(prefix) :] for k in self.store.list(batch_dir(batch))]

    # -- attempts ---------------------------------------------------------------------------

    def attempts(self, batch: int, names: list[str] | None = None) -> list[Attempt]:
        """The attempts recorded for ``batch``, from the names alone (one LIST)."""
        out = []
        for name in names if names is not None else self.names(batch):
            match = ATTEMPT_RECORD.match(name)
            if match:
                out.append(Attempt(int(match.group(1)), match.group(2), int(match.group(3))))
        return out

    def write_attempt(self, batch: int, receiver: int, attempt: str, step: int, at: float) -> None:
        doc = {"receiver": receiver, "attempt": attempt, "step": step, "at": at}
        key = attempt_key(batch, receiver, attempt, step)
        self.store.create(key, json.dumps(doc, sort_keys=True).encode())

    def remove_attempt(self, batch: int, receiver: int, attempt: str, step: int) -> None:
        self.store.delete(attempt_key(batch, receiver, attempt, step))

    # -- narrowing steps --------------------------------------------------------------------

    def latest_narrowing(self, batch: int, names: list[str] | None = None) -> Narrowing | None:
        """The batch's latest narrowing step, by key: steps are created in order from 1, each
        only once the one before it exists, and are removed only with the batch. (``names`` is
        accepted for callers that listed the batch anyway; a listing is not needed.)"""
        steps = self.steps(batch)
        return steps[-1] if steps else None

    def steps(self, batch: int) -> list[Narrowing]:
        """Every narrowing step of the batch, by key (steps are dense from 1)."""
        out = []
        while (data := self.store.read(narrowing_key(batch, len(out) + 1))) is not None:
            out.append(Narrowing.from_json(data))
        return out

    def write_narrowing(self, batch: int, narrowing: Narrowing) -> Narrowing:
        """Create the step; if another call created it first, that one is the step."""
        key = narrowing_key(batch, narrowing.step)
        if self.store.create(key, narrowing.to_json()):
            return narrowing
        data = self.store.read(key)
        if data is None:
            raise JournalError(f"narrowing record {key} exists but cannot be read")
        return Narrowing.from_json(data)

    # -- carry batches ----------------------------------------------------------------------

    def read_carry(self, batch: int) -> dict[str, Any] | None:
        """The carry record of ``batch`` (``from``, ``step``, ``receivers``), None if it holds
        no carried messages."""
        data = self.store.read(f"{batch_dir(batch)}/{CARRY}")
        return None if data is None else json.loads(data)

    def is_carry(self, batch: int) -> bool:
        return self.store.read(f"{batch_dir(batch)}/{CARRY}") is not None

    def write_carry(self, carry: int, source: int, step: int, receivers: list[int]) -> None:
        """Mark ``carry`` as holding messages carried out of ``source``'s ``step``; its
        receivers are named, so that they are read by key (never found by a LIST)."""
        marker = {"from": source, "step": step, "receivers": receivers}
        self.store.create(
            f"{batch_dir(carry)}/{CARRY}", json.dumps(marker, sort_keys=True).encode()
        )

    def carry_receivers(self, batch: int) -> tuple[int, ...] | None:
        """The receivers whose entries a batch of carried messages holds (``_carry.json``), or
        None if ``batch`` is not one. A carry record of an earlier version names no receivers:
        they are read from the narrowing step that made it, else found by a LIST."""
        doc = self.read_carry(batch)
        if doc is None:
            return None
        if "receivers" in doc:
            return tuple(int(r) for r in doc["receivers"])
        step = self.store.read(narrowing_key(int(doc["from"]), int(doc["step"])))
        if step is not None:
            return tuple(sorted(Narrowing.from_json(step).carried))
        entry = re.compile(r"^(\d{5,})\.arrow$")
        return tuple(sorted(int(m.group(1)) for n in self.names(batch) if (m := entry.match(n))))

    def carry_adopted(self, batch: int, step: int) -> bool:
        """True once a plan adopted the carry batch of ``batch``'s narrowing ``step``."""
        return self.store.read(carried_key(batch, step)) is not None

    def mark_carry_adopted(self, batch: int, step: int) -> None:
        self.store.create(carried_key(batch, step), b"")

    def remove_markers(self, batch: int) -> None:
        """Remove what makes a batch without a plan live (its carry and release records)."""
        for name in (CARRY, RELEASED):
            self.store.delete(f"{batch_dir(batch)}/{name}")

    # -- suspect batches --------------------------------------------------------------------

    def suspect_ids(self, batch: int) -> frozenset[str]:
        """The ids a suspect batch's first step keeps (empty for a record without them)."""
        data = self.store.read(f"{batch_dir(batch)}/{SUSPECT}")
        return frozenset(json.loads(data).get("ids", ())) if data else frozenset()

    def write_suspect(self, batch: int, carried_from: int, ids: list[str]) -> None:
        doc = {"carriedFrom": carried_from, "ids": ids}
        self.store.create(f"{batch_dir(batch)}/{SUSPECT}", json.dumps(doc).encode())

    # -- quarantine -------------------------------------------------------------------------

    def quarantine_sent(self, batch: int, message_id: str) -> bool:
        return self.store.read(_quarantine_key(batch, message_id, ".sent")) is not None

    def write_quarantine(self, batch: int, message_id: str, doc: dict[str, Any]) -> None:
        """The decision to quarantine a message, created before it is sent."""
        body = json.dumps(doc, sort_keys=True).encode()
        self.store.create(_quarantine_key(batch, message_id, ".json"), body)

    def mark_quarantine_sent(self, batch: int, message_id: str) -> None:
        self.store.create(_quarantine_key(batch, message_id, ".sent"), b"")

    def quarantined(self) -> list[dict[str, Any]]:
        """Every quarantine decision in the journal, with whether it was sent."""
        keys = self.store.list(QUARANTINE)
        sent = {k.removesuffix(".sent") for k in keys if k.endswith(".sent")}
        out = []
        for key in keys:
            if key.endswith(".json"):
                data = self.store.read(key)
                if data is not None:
                    out.append({**json.loads(data), "sent": key.removesuffix(".json") in sent})
        return out

    # -- release ----------------------------------------------------------------------------

    def is_released(self, batch: int) -> bool:
        return self.store.read(f"{batch_dir(batch)}/{RELEASED}") is not None

    def write_released(self, batch: int, doc: dict[str, Any]) -> dict[str, Any]:
        """Create the release record; if one exists, that one is the record."""
        key = f"{batch_dir(batch)}/{RELEASED}"
        if not self.store.create(key, json.dumps(doc, sort_keys=True).encode()):
            data = self.store.read(key)
            doc = json.loads(data) if data else doc
        return doc

    def released_plan(self, batch: int) -> BatchPlan | None:
        """The zero plan that ``spark-sqs release`` recorded for ``batch`` (None if it did
        not)."""
        data = self.store.read(f"{batch_dir(batch)}/{RELEASED}")
        plan = None if data is None else json.loads(data).get("plan")
        return None if plan is None else BatchPlan.from_json(json.dumps(plan).encode())

    def remove_released_files(self, batch: int, names: list[str]) -> None:
        """Remove the files ``names`` of a released batch, but its plan and release record."""
        for name in names:
            if name not in (PLAN, RELEASED):
                self.store.delete(f"{batch_dir(batch)}/{name}")


def first_attempt(table: pa.Table) -> str | None:
    """The attempt that journaled an entry (None for entries of older versions)."""
    value = (table.schema.metadata or {}).get(FIRST_ATTEMPT)
    return value.decode() if value else None


def keep_only(table: pa.Table, ids: set[str]) -> pa.Table:
    mask = [i in ids for i in table.column("messageId").to_pylist()]
    return table.filter(pa.array(mask, pa.bool_()))
