"""Receiving on executors: one receiver per input partition. Runs on: executors.

``read_partition`` is the receive pipeline, the same for both delete modes. It either replays
the receiver's journal entry for the batch (a retried task or a restarted query; nothing once
the batch was adopted or acknowledged), or:

1. acknowledges the committed batches the plan assigned to it (``acknowledgement.assigned``);
2. receives (``receiving.py``);
3. filters out what other records hold: drops, held elsewhere, window copies
   (``filtering.py``);
4. journals the rest (``journaling.py``; under deleteAfterJournal per receive call, as parts
   sealed into the entry: ``parts.py``);
5. yields the entry's rows.

Either way the rows are produced from the same Arrow table, so a replay is exactly the first
attempt. Poison decisions are ``poison.py``'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, cast

import pyarrow as pa

from ..acknowledgement.assigned import acknowledge_assigned
from ..driver.planning import ReceiverPartition
from ..errors import JournalError
from ..journal import (
    DROPPED,
    EXPIRED_DROPPED,
    RECEIVED_AT,
    STOPPED_BY,
    WINDOW_DROPPED,
    BatchPlan,
    Journal,
    window,
)
from ..schema import messages_to_table, output_batches
from ..sqs.client import SqsClient, cached_client
from . import collection, filtering, journaling, memory, parts, poison, receiving
from .envelopes import PayloadDeleter
from .extension import extend_journaled
from .receiving import Clocks

if TYPE_CHECKING:
    from ..journal import EntryReceipts
    from ..options import SqsOptions

logger = logging.getLogger(__name__)


def read_partition(
    partition: ReceiverPartition,
    *,
    client_factory: Callable[[], SqsClient] | None = None,
    journal: Journal | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[pa.RecordBatch]:
    """The body of ``SqsStreamReader.read``: replay the journal entry or receive and journal.

    ``clock``, ``wall_clock`` and ``sleep`` (of batch-call retries) are seams for the
    deterministic simulation (sim/); Spark's executors use the defaults."""
    options = partition.options
    clocks = Clocks(clock, wall_clock, sleep)
    if journal is None:
        journal = Journal(options.journal_location, options)
    table = journal.entries.read(partition.batch, partition.receiver)
    if table is not None:
        yield from _replay(journal, partition, table)
        return
    planned = _planned(journal, partition)
    if planned is None:
        return
    plan, partition = planned
    drops = filtering.drops(journal, partition, plan)
    if client_factory is not None:
        client = client_factory()
    else:
        client = cached_client(options.connection, wait_time_seconds=options.wait_time_seconds)
        # The worker now has what it keeps for its life (clients, journal store): PySpark's
        # collection after each task need not walk it again (collection.py).
        collection.freeze_long_lived()
    assigned = plan.acks_by(partition.receiver)
    seal = filtering.window_seal(journal, partition, plan)
    if seal is not None and not assigned:
        # The sealer with nothing to acknowledge seals with no ids of its own.
        journal.window.write(
            [],
            batch=partition.batch,
            who=window.receiver_writer(partition.receiver),
            seal=seal,
        )
    if assigned:
        # Committed batches' messages, deleted here rather than by the driver, before this
        # receiver journals: a retry repeats the deletes; the batch commits only once all ran.
        acknowledge_assigned(
            journal,
            client,
            partition.queue_url,
            partition.batch,
            partition.receiver,
            assigned,
            on_deleted=_payload_deleter(options),
            clock=clock,
            duplicate_window=options.duplicate_window,
            seal=seal,
        )
    if plan.deletes_on_journal(options.delete_after_journal):
        yield from parts.read(journal, client, partition, drops, clocks, plan)
        return
    yield from _receive_and_journal(journal, client, partition, plan, drops, clocks)


