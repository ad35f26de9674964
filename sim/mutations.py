"""``python -m sim.mutations``: revert each fix of the exactly-once issue, the in-flight cap of
flow control, the duplicate window's two rules, and each fix for the unkind world (moved
journals, lying and lagging stores, stalls, clocks), in memory, one at a time, and count the
seeds the simulation needs to find it.
A mutation of an unkind-world fix runs its seeds in the dimensions that can express the fault.
Runs on: the simulator's process only.

A mutation is *found* by a seed that fails with it and passes without it (the open faults of
the unmutated code fail some seeds on their own; those do not count). Restarts keep
deleteAfterJournal (``--fixed-delete-mode``) so that only the known in-batch duplicates remain
as background.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sim.spark import UNKIND, run_seed
from sim.sweep import Variant
from spark_sqs.acknowledgement import deletes
from spark_sqs.acknowledgement.acknowledger import Acknowledger
from spark_sqs.driver import coordinator, offsets
from spark_sqs.driver import poison as driver_poison
from spark_sqs.driver.coordinator import Coordinator
from spark_sqs.driver.flow_control import FlowControl
from spark_sqs.errors import JournalError, JournalOutcomeUnknown
from spark_sqs.executor import duplicates, filtering, journaling, parts
from spark_sqs.executor import poison as executor_poison
from spark_sqs.journal import window
from spark_sqs.journal.batches import Batches, batch_dir
from spark_sqs.journal.entries import _PART, Entries
from spark_sqs.journal.lease import RECORDS_KEPT, Lease, LeaseRecord, lease_key
from spark_sqs.journal.meta import Meta
from spark_sqs.journal.plans import BatchPlan
from spark_sqs.journal.poison import PoisonRecords
from spark_sqs.journal.window import Window


@contextlib.contextmanager
def patched(target: Any, name: str, value: Any) -> Iterator[None]:
    # The attribute as stored, not as looked up: a staticmethod or classmethod read through
    # getattr would come back unwrapped, and an inherited one would stay on ``target``.
    own = vars(target)
    missing = object()
    original = own.get(name, missing)
    setattr(target, name, value)
    try:
        yield
    finally:
        if original is missing:
            delattr(target, name)
        else:
            setattr(target, name, original)


def _replan_every_time() -> contextlib.AbstractContextManager[None]:
    """Hole 1: a replay is planned from the current options, not from the stored plan."""
    original = Coordinator.plan

    def plan(self: Coordinator, start: Any, end: Any) -> Any:
        batch = offsets.batch_of(end)
        self.journal.store.delete(f"{batch_dir(batch)}/_plan.json")
        return original(self, start, end)

    return patched(Coordinator, "plan", plan)


def _loser_releases_everything() -> contextlib.AbstractContextManager[None]:
    """Hole 2: the attempt that loses the entry releases all it received."""
    return patched(journaling, "without", lambda table, ids: table)


def _unknown_outcome_releases() -> contextlib.AbstractContextManager[None]:
    """Hole 2: a journal write with an unknown outcome releases its messages."""
    original = Entries.write

    def write_entry(self: Entries, batch: int, receiver_: int, table: Any) -> bool:
        try:
            return original(self, batch, receiver_, table)
        except JournalOutcomeUnknown as exc:
            raise JournalError(str(exc), retriable=True) from None

    return patched(Entries, "write", write_entry)


@contextlib.contextmanager
def _no_straggler_check() -> Iterator[None]:
    """Hole 3: an attempt never checks whether its batch was acknowledged (or retired)
    meanwhile (its status always "live"; the retirement marker, read with the plan at the
    task's start, never found)."""
    original = Batches.plan_and_retirement

    def unretired(self: Batches, batch: int) -> tuple[Any, bool]:
        return original(self, batch)[0], False

    with (
        patched(Batches, "status", lambda self, batch, plan_id=None: "live"),
        patched(Batches, "plan_and_retirement", unretired),
    ):
        yield


def _parts_not_filtered() -> contextlib.AbstractContextManager[None]:
    """Hole 4: a retried deleteAfterJournal attempt filters only the plan's drop ids, not what
    its own earlier parts journaled."""
    original = parts._receive_parts

    def receive_parts(journal, client, partition, drops, earlier, clocks, plan):  # type: ignore[no-untyped-def]
        blind = [(k, t.slice(0, 0)) for k, t in earlier]
        return original(journal, client, partition, drops, blind, clocks, plan)

    return patched(parts, "_receive_parts", receive_parts)


def _adoption_renumbers() -> contextlib.AbstractContextManager[None]:
    """Hole 5: each adoption copies an orphan to the next free receiver number."""

    original = Entries.adopt

    def adopt_entry(
        self: Entries,
        orphan: int,
        source: int,
        batch: int,
        target: int,
        keep: Any = None,
        copies: Any = None,
    ) -> bool:
        fresh = target
        while self.read(batch, fresh) is not None:
            fresh += 1
        return original(self, orphan, source, batch, fresh, keep, copies)

    return patched(Entries, "adopt", adopt_entry)


def _no_lease() -> contextlib.AbstractContextManager[None]:
    """Hole 6: a second query on the journal starts beside the first."""

    def acquire(self: Lease) -> None:
        newest = self.newest()
        self.seq = (newest.seq + 1) if newest else 0
        self._write(self.seq)

    return patched(Lease, "acquire", acquire)


def _fences_collected() -> contextlib.AbstractContextManager[None]:
    """A takeover's fence deleted like any old lease record: an owner back from a long pause
    renews into the hole, and a listing that lags the new owner's records hides them."""

    def collect(self: Lease, seq: int, seqs: list[int]) -> None:
        for old in seqs:
            if old > seq - RECORDS_KEPT:
                break
            self._store.delete(lease_key(old))

    return patched(Lease, "_collect", collect)


def _seal_below_a_missing_part() -> contextlib.AbstractContextManager[None]:
    """A deleteAfterJournal attempt seals whatever parts it finds, even with a part it created
    gone (the journal deleted under it): the seal and the entry without that part's messages,
    already deleted from SQS, stay in the journal put back."""
    original = parts._seal

    def seal(*args: Any, **kwargs: Any) -> Any:
        kwargs["known"] = ()
        return original(*args, **kwargs)

    return patched(parts, "_seal", seal)


def _no_duplicate_window() -> contextlib.AbstractContextManager[None]:
    """Hole 7: receivers do not look copies up in the duplicate window."""
    return patched(duplicates, "copies", lambda *args, **kwargs: set())


def _no_in_flight_cap() -> contextlib.AbstractContextManager[None]:
    """maxInFlightMessages: a batch takes what the trigger asks for (at most the option), as if
    nothing were still unacknowledged."""
    original = FlowControl.batch_limit

    def batch_limit(self: FlowControl, limit: Any, in_flight: int) -> int:
        return original(self, limit, 0)

    return patched(FlowControl, "batch_limit", batch_limit)


def _segment_after_delete() -> contextlib.AbstractContextManager[None]:
    """Hole 7, the window's other rule: a deleter writes its window segment only after its
    delete returned, at every delete site (the driver's and the receivers' acknowledgements,
    deleteAfterJournal's parts, dropped redeliveries, the quarantine: all call
    ``acknowledgement.deletes.delete_messages``): a copy received and looked up in between, or
    after a deleter died between the two, is not in the window."""
    held = threading.local()  # per actor: each is a thread of its own (sim/sched.py)
    write_window = Window.write

    def hold_back(self: Window, *args: Any, **kwargs: Any) -> None:
        held.segments = [*getattr(held, "segments", []), (self, args, kwargs)]

    def write_held() -> None:
        segments, held.segments = getattr(held, "segments", []), []
        for journal, args, kwargs in segments:
            write_window(journal, *args, **kwargs)

    delete_groups = deletes._delete_groups

    def delete_then_write(*args: Any, **kwargs: Any) -> Any:
        # Written once the deletes returned or raised (an Exception; a crash writes nothing).
        try:
            result = delete_groups(*args, **kwargs)
        except Exception:
            write_held()
            raise
        write_held()
        return result

    stack = contextlib.ExitStack()
    stack.enter_context(patched(Window, "write", hold_back))
    stack.enter_context(patched(deletes, "_delete_groups", delete_then_write))
    return stack


def _seal_hides_later_segments() -> contextlib.AbstractContextManager[None]:
    """Hole 7, the seal: a window segment created after its batch was sealed (a straggler of a
    committed batch deleting a redelivery or a deleteAfterJournal part, a driver's delete of a
    batch a receiver sealed) stays where workers that read the seal never look again: no
    forwarding by its writer, no probe by the sealer after sealing (as when a merge hid every
    part written after it)."""
    stack = contextlib.ExitStack()
    stack.enter_context(patched(window, "forward", lambda store, data, batch: batch))
    stack.enter_context(patched(window, "forward_late", lambda store, batch, data: None))
    return stack


def _found_seal_not_probed() -> contextlib.AbstractContextManager[None]:
    """The duplicate window, a sealer killed between its seal's create and its probe: whoever
    finds the seal made (the sealer's retry, the driver before the removal) probes nothing, so
    a segment created while the dead sealer read stays hidden behind its seal."""
    return patched(window, "probe_sealed", lambda store, batch, sealed: None)


def _not_held_elsewhere() -> contextlib.AbstractContextManager[None]:
    """The defence that masks both hole-2 mutations and the window's segment written after its
    delete: a receiver drops (and deletes) messages that other entries and parts of the batch
    or pending batches hold."""
    return patched(filtering, "_held_elsewhere", lambda *args, **kwargs: frozenset())


def _both(*mutations: Callable[[], Any]) -> Callable[[], contextlib.AbstractContextManager[None]]:
    def apply() -> contextlib.AbstractContextManager[None]:
        stack = contextlib.ExitStack()
        for mutation in mutations:
            stack.enter_context(mutation())
        return stack

    return apply


def _checkpoint_not_checked() -> contextlib.AbstractContextManager[None]:
    """Moved journals: offsets Spark hands back are not checked against the journal (its
    identity and the numbers it handed out), so a run on a deleted, moved or swapped journal
    plans and receives."""
    stack = contextlib.ExitStack()
    stack.enter_context(patched(offsets.CheckpointGuard, "_refuse", lambda self, *a: None))
    stack.enter_context(patched(offsets.CheckpointGuard, "_check_identity", lambda self, *a: None))
    stack.enter_context(patched(offsets.CheckpointGuard, "foreign", lambda self, offset: None))
    return stack


def _probe_creates_once() -> contextlib.AbstractContextManager[None]:
    """Lying stores: the start-up probe creates one key once and never tries a second create,
    so a store that ignores create-if-absent is accepted."""

    def probe_writable(self: Meta) -> None:
        self.store.create("_probe/once", b"first")
        self.store.delete("_probe/once")

    return patched(Meta, "probe_writable", probe_writable)


def _parts_from_a_listing() -> contextlib.AbstractContextManager[None]:
    """Lagging listings: deleteAfterJournal's seal finds a receiver's parts by a LIST instead of
    reading part numbers by key until the first absent one."""

    def read_parts(self: Entries, batch: int, receiver: int, columns: Any = None) -> Any:
        found = []
        for key in self.store.list(batch_dir(batch)):
            m = _PART.match(key.rsplit("/", 1)[-1])
            if m and int(m.group(1)) == receiver:
                table = self.read_part(batch, receiver, int(m.group(2)), columns)
                if table is not None:
                    found.append((int(m.group(2)), table))
        return sorted(found, key=lambda kt: kt[0])

    return patched(Entries, "read_parts", read_parts)


def _stale_handles_journaled() -> contextlib.AbstractContextManager[None]:
    """Stalls: a receiver journals what it received however long ago, without asking SQS
    whether its handles are still its own."""
    return patched(journaling, "_still_held", lambda client, part, messages, *a: (messages, 0))


def _liveness_by_the_owner_s_clock() -> contextlib.AbstractContextManager[None]:
    """Clocks: a starting query judges the owner dead by comparing the record's writtenAt (the
    owner's wall clock) with its own wall clock, instead of watching the record."""
    original = Lease._wait_for_lapse

    def wait_for_lapse(self: Lease, seen: LeaseRecord) -> LeaseRecord:
        if self._wall() - seen.written_at > 2 * max(self._interval, seen.interval):
            return seen
        return original(self, seen)

    return patched(Lease, "_wait_for_lapse", wait_for_lapse)


def _lone_candidate_not_deferred() -> contextlib.AbstractContextManager[None]:
    """Poison: a lone candidate is quarantined after its failed attempts even while a receiver
    of the batch that receives never journaled (``decide``'s ``unjournaled`` ignored), so an
    innocent message of a batch whose runs all died before a sibling journaled goes to the
    dead-letter queue."""
    original = driver_poison.decide

    def decide(*args: Any, **kwargs: Any) -> driver_poison.Decision:
        return original(*args, **{**kwargs, "unjournaled": False})

    return patched(driver_poison, "decide", decide)


def _carry_drops_one() -> contextlib.AbstractContextManager[None]:
    """Poison: a narrowing step carries out all but the last of the messages it does not keep
    (that one is neither delivered by the replay nor journaled in the carry batch)."""
    original = driver_poison.decide

    def decide(*args: Any, **kwargs: Any) -> driver_poison.Decision:
        decision = original(*args, **kwargs)
        if decision.kind != "narrow" or not decision.carried:
            return decision
        carried = {r: list(ids) for r, ids in decision.carried.items()}
        last = max(carried)
        carried[last] = carried[last][:-1]
        carried = {r: ids for r, ids in carried.items() if ids}
        return driver_poison.Decision("narrow", keep=decision.keep, carried=carried)

    return patched(driver_poison, "decide", decide)


def _carried_also_kept() -> contextlib.AbstractContextManager[None]:
    """Poison: a narrowing step keeps what it carries out as well (the replay delivers the
    carried half, and so does the batch that adopts the carry batch)."""
    original = driver_poison.decide

    def decide(*args: Any, **kwargs: Any) -> driver_poison.Decision:
        decision = original(*args, **kwargs)
        if decision.kind != "narrow":
            return decision
        keep = {r: [*ids, *decision.carried.get(r, [])] for r, ids in decision.keep.items()}
        return driver_poison.Decision("narrow", keep=keep, carried=decision.carried)

    return patched(driver_poison, "decide", decide)


def _narrowing_not_applied() -> contextlib.AbstractContextManager[None]:
    """Poison: a receiver replaying a narrowed batch yields its whole entry, not what the
    step keeps (the carried messages come twice, the quarantined one reaches the sink)."""
    original = executor_poison.on_replay

    def on_replay(journal: Any, partition: Any, table: Any) -> executor_poison.Replay:
        return executor_poison.Replay(table, original(journal, partition, table).status)

    return patched(executor_poison, "on_replay", on_replay)


def _quarantine_sent_forgotten() -> contextlib.AbstractContextManager[None]:
    """Poison: the quarantine's ``.sent`` marker is never found, so every later plan of the
    batch that finishes the step sends the message to the dead-letter queue again."""
    return patched(PoisonRecords, "quarantine_sent", lambda self, batch, message_id: False)


def _carry_adoption_forgotten() -> contextlib.AbstractContextManager[None]:
    """Poison: a narrowed batch never learns that its carry batch was adopted, so finishing
    its step again (every replay does) creates the carry batch anew and the next plan adopts
    its messages a second time."""
    return patched(PoisonRecords, "carry_adopted", lambda self, batch, step: False)


def _handles_judged_before_deleting() -> contextlib.AbstractContextManager[None]:
    """Lapses: the driver deleting a batch itself judges whether each handle may have expired
    when it begins (its bounds against the clock then), not once its delete calls are made:
    a handle that lapses during the delete phase (its window segment, seal, retried calls, a
    pause) is taken for valid, and a message its delete left in the queue is in no dedupe
    record."""
    original = Acknowledger._handle_bounds

    def judged_now(self: Acknowledger, batch: int, receipts: Any) -> tuple[dict[str, float], set]:
        bounds, lost = original(self, batch, receipts)
        return {}, lost | self._expired(bounds)

    return patched(Acknowledger, "_handle_bounds", judged_now)


def _plan_identity_ignored() -> contextlib.AbstractContextManager[None]:
    """A plan's identity: every plan of a batch carries the same ``planId``, so an attempt of a
    removed plan takes the plan a deposed driver made again for the batch as its own, and
    journals into it (``Batches.status`` and the receiver's plan check find it "live")."""
    original = Coordinator._new_plan

    def same_id(self: Coordinator, batch: int, first: int) -> Any:
        plan = original(self, batch, first)  # its uuid drawn all the same
        return dataclasses.replace(plan, plan_id="0" * 32)

    return patched(Coordinator, "_new_plan", same_id)


def _pending_plan_identity_ignored() -> contextlib.AbstractContextManager[None]:
    """A pending batch's plan identity: a receiver takes the plan a deposed driver made again
    for a pending batch another query had adopted and removed for the batch's first plan, so
    what a straggler of that first plan wrote there (and then removes) holds a redelivered
    message, which the receiver drops and deletes: nobody delivers it."""
    return patched(BatchPlan, "pending_plan", lambda self, batch: None)


def _retired_batches_pending() -> contextlib.AbstractContextManager[None]:
    """A batch that a pending plan retired is pending again at a start (as before): with its
    adopter committed it is acknowledged, and what a straggler wrote into it after the
    retirement (and died before removing) is deleted, delivered by nobody."""
    return patched(coordinator, "retired_by", lambda plans: set())


def _step_without_the_lease() -> contextlib.AbstractContextManager[None]:
    """Poison: a driver decides and finishes a narrowing step without confirming that it still
    holds the journal's lease, so one paused while it read a batch's entries, which the new
    owner adopted and removed meanwhile, narrows or quarantines from what was left."""
    original = driver_poison.Quarantine.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._confirm = lambda: None

    return patched(driver_poison.Quarantine, "__init__", init)


@dataclass(frozen=True)
class Mutation:
    name: str
    hole: str
    apply: Callable[[], contextlib.AbstractContextManager[None]]
    # Dimensions of the unkind world its seeds run in (sim/spark.py UNKIND).
    unkind: frozenset[str] = frozenset()
    # A defence that masks the mutation, turned off with it: a seed finds the pair only if it
    # passes with that defence alone off (so that the find is the mutation's, not the
    # defence's).
    masked_by: Callable[[], contextlib.AbstractContextManager[None]] | None = None
    # The journal store's fault rate in every seed, when the fault it needs is a store fault
    # that the drawn rates bring too rarely (None: as drawn).
    store_faults: float | None = None
    # poisonMessagePolicy=deadLetter and a message the sink rejects (``python -m sim
    # --poison``), restarts switching deleteAfterJournal as the poison sweep's do.
    poison: bool = False
    # With poison: runs with faults are added until the message is quarantined (``python -m
    # sim --poison-faults``), for a rule whose fault needs a crash during narrowing.
    poison_faults: bool = False
    # Restarts keep deleteAfterJournal (the default, see the module's docstring); False: they
    # switch it as plain sweeps do, for a fault its found seeds need a switch for.
    fixed_delete_mode: bool = True

    def variant(self) -> Variant:
        """The world its seeds run in."""
        return Variant(
            fixed_delete_mode=self.fixed_delete_mode and not self.poison,
            poison=self.poison,
            unkind=self.unkind,
            store_faults=self.store_faults,
            poison_faults=self.poison_faults,
        )


MUTATIONS = [
    Mutation("replay replanned from current options", "1", _replan_every_time),
    Mutation("entry loser releases everything", "2", _loser_releases_everything),
    Mutation("unknown-outcome write releases", "2", _unknown_outcome_releases),
    Mutation("no straggler check", "3", _no_straggler_check),
    Mutation("deleteAfterJournal retry ignores own parts", "4", _parts_not_filtered),
    # Orphans are adopted only after takeovers and restores, which the unkind world makes common.
    Mutation("adoption renumbers", "5", _adoption_renumbers, frozenset(UNKIND)),
    Mutation("no journal lease", "6", _no_lease),
    Mutation("no duplicate window", "7", _no_duplicate_window),
    Mutation("in-flight cap ignores what is unacknowledged", "-", _no_in_flight_cap),
    Mutation(
        "entry loser releases everything, nothing dropped as held elsewhere",
        "2",
        _both(_loser_releases_everything, _not_held_elsewhere),
        frozenset(UNKIND),
        _not_held_elsewhere,
    ),
    Mutation(
        "unknown-outcome write releases, nothing dropped as held elsewhere",
        "2",
        _both(_unknown_outcome_releases, _not_held_elsewhere),
        # The kind world, with store faults in every seed: it needs an entry create whose
        # answer is lost (half the fault rate), and the drawn rates give none in about half the
        # seeds; with every unkind dimension those outcomes come too rarely beside the rest.
        frozenset(),
        _not_held_elsewhere,
        store_faults=0.03,
    ),
    Mutation(
        "checkpoint not checked against the journal",
        "moved journal",
        _checkpoint_not_checked,
        frozenset({"diverge"}),
    ),
    Mutation("probe creates once", "lying store", _probe_creates_once, frozenset({"lying"})),
    # An attempt's own parts missing from the lagging listing leave it without the seal (it
    # writes none below a part it created), so that check is off with the mutation.
    Mutation(
        "parts found by a LIST, a seal below a missing part",
        "lagging list",
        _both(_parts_from_a_listing, _seal_below_a_missing_part),
        frozenset({"lag"}),
        _seal_below_a_missing_part,
    ),
    Mutation("stale handles journaled", "stall", _stale_handles_journaled, frozenset({"stalls"})),
    Mutation(
        "liveness by the owner's clock",
        "clocks",
        _liveness_by_the_owner_s_clock,
        frozenset({"clocks"}),
    ),
    Mutation("window segment after its delete", "7", _segment_after_delete, frozenset({"races"})),
    # A message its delete left in the queue comes back at once, and the driver's window segment
    # (written before the delete) drops it for duplicateWindow: only the dedupe record holds
    # it past that, so the window is off with the mutation.
    Mutation(
        "the driver judges its handles before its deletes, no duplicate window",
        "lapses",
        _both(_handles_judged_before_deleting, _no_duplicate_window),
        frozenset({"lapses"}),
        _no_duplicate_window,
    ),
    # A deposed driver plans again a batch another query adopted and removed, while attempts
    # of its first plan still run: ``replans`` pauses a replaying driver at its plan read and
    # starts that query (none of seeds 0-2,999 of --unkind all, nor 3,600-5,000 of --unkind
    # all --poison, found it without).
    Mutation(
        "a plan's identity ignored",
        "plan identity",
        _plan_identity_ignored,
        frozenset({*UNKIND, "replans"}),
    ),
    # A driver paused at a replay's plan read (replans) for longer than a takeover needs, on a
    # store whose listing lags (lag).
    Mutation(
        "a takeover's fence collected",
        "lease fence",
        _fences_collected,
        frozenset({*UNKIND, "replans"}),
    ),
    # A straggler of a dead driver held between its part and its seal while the journal is
    # deleted and put back (diverge), on a run with deleteAfterJournal.
    Mutation(
        "a seal below a missing part",
        "diverge",
        _seal_below_a_missing_part,
        frozenset({*UNKIND, "replans"}),
    ),
    # A driver paused at a replay's plan read (replans) plans again a batch the query that
    # took over adopted and removed; a straggler of its first plan journals there meanwhile.
    # Its first seed switches deleteAfterJournal between runs (none of 0-5,999 in fixed mode).
    # The rule for retired batches found at a start (``_retired_batches_pending``) masks it
    # in that seed (not traced further): that rule is off with it.
    Mutation(
        "a pending batch's plan identity ignored, a retired batch pending at a start",
        "plan identity",
        _both(_pending_plan_identity_ignored, _retired_batches_pending),
        frozenset({*UNKIND, "replans"}),
        _retired_batches_pending,
        fixed_delete_mode=False,
    ),
    # A straggler of a retired batch dies after journaling into it; the adopter is committed
    # and the next start acknowledges the retired batch (replans: a deposed driver planned it
    # again, so it still has a plan).
    Mutation(
        "a retired batch pending at a start",
        "plan identity",
        _retired_batches_pending,
        frozenset({*UNKIND, "replans"}),
        fixed_delete_mode=False,
    ),
    # Stragglers that delete after their batch was sealed: stalls, waves and races make them.
    Mutation("a seal hides later segments", "7", _seal_hides_later_segments, frozenset(UNKIND)),
    Mutation(
        "a seal hides later segments, nothing dropped as held elsewhere",
        "7",
        _both(_seal_hides_later_segments, _not_held_elsewhere),
        frozenset(UNKIND),
        _not_held_elsewhere,
    ),
    Mutation(
        "a found seal probed nowhere, nothing dropped as held elsewhere",
        "7",
        _both(_found_seal_not_probed, _not_held_elsewhere),
        frozenset(UNKIND),
        _not_held_elsewhere,
    ),
    Mutation(
        "window segment after its delete, nothing dropped as held elsewhere",
        "7",
        _both(_segment_after_delete, _not_held_elsewhere),
        frozenset({"races"}),
        _not_held_elsewhere,
    ),
    # Found by one seed of the first 2,000 of the plain poison world (626) until the duplicate
    # window's seal probes moved the histories (none in 3,800 since); the world with faults
    # until the quarantine finds it at once.
    Mutation(
        "a lone candidate quarantined while a receiver never journaled",
        "poison",
        _lone_candidate_not_deferred,
        poison=True,
        poison_faults=True,
    ),
    Mutation("a narrowing drops a carried message", "poison", _carry_drops_one, poison=True),
    Mutation("a narrowing keeps what it carries", "poison", _carried_also_kept, poison=True),
    Mutation(
        "a narrowed replay yields the whole entry", "poison", _narrowing_not_applied, poison=True
    ),
    # A second send needs a crash between the quarantine and the batch's commit: the plain
    # poison world quarantines in the final drain, which has none.
    Mutation(
        "a quarantine forgets it was sent",
        "poison",
        _quarantine_sent_forgotten,
        poison=True,
        poison_faults=True,
    ),
    # Finishing a step again needs a run that replays the narrowed batch after the carry batch
    # was adopted, which the fault-free final drain rarely does: in the plain poison world only
    # seed 146 of the first 2,000 failed, on an innocent message quarantined after kills alone
    # (the documented limit, which the judge now excuses: sim/quarantines.py), none of the
    # first 300 since.
    Mutation(
        "a carry batch created again after its adoption",
        "poison",
        _carry_adoption_forgotten,
        poison=True,
        poison_faults=True,
    ),
    # Needs a driver paused in a replay's narrowing long enough to lose the journal, and a
    # new owner adopting that batch meanwhile: found at seed 4787 of --poison --unkind all.
    Mutation(
        "a narrowing step decided without the lease",
        "poison",
        _step_without_the_lease,
        frozenset(UNKIND),
        poison=True,
    ),
]


def hunt(mutation: Mutation, seeds: int, first: int = 0) -> tuple[int | None, int, str]:
    """(first seed that finds it, seeds run, its violation)."""
    variant = mutation.variant()
    for n, seed in enumerate(range(first, first + seeds), start=1):
        with mutation.apply():
            mutated = run_seed(seed, configure=variant)
        if mutated.ok:
            continue
        if mutation.masked_by is not None:
            with mutation.masked_by():
                if not run_seed(seed, configure=variant).ok:
                    continue
        if run_seed(seed, configure=variant).ok:
            return seed, n, mutated.violations[0]
    return None, seeds, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.mutations")
    parser.add_argument("--seeds", type=int, default=400, help="give up after this many seeds")
    parser.add_argument("--first", type=int, default=0, help="start at this seed")
    parser.add_argument("--only", help="run the mutations whose name contains this")
    args = parser.parse_args(argv)
    print("| mutation | hole | found | first seed | seeds run | first violation |")
    print("| --- | --- | --- | --- | --- | --- |")
    missed = 0
    for mutation in MUTATIONS:
        if args.only and args.only not in mutation.name:
            continue
        started = time.perf_counter()
        seed, runs, violation = hunt(mutation, args.seeds, args.first)
        missed += seed is None
        found = "yes" if seed is not None else "**no**"
        shown = violation.split(":")[0][:60] if violation else ""
        print(
            f"| {mutation.name} | {mutation.hole} | {found} | {seed if seed is not None else '-'} "
            f"| {runs} | {shown} |",
            flush=True,
        )
        print(f"  ({time.perf_counter() - started:.0f}s)", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
