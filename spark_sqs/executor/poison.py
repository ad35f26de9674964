"""Poison batches on executors: counting the attempts that read a batch, refusing a batch that
failed too often (``poisonMessagePolicy=fail``) and delivering only what a narrowed batch keeps.
Runs on: executors (the hooks of ``read_partition``). The receiver's poison decisions are all
here: ``on_replay`` on a replay, ``first_attempt`` in each entry it journals.

The records and the whole mechanism are described in ``spark_sqs.journal.poison``; the driver's
side (narrowing, quarantine, release) is ``spark_sqs.driver.poison``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from ..driver.planning import ADOPTED_FROM, ReceiverPartition
from ..errors import JournalError, SqsSourceError
from ..journal import LIVE
from ..journal import poison as records

if TYPE_CHECKING:
    from ..journal import Journal
    from ..options import SqsOptions

logger = logging.getLogger(__name__)


class PoisonBatchError(SqsSourceError):
    """A batch was read by ``maxBatchAttempts`` attempts that did not complete."""


def attempt_key(run: str) -> str:
    """This task attempt's key: the driver run that planned it, and Spark's stage and task
    attempt numbers (not the stage id: each Spark job of one foreachBatch call is a new stage
    with attempt 0, and counts as the same attempt)."""
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
    except Exception:  # pragma: no cover - pyspark is always importable where this runs
        context = None
    if context is None:
        return f"{run or 'norun'}-s0-t0"
    # PySpark's TaskContext has no stage attempt number (Scala's has): a stage retry whose task
    # attempt numbers restart at 0 counts with the earlier attempt of its run.
    stage_attempt = getattr(context, "stageAttemptNumber", None)
    stage = stage_attempt() if callable(stage_attempt) else 0
    return f"{run or 'norun'}-s{stage}-t{context.attemptNumber()}"


def first_attempt(partition: ReceiverPartition) -> dict[bytes, bytes]:
    """The metadata a new entry records of the attempt that journals it: the first attempt is
    counted by its entry, at no extra write (``on_replay`` counts it)."""
    return {records.FIRST_ATTEMPT: attempt_key(partition.run).encode()}


def record_attempt(
    journal: Journal,
    batch: int,
    receiver: int,
    key: str,
    step: int,
    plan_id: str | None = None,
) -> str | None:
    """Create this attempt's record; a record that cannot be written only undercounts.
    Returns the batch's status (``Batches.status``) as read after the record, None if the
    record or that read failed.

    A straggler may read the entry just before the batch is acknowledged and its files
    removed: its record would outlive the batch. The acknowledgement marks the batch finished
    (its plan removed) first, so one created after that sees it here and removes itself; one
    created before is not named by the removal (by key) and goes with the driver's next sweep
    of finished batches (``Batches.collect``)."""
    try:
        journal.poison.write_attempt(batch, receiver, key, step, time.time())
        status = journal.batches.status(batch, plan_id)
        if status != LIVE:
            journal.poison.remove_attempt(batch, receiver, key, step)
        return status
    except JournalError as exc:
        logger.warning(
            "batch %d receiver %d: could not record the attempt: %s", batch, receiver, exc
        )
        return None


@dataclass(frozen=True)
class Replay:
    """What ``on_replay`` leaves of a replayed entry, and the batch's status as read after the
    attempt's record (None if it was not read: the receiver reads it then)."""

    table: pa.Table
    status: str | None


def on_replay(journal: Journal, partition: ReceiverPartition, table: pa.Table) -> Replay:
    """A receiver found its entry (a retried task, a replay): record the attempt, then either
    refuse (``fail``, too many attempts) or deliver what the batch's narrowing keeps. Whether
    the batch is still live is the receiver's decision; the status read that follows the
    record serves it."""
    options = partition.options
    names = journal.poison.names(partition.batch)
    narrowing = journal.poison.latest_narrowing(partition.batch, names)
    step = narrowing.step if narrowing is not None else 0
    key = attempt_key(getattr(partition, "run", ""))
    status = record_attempt(
        journal, partition.batch, partition.receiver, key, step, partition.plan_id
    )
    if options.poison_message_policy == records.FAIL:
        earlier = {a.key for a in journal.poison.attempts(partition.batch, names)}
        first = records.first_attempt(table)
        if first is not None and partition.receiver < ADOPTED_FROM:
            earlier.add(first)
        earlier.discard(key)
        if len(earlier) >= options.max_batch_attempts:
            raise PoisonBatchError(fail_message(options, partition.batch, len(earlier) + 1))
    if narrowing is None or partition.receiver not in narrowing.keep:
        return Replay(table, status)
    return Replay(records.keep_only(table, set(narrowing.keep[partition.receiver])), status)


def fail_message(options: SqsOptions, batch: int, attempts: int) -> str:
    return (
        f"batch {batch} has been read by {attempts} attempts and none completed "
        f"(poisonMessagePolicy=fail, maxBatchAttempts={options.max_batch_attempts}): a message "
        "in it probably makes the query fail every time. Its messages are held in the journal; "
        "nothing was deleted. Fix: stop the query, find the message (`spark-sqs inspect "
        f"--queue-url URL --journal {options.journal_location}`), then run `spark-sqs release "
        f"--journal {options.journal_location} --batch {batch}` to make the batch's messages "
        "visible in the queue again (its redrive policy then applies), or restart with "
        "poisonMessagePolicy=deadLetter to quarantine the message automatically. If the "
        "attempts were runs that were killed rather than failing (the sink may have committed "
        "the batch), do not release it: raise maxBatchAttempts and restart"
    )