def _replay(
    journal: Journal, partition: ReceiverPartition, table: pa.Table
) -> Iterator[pa.RecordBatch]:
    """Yield the receiver's journaled entry again, while its batch is live."""
    # Poison batches (poison.py): count this attempt; refuse (policy fail) or deliver only
    # what a narrowed batch keeps (policy deadLetter).
    replay = poison.on_replay(journal, partition, table)
    # The rule the first attempt applied after journaling (journaling.write_entry): a batch
    # adopted by a later batch (retired) or acknowledged (removed) delivers nothing, whoever
    # asks. An attempt that journaled after the adoption read the batch's entries, found it
    # retired and died before it returned leaves an entry no adoption copied: its messages
    # come back after their visibility timeout and the adopting query delivers them; a retry
    # that replayed it would deliver them twice (and, on FIFO, beside the copy the adoption
    # took of the receiver that held them first). The status is read after the entry (an
    # adoption after the read copies it), by the attempt's record when it could write one.
    if journaling.finished(journal, partition, replay.status) is not None:
        return
    table = _without_siblings_ids(journal, partition, replay.table)
    logger.info(
        "batch %d receiver %d: replayed %d messages from the journal",
        partition.batch,
        partition.receiver,
        table.num_rows,
    )
    yield from output_batches(table, partition.options.sns)


def _planned(
    journal: Journal, partition: ReceiverPartition
) -> tuple[BatchPlan, ReceiverPartition] | None:
    """The batch's stored plan, and the partition with its receiver's limits from it; None if
    this attempt delivers nothing (its batch was acknowledged or adopted)."""
    options = partition.options
    # The retirement marker is read before the plan (batches.py ``status``: a plan read after
    # an absent marker means the batch was not retired before the marker's read).
    stored, retired = journal.batches.plan_and_retirement(partition.batch)
    plan = cast("BatchPlan | None", stored)
    mine = plan.receiver(partition.receiver) if plan is not None else None
    if plan is None or mine is None:
        if plan is None and _removed_long_ago(journal, partition):
            return None
        raise JournalError(
            f"batch {partition.batch} receiver {partition.receiver}: the batch's plan is not in "
            f"journalLocation {options.journal_location} as this executor sees it, though the "
            "driver wrote it. Fix: on a cluster, use an s3://bucket/prefix journalLocation (a "
            "local path must be one file system shared by the driver and every executor). (A "
            "straggling attempt of a batch that was acknowledged meanwhile fails like this too; "
            "Spark discards it.)"
        )
    if None not in (partition.plan_id, plan.plan_id) and partition.plan_id != plan.plan_id:
        # Its own plan was removed (acknowledged, or adopted by another query) and a driver that
        # had lost the journal planned the batch again: that plan is not this attempt's.
        logger.warning(
            "batch %d receiver %d: the batch was removed and planned again since this attempt "
            "was planned; it delivers nothing",
            partition.batch,
            partition.receiver,
        )
        return None
    if retired:
        # A task of a dead driver: a later batch delivers this orphan's entries.
        logger.warning(
            "batch %d receiver %d: the batch was adopted by a later batch; this attempt "
            "delivers nothing",
            partition.batch,
            partition.receiver,
        )
        return None
    if mine.adopt_from is not None:
        # The driver copies adopted entries (an empty one for a source that vanished) before
        # it returns the partitions.
        raise JournalError(
            f"batch {partition.batch} receiver {partition.receiver}: the entry it delivers, "
            f"copied from batch {mine.adopt_from[0]}, is missing from journalLocation "
            f"{options.journal_location}. Fix: if the journal was changed by hand, stop the "
            f"query and run `spark-sqs release --journal {options.journal_location} --batch "
            f"{partition.batch}` (the batch then delivers nothing; its messages come back to "
            "the queue)"
        )
    # The plan's limits and count, not the partition's: a replay receives what the first plan
    # allowed.
    return plan, replace(
        partition, max_messages=mine.limit, visible=mine.visible, max_bytes=mine.max_bytes
    )


