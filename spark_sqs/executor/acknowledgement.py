"""Acknowledgement on executors: deleting the committed entries a batch's plan assigns to a
receiver. Runs on: executors.

Normally the driver does no per-message work to acknowledge a batch: the next batch's plan
spreads the committed entries over its receivers (``AckAssignment``), each deletes its share
with the 10-entry batch calls (``spark_sqs.sqs.batching``) and writes a report that the driver's
``Acknowledger`` (``spark_sqs.driver.acknowledger``) settles the batch from.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ..errors import TransientSqsError
from ..journal import AckAssignment, AckedEntry, Journal, window
from ..journal.reports import stops_of
from ..lag import LAG
from ..sqs.batching import BatchCaller, entries_of
from ..sqs.client import SqsClient

if TYPE_CHECKING:
    from .envelopes import PayloadDeleter

logger = logging.getLogger(__name__)


def uncertain_ids(message_ids: Sequence[str], lost: Iterable[str]) -> set[str]:
    """Messages whose delete may not take effect because the driver's heartbeat lost them
    (their handle went stale or expired before the plan was made). Whether a handle expired
    between the plan and the delete is judged by the driver, on its own clock, when it settles
    the batch (``spark_sqs.driver.acknowledger``): never here, against the executor's clock."""
    lost = set(lost)
    return {i for i in message_ids if i in lost}


def record_window(
    journal: Journal,
    seconds: float,
    message_ids: Sequence[tuple[str, str | None]],
    *,
    queue_url: str,
    batch: int,
    who: str,
    now: float,
) -> None:
    """Write the duplicate window's segment of ``message_ids`` (journal/window.py) before they
    are deleted: (id, queue) pairs, a queue of None meaning ``queue_url``. Ids of FIFO queues
    are left out (they never come back); nothing is written with the window off (0 s)."""
    if seconds <= 0:
        return
    ids = [i for i, q in message_ids if not window.is_fifo(q or queue_url)]
    journal.window.write(ids, batch=batch, who=who, expires_at=now + seconds)


def acknowledge_assigned(
    journal: Journal,
    client: SqsClient,
    queue_url: str,
    batch: int,
    receiver: int,
    assignments: Sequence[AckAssignment],
    *,
    on_deleted: PayloadDeleter | None = None,
    wall_clock: Callable[[], float] = time.time,
    duplicate_window: float = 0.0,
) -> list[AckedEntry]:
    """Runs on executors: delete the messages of the committed entries assigned to receiver
    ``receiver`` of ``batch`` (spread over all of its receivers by the batch's plan), then
    record what was done. Idempotent: a retried or concurrent attempt deletes again (harmless)
    and an entry already removed was acknowledged before. Transient failures that outlast the
    retries fail the task, so that Spark retries it: the batch only commits once every
    assigned delete was made."""
    caller = BatchCaller(client, queue_url)
    entries: list[AckedEntry] = []
    uncertain: set[str] = set()
    # Ids and handles only: the entries' bodies are never read here.
    found = [
        receipts
        for a in assignments
        if (receipts := journal.entries.read_receipts(a.batch, a.receiver)) is not None
    ]
    # Before any delete: a copy SQS delivers after it must find its id in the window.
    record_window(
        journal,
        duplicate_window,
        [pair for r in found for pair in r.journaled]
        # duplicateAttribute values: one receiver's entry is of one queue.
        + [(k, r.journaled[0][1]) for r in found if r.journaled for k in r.window_keys],
        queue_url=queue_url,
        batch=batch,
        who=f"r{receiver:06d}-ack",
        now=wall_clock(),
    )
    by_entry = {(a.batch, a.receiver): a for a in assignments}
    for receipts in found:
        assignment = by_entry[(receipts.batch, receipts.receiver)]
        doubtful = uncertain_ids(receipts.message_ids, assignment.lost)
        result = caller.delete(entries_of(receipts))
        if result.transient:
            raise TransientSqsError(
                f"batch {batch} receiver {receiver}: {len(result.transient)} deletes of batch "
                f"{assignment.batch} failed transiently ({sorted(set(result.transient.values()))})"
            )
        doubtful.update(result.permanent)
        if on_deleted is not None:
            on_deleted([receipts], doubtful)
        uncertain |= doubtful
        entries.append(
            AckedEntry(
                batch=assignment.batch,
                receiver=assignment.receiver,
                rows=receipts.rows,
                dropped=receipts.dropped,
                window_dropped=receipts.window_dropped,
                expired_dropped=receipts.expired_dropped,
                deleted=len(result.succeeded),
                delete_failures=len(result.permanent),
                uncertain=tuple(sorted(doubtful)),
                lag=receipts.metadata.get(LAG, b"").decode() or None,
                stops=stops_of(receipts.metadata),
            )
        )
    found_keys = {(r.batch, r.receiver) for r in found}
    missing = [
        (a.batch, a.receiver) for a in assignments if (a.batch, a.receiver) not in found_keys
    ]
    if missing:
        # Every assigned entry existed when its batch committed: one this attempt does not find
        # (an executor that cannot see the journal, a journal put back from a copy) is reported,
        # and its batch is deleted by the driver instead.
        logger.warning(
            "batch %d receiver %d: assigned entries %s not found; the driver acknowledges them",
            batch,
            receiver,
            missing,
        )
    journal.write_ack_report(batch, receiver, entries, missing)
    if entries:
        logger.info(
            "batch %d receiver %d: acknowledged %d entries of batches %s (%d messages deleted, "
            "%d uncertain)",
            batch,
            receiver,
            len(entries),
            sorted({e.batch for e in entries}),
            sum(e.deleted for e in entries),
            len(uncertain),
        )
    return entries
