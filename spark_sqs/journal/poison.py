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
  undone.

Carrying out rather than releasing to SQS: the carried messages stay journaled (their receipt
handles may have expired, and a message made visible again could be received under the batch's
own drop set), and batch N's acknowledgement may delete them from SQS as for every other message
of N, because the journal, not the queue, holds them from then on (as with
``deleteAfterJournal``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

if TYPE_CHECKING:
    from .stores import JournalStore


class Journal(Protocol):
    """What these records need of ``entries.Journal``: its store. A protocol, not an import:
    the journal reads the carry and release records below to tell which batches are live."""

    @property
    def store(self) -> JournalStore: ...


FAIL = "fail"
DEAD_LETTER = "deadLetter"

ATTEMPT_RECORD = re.compile(r"^attempts/(\d{5,})-(.+)-n(\d+)\.json$")
NARROW_RECORD = re.compile(r"^_narrow-(\d{4})\.json$")
CARRY = "_carry.json"
SUSPECT = "_suspect.json"
RELEASED = "_released.json"
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


def batch_dir(batch: int) -> str:
    return f"batches/{batch:012d}"


def batch_names(journal: Journal, batch: int) -> list[str]:
    prefix = batch_dir(batch) + "/"
    return [k[len(prefix) :] for k in journal.store.list(batch_dir(batch))]


def read_attempts(journal: Journal, batch: int, names: list[str] | None = None) -> list[Attempt]:
    """The attempts recorded for ``batch``, from the names alone (one LIST)."""
    out = []
    for name in names if names is not None else batch_names(journal, batch):
        match = ATTEMPT_RECORD.match(name)
        if match:
            out.append(Attempt(int(match.group(1)), match.group(2), int(match.group(3))))
    return out


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


def latest_narrowing(
    journal: Journal, batch: int, names: list[str] | None = None
) -> Narrowing | None:
    """The batch's latest narrowing step, by key: steps are created in order from 1, each only
    once the one before it exists, and are removed only with the batch. (``names`` is accepted
    for callers that listed the batch anyway; a listing is not needed.)"""
    step = 1
    latest = None
    while (data := journal.store.read(narrowing_key(batch, step))) is not None:
        latest = Narrowing.from_json(data)
        step += 1
    return latest


def carry_receivers(journal: Journal, batch: int) -> tuple[int, ...] | None:
    """The receivers whose entries a batch of carried messages holds (``_carry.json``), or None
    if ``batch`` is not one. A carry record of an earlier version names no receivers: they are
    read from the narrowing step that made it, else found by a LIST."""
    data = journal.store.read(f"{batch_dir(batch)}/{CARRY}")
    if data is None:
        return None
    doc = json.loads(data)
    if "receivers" in doc:
        return tuple(int(r) for r in doc["receivers"])
    step = journal.store.read(narrowing_key(int(doc["from"]), int(doc["step"])))
    if step is not None:
        return tuple(sorted(Narrowing.from_json(step).carried))
    entry = re.compile(r"^(\d{5,})\.arrow$")
    names = batch_names(journal, batch)
    return tuple(sorted(int(m.group(1)) for n in names if (m := entry.match(n))))


def first_attempt(table: pa.Table) -> str | None:
    """The attempt that journaled an entry (None for entries of older versions)."""
    value = (table.schema.metadata or {}).get(FIRST_ATTEMPT)
    return value.decode() if value else None


def keep_only(table: pa.Table, ids: set[str]) -> pa.Table:
    mask = [i in ids for i in table.column("messageId").to_pylist()]
    return table.filter(pa.array(mask, pa.bool_()))