def _receive_and_journal(
    journal: Journal,
    client: SqsClient,
    partition: ReceiverPartition,
    plan: BatchPlan,
    drops: frozenset[str],
    clocks: Clocks,
) -> Iterator[pa.RecordBatch]:
    """The default delete mode: receive all, filter, journal the entry, yield it."""
    options = partition.options
    received_at = clocks.wall_clock()
    messages, stats = receiving.receive_messages(client, partition, clock=clocks.clock)
    kept, dropped, copies = filtering.sort_out(journal, plan, partition, messages, drops, clocks)
    del messages
    prepared, held, expired = journaling.prepare(client, partition, kept, stats.received_at, clocks)
    metadata = {
        RECEIVED_AT: repr(received_at),
        DROPPED: str(len(dropped)),
        WINDOW_DROPPED: str(len(copies)),
        EXPIRED_DROPPED: str(expired),
        **filtering.window_metadata(kept, options),
        **poison.first_attempt(partition),
        **prepared.metadata,
        STOPPED_BY: stats.stopped_by,
    }
    table = messages_to_table(held, partition.queue_url, sns=options.sns)
    # The memory bound (maxBytesPerReceiver): the received messages go once they are in the
    # table, so that the table and what journaling it costs are all this attempt holds.
    del kept, prepared, held
    memory.release(stats.bytes)
    table = table.replace_schema_metadata(metadata)
    outcome = journaling.write_entry(journal, client, partition, table, clocks, stats.received)
    if outcome is None:
        return
    written, table = outcome
    if written:
        logger.info(
            "batch %d receiver %d: received and journaled %d messages in %d calls, %.2fs "
            "(stopped by %s)",
            partition.batch,
            partition.receiver,
            stats.received,
            stats.calls,
            stats.seconds,
            stats.stopped_by,
        )
    if written and plan.extend_by:
        # A slow pipeline (the plan says so): the first extension is made here, not by the
        # driver one message at a time (extension.py).
        extend_journaled(
            journal,
            client,
            partition.queue_url,
            partition.batch,
            partition.receiver,
            table,
            plan.extend_by,
            wall_clock=clocks.wall_clock,
            sleep=clocks.sleep,
        )
    if dropped:
        filtering.delete_redeliveries(journal, client, partition, dropped, clocks)
    yield from output_batches(table, options.sns)


def _without_siblings_ids(
    journal: Journal, partition: ReceiverPartition, table: pa.Table
) -> pa.Table:
    """A replayed entry without the ids that a receiver of the same batch with a lower number
    journaled. No message is ever meant to be in two entries of one batch; one can be only
    after a journal write that landed after its handles expired (docs/design.md, "Stalls"):
    the lowest receiver that holds it delivers it, on every replay alike. Read by key, on
    replays only."""
    plan = journal.plans.read(partition.batch)
    lower = [r.receiver for r in plan.receivers if r.receiver < partition.receiver] if plan else []
    if not lower or table.num_rows == 0:
        return table
    theirs = set(journal.entries.batch_message_ids(partition.batch, lower))
    if not theirs.intersection(table.column("messageId").to_pylist()):
        return table
    logger.warning(
        "batch %d receiver %d: its entry holds messages another receiver of the batch "
        "journaled (a journal write that outlasted its handles); the replay leaves them out",
        partition.batch,
        partition.receiver,
    )
    return journaling.without(table, theirs)


def _removed_long_ago(journal: Journal, partition: ReceiverPartition) -> bool:
    """An attempt that found no plan: a straggler of a batch acknowledged and removed before it
    started, if the state says the batch is acknowledged (a LIST: a listing that lags only
    turns this quiet return into the error the caller raises, which Spark discards too)."""
    if partition.batch > journal.state.read().acked_batch:
        return False
    logger.warning(
        "batch %d receiver %d: batch already acknowledged; this attempt delivers nothing",
        partition.batch,
        partition.receiver,
    )
    return True


def _payload_deleter(options: SqsOptions) -> PayloadDeleter | None:
    """deleteExtendedPayloads: a receiver that deletes committed messages deletes their S3
    payloads too, never those of messages whose deletion may not have taken effect."""
    if not options.delete_extended_payloads:
        return None
    from .envelopes import delete_payloads, s3_client

    def delete(receipts: Sequence[EntryReceipts], uncertain: set[str]) -> None:
        delete_payloads(receipts, s3_client(options), exclude=uncertain)

    return delete
