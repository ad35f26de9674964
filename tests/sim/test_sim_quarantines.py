"""The judge of quarantines (sim/quarantines.py): a message other than the poison one in the
dead-letter queue is excused only when the simulation's record shows the policy's documented
limit (runs killed or faulted at the narrowing step before its quarantine, as many as the
policy needs there, none failed by the poison message). Constructed records; the seeds that
meet the limit are in test_simulation.py."""

from __future__ import annotations

from sim.quarantines import COMMITTED, MAX_BATCH_ATTEMPTS, POISON, Quarantines
from spark_sqs.journal.batches import batch_dir
from spark_sqs.journal.plans import BatchPlan, ReceiverPlan
from spark_sqs.journal.poison import Narrowing

BATCH = 7
INNOCENT = "innocent-id"


def _journal(
    *, receiving: tuple[int, ...] = (), journaled: tuple[int, ...] = (), suspect: bool = False
) -> dict[str, bytes]:
    d = batch_dir(BATCH)
    plan = BatchPlan(BATCH, tuple(ReceiverPlan(r, 5 if r in receiving else 0) for r in (0, 1)))
    keys = {f"{d}/_plan.json": plan.to_json()}
    keys |= {f"{d}/{r:05d}.arrow": b"entry" for r in journaled}
    if suspect:
        keys[f"{d}/_suspect.json"] = b"{}"
    return keys


def _narrow(step: int, quarantined: tuple[str, ...] = ()) -> tuple[str, bytes]:
    keep: dict[int, list[str]] = {0: [] if quarantined else [INNOCENT]}
    doc = Narrowing(step=step, keep=keep, quarantined=quarantined).to_json()
    return f"{batch_dir(BATCH)}/_narrow-{step:04d}.json", doc


def _record(
    runs: list[tuple[str, bool, str | None]],
    *,
    at: int = 2,
    journal: dict[str, bytes] | None = None,
) -> Quarantines:
    """Runs that planned the batch at step ``at`` (name, touched an entry, outcome), then the
    decision at ``at + 1`` that quarantines the innocent message."""
    q = Quarantines()
    store = dict(journal if journal is not None else _journal(journaled=(0, 1)))
    if at:
        key, doc = _narrow(at)
        store[key] = doc
    for run, touched, outcome in runs:
        q.planned(run, BATCH, sorted(store))
        if touched:
            q.touched(run, BATCH)
        if outcome is not None:
            q.ended(run, {BATCH}, outcome)
    key, doc = _narrow(at + 1, (INNOCENT,))
    store[key] = doc
    q.narrowed(key, store.get)
    return q


def test_a_quarantine_after_runs_killed_at_its_step_is_the_documented_limit() -> None:
    q = _record([("run3", True, None)])
    why = q.excuse(INNOCENT)
    assert why is not None
    assert "run3" in why and "step 2" in why


def test_a_run_failed_by_the_poison_message_at_that_step_is_never_excused() -> None:
    # The replay of the step delivered the poison message (a narrowing not applied, a receiver
    # that received it afresh): the quarantine of the innocent one is not the limit.
    q = _record([("run3", True, None), ("run4", True, POISON)])
    assert q.excuse(INNOCENT) is None
    assert "run4:poison" in q.why_not(INNOCENT)


def test_a_step_that_committed_is_never_excused() -> None:
    assert _record([("run3", True, None), ("run4", True, COMMITTED)]).excuse(INNOCENT) is None


def test_no_decision_seen_is_never_excused() -> None:
    q = _record([("run3", True, None)])
    assert q.excuse("another-id") is None
    assert "no quarantine decision" in q.why_not("another-id")


def test_runs_that_never_read_the_batch_are_not_attempts() -> None:
    # Killed between the plan and any task's read: the journal counted nothing, nor does the
    # judge, so the quarantine followed no failed attempt at all.
    assert _record([("run3", False, None), ("run4", False, None)]).excuse(INNOCENT) is None


def test_runs_at_another_step_do_not_count() -> None:
    q = Quarantines()
    store = _journal(journaled=(0, 1))
    key, doc = _narrow(1)
    store[key] = doc
    q.planned("run3", BATCH, sorted(store))  # at step 1
    q.touched("run3", BATCH)
    key, doc = _narrow(2)
    store[key] = doc
    key, doc = _narrow(3, (INNOCENT,))
    store[key] = doc
    q.narrowed(key, store.get)  # decided at step 3: the failures it needs are at step 2
    assert q.excuse(INNOCENT) is None


def test_step_zero_needs_max_batch_attempts_unless_the_batch_is_suspect() -> None:
    one = [("run3", True, None)]
    two = [("run3", True, None), ("run4", True, None)]
    assert MAX_BATCH_ATTEMPTS == 2
    assert _record(one, at=0).excuse(INNOCENT) is None
    assert _record(two, at=0).excuse(INNOCENT) is not None
    suspect = _journal(journaled=(0, 1), suspect=True)
    assert _record(one, at=0, journal=suspect).excuse(INNOCENT) is not None


def test_a_receiver_that_receives_without_an_entry_needs_max_batch_attempts_more() -> None:
    # The decision of spark_sqs.driver.poison.decide's ``unjournaled``: the judge reads the
    # plan and the entries by key when the decision is created.
    waiting = _journal(receiving=(1,), journaled=(0,))
    two = [("run3", True, None), ("run4", True, None)]
    three = [*two, ("run5", True, None)]
    assert _record(two, at=2, journal=waiting).excuse(INNOCENT) is None
    assert _record(three, at=2, journal=waiting).excuse(INNOCENT) is not None
    # An adopted receiver (limit 0) or one that journaled does not wait.
    assert _record([("run3", True, None)], journal=_journal(journaled=(0,))).excuse(INNOCENT)


def test_a_message_carried_out_after_the_sink_took_its_batch_is_the_narrowing_limit() -> None:
    # A run's sink took journal batch 7 as sink batch 4 and the run died before Spark's commit
    # log; the next plan narrowed it and carried the message out (a sink that skips batch 4 on
    # the replay never runs it): the documented duplicate of what a step leaves out.
    q = Quarantines()
    store = _journal(journaled=(0, 1))
    key, doc = _narrow(1)
    store[key] = doc
    q.narrowed(key, store.get)  # carried out before the sink took the batch: not this limit
    q.sank("run3", {BATCH}, 4)
    step = Narrowing(step=2, keep={0: ["kept-id"]}, carried={0: [INNOCENT]}).to_json()
    key = f"{batch_dir(BATCH)}/_narrow-0002.json"
    store[key] = step
    q.narrowed(key, store.get)
    assert q.carried_after_sink(INNOCENT) == [4]
    assert q.carried_after_sink("kept-id") == []
    # Carried out only before the sink's take: its replays never held it.
    early = Quarantines()
    carried = Narrowing(step=1, keep={0: []}, carried={0: [INNOCENT]}).to_json()
    early.narrowed(key, {key: carried}.get)
    early.sank("run3", {BATCH}, 4)
    assert early.carried_after_sink(INNOCENT) == []
