"""Acknowledgement on executors: deleting the committed entries a batch's plan assigns to a
receiver. Runs on: executors.

Normally the driver does no per-message work to acknowledge a batch: the next batch's plan
spreads the committed entries over its receivers (``AckAssignment``), each deletes its share
(``deletes``) and writes a report (``reports``) that the driver's ``Acknowledger``
(``acknowledger``) settles the batch from.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..errors import TransientSqsError
from ..journal import AckAssignment, Journal
from ..journal.window import Seal, receiver_writer
from ..sqs.batching import BatchCaller, entries_of, process_pool
from ..sqs.client import SqsClient
from .deletes import delete_messages, lost_ids, window_ids
from .reports import AckedEntry, AckReports, entry_of

if TYPE_CHECKING:
    from ..executor.envelopes import PayloadDeleter

logger = logging.getLogger(__name__)


def acknowledge_assigned(
    journal: Journal,
    client: SqsClient,
    queue_url: str,
    batch: int,
    receiver: int,
    assignments: Sequence[AckAssignment],
    *,
    on_deleted: PayloadDeleter | None = None,
    clock: Callable[[], float] = time.monotonic,
    duplicate_window: float = 0.0,
    seal: Seal | None = None,
) -> list[AckedEntry]:
    """Runs on executors: delete the messages of the committed entries assigned to receiver
    ``receiver`` of ``batch`` (spread over all of its receivers by the batch's plan), then
    record what was done. Idempotent: a retried or concurrent attempt deletes again (harmless)
    and an entry already removed was acknowledged before. Transient failures that outlast the
    retries fail the task, so that Spark retries it: the batch only commits once every
    assigned delete was made. ``seal``: this receiver seals the previous batch's window
    segments with the ids it deletes (journal/window.py). ``clock``: the monotonic clock that
    tells a stall before a delete (``delete_messages``)."""
    # Every batch's receivers delete: on threads their worker keeps from task to task.
    caller = BatchCaller(client, queue_url, pool=process_pool())
    entries: list[AckedEntry] = []
    uncertain: set[str] = set()
    # Ids and handles only: the entries' bodies are never read here.
    found = [
        receipts
        for a in assignments
        if (receipts := journal.entries.read_receipts(a.batch, a.receiver)) is not None
    ]
    by_entry = {(a.batch, a.receiver): a for a in assignments}
    # One window segment for every entry, before any delete; then one delete per entry.
    deletion = delete_messages(
        journal,
        caller,
        [entries_of(r) for r in found],
        window=window_ids(found),
        queue_url=queue_url,
        duplicate_window=duplicate_window,
        batch=batch,
        who=receiver_writer(receiver),
        clock=clock,
        doubtful=[lost_ids(r.message_ids, by_entry[(r.batch, r.receiver)].lost) for r in found],
        seal=seal,
    )
    for receipts, deleted in zip(found, deletion.groups, strict=False):
        result = deleted.result
        if result.transient:
            raise TransientSqsError(
                f"batch {batch} receiver {receiver}: {len(result.transient)} deletes of batch "
                f"{receipts.batch} failed transiently ({sorted(set(result.transient.values()))})"
            )
        if on_deleted is not None:
            on_deleted([receipts], deleted.uncertain)
        uncertain |= deleted.uncertain
        entries.append(
            entry_of(
                receipts,
                deleted=deleted.deleted,
                delete_failures=deleted.failures,
                uncertain=deleted.uncertain,
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
    AckReports(journal).write(batch, receiver, entries, missing)
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
