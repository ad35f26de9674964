"""The judge of quarantines under ``poisonMessagePolicy=deadLetter`` (Config.poison): which
message besides the poison one the end check accepts in the dead-letter queue. Runs on: the
simulator's process only.

The one exception is the policy's documented limit (docs/design.md, Limits: "Likewise a
quarantine: the journal counts reads, not failures, so runs killed every time quarantine the
one message a batch narrowed to"; docs/operations.md, poison messages): a narrowing step whose
replays all died for another reason than a message narrows an innocent message down to its
quarantine. The journal cannot tell a run killed from one whose sink failed, but the simulation
can: it made every fault and knows which runs its sink failed on the poison message. So a
message other than the poison one is excused in the dead-letter queue only when this record
shows that condition (``excuse``):

- the simulation saw the decision that quarantined it (``batches/<N>/_narrow-<Q>.json`` naming
  it), at step Q of journal batch N;
- at the step before, S = Q - 1, no run that planned N failed because its sink met the poison
  message (nor committed N), and at least as many runs that read N there were killed or
  faulted by the simulation as the policy needs before it moves on from a step
  (``required``: ``maxBatchAttempts`` at step 0 of a batch that is not suspect, one at a later
  step or at a suspect batch's step 0, and ``maxBatchAttempts`` more while a receiver of N that
  receives had no entry when the decision was taken: ``spark_sqs.driver.poison.decide``).

Everything else stays a failure, and an excused message must still be accounted for exactly
once (sim/spark.py ``_check_quarantined``): in the dead-letter queue once, not in the sink of
the checkpoint that quarantined it unless a killed run at that step gave it to the sink before
Spark's commit log (``sunk_at_the_step``: the narrowing's own limit, docs/design.md, Limits).
The same record serves two neighbouring limits: a second copy in a standard dead-letter queue
after a run died between the send and its ``.sent`` marker (``copies``), and a message a step
carried out after a sink that skips batches it has took the batch (``carried_after_sink``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from spark_sqs.driver.planning import ADOPTED_FROM
from spark_sqs.journal.batches import batch_dir
from spark_sqs.journal.plans import BatchPlan

# sim/spark.py RunOptions.parse: poisonMessagePolicy=deadLetter's maxBatchAttempts.
MAX_BATCH_ATTEMPTS = 2

NARROW_KEY = re.compile(r"^batches/(\d+)/_narrow-(\d{4})\.json$")
_NARROW_NAME = re.compile(r"/_narrow-(\d{4})\.json$")

POISON = "poison"  # the run's sink failed on the poison message in this batch
COMMITTED = "committed"  # the batch entered the run's commit log
# Anything else (killed driver, tasks killed four times, store or SQS faults, the journal taken
# by another query) is the simulation's doing: the outcome stays None.


@dataclass
class _Planned:
    """One run's plan of a journal batch, under the batch's latest narrowing step then."""

    run: str
    read: bool = False  # a task of the run read or wrote one of the batch's entries
    outcome: str | None = None
    # The sink's batch id if the run's sink took the batch (the run may die before Spark's
    # commit log: the journal counts that as a failed attempt too).
    sank: int | None = None


@dataclass(frozen=True)
class Decision:
    """A quarantine the simulation saw decided: message ``message_id`` of journal ``batch`` at
    step ``step`` (the failures it followed are at ``step - 1``)."""

    batch: int
    step: int
    message_id: str
    suspect: bool
    unjournaled: tuple[int, ...]  # receivers that receive and had no entry at the decision
    epoch: int = 0  # the checkpoint of the run that decided it (sim/spark.py, sink epochs)

    @property
    def required(self) -> int:
        """Failed attempts at ``step - 1`` the policy needs before this decision."""
        base = MAX_BATCH_ATTEMPTS if self.step - 1 == 0 and not self.suspect else 1
        return base + (MAX_BATCH_ATTEMPTS if self.unjournaled else 0)


@dataclass
class Quarantines:
    """What the simulation saw of narrowing steps, the runs that read them and how each ended,
    and the quarantine decisions (one place for the exception, see the module docstring)."""

    _planned: dict[tuple[int, int], list[_Planned]] = field(default_factory=dict)
    _latest: dict[tuple[str, int], _Planned] = field(default_factory=dict)  # (run, batch)
    decisions: dict[str, Decision] = field(default_factory=dict)
    # The order of what follows: sink takes of narrowed batches, and narrowing steps.
    _events: int = 0
    # Sink batch ids that took a journal batch, with when: (event, journal batch, sink batch).
    _sunk: list[tuple[int, int, int]] = field(default_factory=list)
    # What each narrowing step carried out, with when, by (journal batch, step).
    _carried: dict[tuple[int, int], tuple[int, frozenset[str]]] = field(default_factory=dict)
    # Sends to the dead-letter queue, by source message id: [run, its ``.sent`` marker seen].
    _sends: dict[str, list[list[str | bool]]] = field(default_factory=dict)

    # -- the record --------------------------------------------------------------------------

    def planned(self, run: str, batch: int, keys: list[str]) -> None:
        """``run`` planned journal ``batch`` (``partitions``); ``keys``: the journal's keys
        then, whose latest ``_narrow-<step>`` of the batch is the step its replay runs under."""
        prefix = batch_dir(batch) + "/"
        steps = [
            int(m.group(1)) for k in keys if k.startswith(prefix) and (m := _NARROW_NAME.search(k))
        ]
        entry = _Planned(run)
        self._planned.setdefault((batch, max(steps, default=0)), []).append(entry)
        self._latest[(run, batch)] = entry

    def touched(self, run: str, batch: int) -> None:
        """A task of ``run`` read or wrote an entry of ``batch``: the plan was attempted."""
        entry = self._latest.get((run, batch))
        if entry is not None:
            entry.read = True

    def sank(self, run: str, batches: set[int], sink_batch: int) -> None:
        """``run``'s sink took its Spark batch (``sink_batch``) holding ``batches``."""
        self._events += 1
        for batch in batches:
            self._sunk.append((self._events, batch, sink_batch))
            entry = self._latest.get((run, batch))
            if entry is not None:
                entry.sank = sink_batch

    def carried_after_sink(self, message_id: str) -> list[int]:
        """The sink batch ids that took a journal batch from which a later narrowing step
        carried ``message_id`` out: the step counted the run that gave the batch to the sink
        (and died before Spark's commit log) as a failed attempt, and the carried message
        arrives again in a later batch (docs/design.md, Limits: duplicates of at most what the
        step left out). A sink that skips a batch id it has never runs that narrowed replay,
        so no execution of it shows the message left out."""
        out = []
        for at, batch, sink_batch in self._sunk:
            for (narrowed, _), (when, ids) in self._carried.items():
                if narrowed == batch and when > at and message_id in ids:
                    out.append(sink_batch)
                    break
        return out

    def sunk_at_the_step(self, message_id: str) -> list[int]:
        """The sink batch ids that runs at the step before ``message_id``'s quarantine gave to
        the sink before they died (before Spark's commit log): the documented limit of
        docs/design.md (a driver that died after the sink committed counts like a failing
        sink), whose left-out message is in the sink and, quarantined, in the dead-letter
        queue."""
        decision = self.decisions.get(message_id)
        if decision is None:
            return []
        runs = self._planned.get((decision.batch, decision.step - 1), [])
        return [p.sank for p in runs if p.sank is not None and p.outcome is None]

    def ended(self, run: str, batches: set[int], outcome: str) -> None:
        """``run``'s Spark batch holding ``batches`` committed, or failed on the poison."""
        for batch in batches:
            entry = self._latest.get((run, batch))
            if entry is not None and entry.outcome is None:
                entry.outcome = outcome

    def narrowed(self, key: str, peek: Callable[[str], bytes | None], epoch: int = 0) -> None:
        """A ``_narrow-<step>.json`` record was created (``peek``: the journal by key, as it is
        now). One that quarantines is a decision; its batch's plan, suspect marker and own
        receivers' entries are read now, by key, as the driver's decision read them."""
        match = NARROW_KEY.match(key)
        data = peek(key) if match is not None else None
        if match is None or data is None:
            return
        batch, step = int(match.group(1)), int(match.group(2))
        doc = json.loads(data)
        if (batch, step) not in self._carried:
            self._events += 1
            carried = frozenset(i for ids in doc.get("carried", {}).values() for i in ids)
            self._carried[(batch, step)] = (self._events, carried)
        quarantined = doc.get("quarantined", [])
        if not quarantined:
            return
        directory = batch_dir(batch)
        plan = peek(f"{directory}/_plan.json")
        receiving = (
            [r.receiver for r in BatchPlan.from_json(plan).receivers if r.limit > 0]
            if plan is not None
            else []
        )
        unjournaled = tuple(
            r for r in receiving if r < ADOPTED_FROM and peek(f"{directory}/{r:05d}.arrow") is None
        )
        suspect = peek(f"{directory}/_suspect.json") is not None
        for message_id in quarantined:
            self.decisions.setdefault(
                message_id, Decision(batch, step, message_id, suspect, unjournaled, epoch)
            )

    def sent(self, message_id: str, run: str) -> None:
        """``run`` sent a copy of ``message_id`` to the dead-letter queue."""
        self._sends.setdefault(message_id, []).append([run, False])

    def marked(self, message_id: str, run: str) -> None:
        """``run`` created the quarantine's ``.sent`` marker: its last send is recorded."""
        for send in reversed(self._sends.get(message_id, [])):
            if send[0] == run and not send[1]:
                send[1] = True
                return

    # -- the judge ---------------------------------------------------------------------------

    def excuse(self, message_id: str) -> str | None:
        """Why ``message_id`` (not the poison message) may be in the dead-letter queue: the
        documented limit as this record shows it; None if the record does not show it."""
        decision = self.decisions.get(message_id)
        if decision is None:
            return None
        at = decision.step - 1
        runs = self._planned.get((decision.batch, at), [])
        if any(p.outcome in (POISON, COMMITTED) for p in runs):
            return None
        faulted = [p.run for p in runs if p.read and p.outcome is None]
        if len(faulted) < decision.required:
            return None
        return (
            f"quarantined from journal batch {decision.batch} at step {decision.step} after "
            f"{len(faulted)} run(s) at step {at} killed or faulted by the simulation "
            f"({', '.join(faulted)}; the policy moves on after {decision.required}), none "
            "failed by the poison message"
        )

    def copies(self, message_id: str, copies: int) -> str | None:
        """Why ``copies`` (more than one) of ``message_id`` may be in a standard dead-letter
        queue: the documented crash window (docs/operations.md, poison messages; the crash
        table of docs/design.md): a run sent it and died before its ``.sent`` marker, and a
        later plan of the batch sent it again. Each extra copy needs such a send; None if the
        record shows fewer."""
        unmarked = [str(run) for run, done in self._sends.get(message_id, []) if not done]
        if copies - 1 > len(unmarked):
            return None
        return (
            f"{copies} copies: {', '.join(unmarked)} sent it and died before the .sent marker, "
            "a later plan sent it again"
        )

    def why_not(self, message_id: str) -> str:
        """What the record shows of a quarantine ``excuse`` does not excuse."""
        decision = self.decisions.get(message_id)
        if decision is None:
            return "no quarantine decision of it seen"
        at = decision.step - 1
        runs = self._planned.get((decision.batch, at), [])
        shown = ", ".join(
            f"{p.run}:{p.outcome or 'faulted'}{'' if p.read else ' (never read it)'}" for p in runs
        )
        return (
            f"quarantined from journal batch {decision.batch} at step {decision.step}; runs at "
            f"step {at}: {shown or 'none'} (needs {decision.required} faulted, none on the "
            "poison message, none committed)"
        )
