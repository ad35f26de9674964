"""Plans: what every attempt of a batch does, fixed the first time the batch is planned. Runs
on: driver and executors.

Keys::

    batches/<N>/_plan.json      the batch's plan, created once, before any receive (a released
                                batch's is replaced by its zero plan: driver/poison.py)
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import JournalError
from .batches import batch_dir
from .stores import Record

PLAN = "_plan.json"


def plan_key(batch: int) -> str:
    return f"{batch_dir(batch)}/{PLAN}"


@dataclass(frozen=True)
class ReceiverPlan:
    """One receiver of a planned batch: how many messages it may receive, or which entry of an
    orphaned batch (never in this query's offset log) it delivers instead."""

    receiver: int
    limit: int
    adopt_from: tuple[int, int] | None = None  # (orphan batch, orphan receiver)
    # The queue it receives from, fixed with the plan (several queues, driver/queues.py). None: a
    # plan written before queues were recorded, whose queue is the journal's first
    # (``Meta.check_owner``).
    queue: str | None = None
    # Its part of the messages the driver saw visible in its queue when it planned the batch
    # (driver/planning.py ``visible_parts``): the receiver counts itself caught up once it has
    # received that many and a margin (executor/receiving.py). None: no count (a plan written
    # before counts were recorded, or planned before any poll answered): no such bound.
    visible: int | None = None
    # The receiver's memory bound in bytes (maxBytesPerReceiver, or its share of
    # maxBytesPerTrigger): it stops receiving once it holds this much (executor/receiving.py).
    # None: a plan written before byte limits, which replays as it was planned, without one.
    max_bytes: int | None = None


@dataclass(frozen=True)
class AckAssignment:
    """One entry of a committed batch that a receiver of the planned batch acknowledges
    (deletes from SQS) before it receives: acknowledgement runs on executors, in parallel."""

    batch: int  # the committed batch
    receiver: int  # its receiver whose entry is acknowledged
    by: int  # the receiver of the planned batch that does it
    # Wall-clock time until which the entry's receipt handles are known to be valid (receive
    # time plus the visibility timeout, or later if the heartbeat extended them).
    valid_until: float
    lost: tuple[str, ...] = ()  # message ids whose visibility the heartbeat lost


@dataclass(frozen=True)
class BatchPlan:
    """What every attempt of a batch does, fixed the first time the batch is planned."""

    batch: int
    receivers: tuple[ReceiverPlan, ...]
    drops: str | None = None  # digest of the drop-set object, None when empty
    drop_count: int = 0
    acks: tuple[AckAssignment, ...] = ()
    # deleteAfterJournal when the batch was first planned: a replay journals the same way,
    # whatever the option is now (None: a plan written before the mode was recorded).
    delete_after_journal: bool | None = None
    # Batches not yet acknowledged when this one was planned (itself included): a message
    # received again (ApproximateReceiveCount > 1) that one of them journaled is dropped.
    pending: tuple[int, ...] = ()
    # Seconds each receiver extends its messages by right after journaling them, then records
    # it with a marker (executor/extension.py); 0: the driver's heartbeat alone extends. Fixed
    # with the plan, like the rest of it; a replayed receiver never extends.
    extend_by: int = 0
    # The orphans this batch retired when it was planned (those it adopts entries of, and
    # those with nothing to adopt): all of them are done once the plan's copies exist.
    retires: tuple[int, ...] = ()
    # The duplicate window (journal/window.py): the oldest batch whose segments may still be
    # live, as the driver judged it on its clock when planning (None: a plan written before,
    # or the window off), and until when an earlier version's segments may be live.
    window_from: int | None = None
    window_legacy_until: float | None = None
    # This plan's identity, drawn when it was created (None: a plan written before, or one a
    # release rewrote). A driver that lost the journal while paused may create a plan for a
    # batch another query adopted and removed meanwhile: an attempt of the batch's first plan
    # must not journal into that one (``Batches.status``).
    plan_id: str | None = None
    # The identities of the pending batches' plans when this one was planned (those the
    # driver knew: none for a carry batch or a plan written before identities): a pending
    # batch whose plan now has another identity was removed and planned again by a driver
    # that lost the journal while paused, and what it holds is delivered by nobody.
    pending_plans: tuple[tuple[int, str], ...] = ()

    def pending_plan(self, batch: int) -> str | None:
        """The identity ``batch``'s plan had when this one was planned (None: not known)."""
        for pending, plan_id in self.pending_plans:
            if pending == batch:
                return plan_id
        return None

    @property
    def acknowledges(self) -> list[int]:
        """The committed batches this batch's receivers acknowledge."""
        return sorted({a.batch for a in self.acks})

    def acks_by(self, receiver: int) -> list[AckAssignment]:
        return [a for a in self.acks if a.by == receiver]

    def receiver(self, number: int) -> ReceiverPlan | None:
        for plan in self.receivers:
            if plan.receiver == number:
                return plan
        return None

    def deletes_on_journal(self, option: bool) -> bool:
        """Whether the receivers delete what they journal: as the plan recorded it, else (a
        plan from before the mode was recorded) the current ``deleteAfterJournal`` option."""
        return self.delete_after_journal if self.delete_after_journal is not None else option

    def to_json(self) -> bytes:
        doc = {
            "batch": self.batch,
            "receivers": [
                {"receiver": r.receiver, "limit": r.limit, "adoptFrom": r.adopt_from}
                | ({"queueUrl": r.queue} if r.queue is not None else {})
                | ({"visible": r.visible} if r.visible is not None else {})
                | ({"maxBytes": r.max_bytes} if r.max_bytes is not None else {})
                for r in self.receivers
            ],
            "drops": self.drops,
            "dropCount": self.drop_count,
            "deleteAfterJournal": self.delete_after_journal,
            "pending": list(self.pending),
            "acks": [[a.batch, a.receiver, a.by, a.valid_until, list(a.lost)] for a in self.acks],
        }
        if self.extend_by:
            doc["extendBy"] = self.extend_by
        if self.retires:
            doc["retires"] = list(self.retires)
        if self.window_from is not None:
            doc["windowFrom"] = self.window_from
        if self.window_legacy_until is not None:
            doc["windowLegacyUntil"] = self.window_legacy_until
        if self.plan_id is not None:
            doc["planId"] = self.plan_id
        if self.pending_plans:
            doc["pendingPlans"] = {str(b): i for b, i in self.pending_plans}
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BatchPlan:
        doc = json.loads(data)
        return cls(
            batch=int(doc["batch"]),
            receivers=tuple(
                ReceiverPlan(
                    int(r["receiver"]),
                    int(r["limit"]),
                    tuple(r["adoptFrom"]) if r.get("adoptFrom") else None,  # type: ignore[arg-type]
                    r.get("queueUrl"),
                    None if r.get("visible") is None else int(r["visible"]),
                    int(r["maxBytes"]) if r.get("maxBytes") is not None else None,
                )
                for r in doc["receivers"]
            ),
            drops=doc.get("drops"),
            drop_count=int(doc.get("dropCount", 0)),
            delete_after_journal=doc.get("deleteAfterJournal"),
            pending=tuple(int(b) for b in doc.get("pending", ())),
            acks=tuple(
                AckAssignment(int(b), int(r), int(by), float(valid), tuple(lost))
                for b, r, by, valid, lost in doc.get("acks", ())
            ),
            extend_by=int(doc.get("extendBy", 0)),
            retires=tuple(int(b) for b in doc.get("retires", ())),
            window_from=int(doc["windowFrom"]) if doc.get("windowFrom") is not None else None,
            window_legacy_until=(
                float(doc["windowLegacyUntil"])
                if doc.get("windowLegacyUntil") is not None
                else None
            ),
            plan_id=doc.get("planId"),
            pending_plans=tuple(
                sorted((int(b), str(i)) for b, i in (doc.get("pendingPlans") or {}).items())
            ),
        )


class Plans(Record):
    """The batches' plans, read and created by key."""

    def read(self, batch: int) -> BatchPlan | None:
        data = self.store.read(plan_key(batch))
        return None if data is None else BatchPlan.from_json(data)

    def exists(self, batch: int) -> bool:
        return self.store.read(plan_key(batch)) is not None

    def remove(self, batch: int) -> None:
        self.store.delete(plan_key(batch))

    def write(self, plan: BatchPlan) -> BatchPlan:
        """Create the batch's plan; if another call created one first, that one is the plan."""
        if self.store.create(plan_key(plan.batch), plan.to_json()):
            return plan
        stored = self.read(plan.batch)
        if stored is None:
            raise JournalError(
                f"The plan of batch {plan.batch} exists but cannot be read in "
                f"{self.location}. Fix: check the store's consistency and permissions"
            )
        return stored

    def replace(self, batch: int, body: bytes) -> None:
        """Replace the plan of ``batch`` with ``body`` (``spark-sqs release``'s zero plan, as
        the release marker recorded it): removed, then created."""
        self.store.delete(plan_key(batch))
        self.store.create(plan_key(batch), body)
