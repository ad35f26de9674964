"""The filter step: which received messages a receiver keeps. Runs on: executors.

A received message is dropped, never journaled again, when another record already holds it,
by one of three mechanisms, each named once:

- **drops**: the ids the plan lists (``BatchPlan.drops``, and after a restart the replay's
  drops and the batch's other entries): messages journaled by batches still pending;
- **held elsewhere**: messages SQS delivered before (``ApproximateReceiveCount`` > 1) that an
  entry or part of a pending batch holds, read by key only when such a message arrives;
- **window copies**: copies of a message acknowledged within ``duplicateWindow`` (the duplicate
  window: ``journal/window.py``, looked up through ``duplicates.py``).

Dropped messages are deleted with their fresh handles (``delete_redeliveries``), after the
window segment that covers them like every delete. One receiver of each batch also seals the
previous batch's window segments (``window_seal``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..acknowledgement.deletes import delete_messages
from ..driver.planning import ReceiverPartition
from ..journal import LIVE, WINDOW_KEYS, BatchPlan, Journal, window
from ..sqs.batching import BatchCaller, Entry
from ..sqs.client import SqsClient
from . import duplicates
from .receiving import Clocks

logger = logging.getLogger(__name__)


def drops(journal: Journal, partition: ReceiverPartition, plan: BatchPlan) -> frozenset[str]:
    """The ids this receiver drops whatever it receives: the plan's drop set and, for a replay
    after a restart, those of the replay and of the batch's other entries (journaled messages
    may have become visible again: no heartbeat ran)."""
    ids = journal.drops.read(plan.drops)
    if not partition.replay:
        return ids
    return (
        ids
        | journal.drops.read(partition.replay_drops)
        | journal.entries.batch_message_ids(
            partition.batch, (r.receiver for r in plan.receivers), but=partition.receiver
        )
    )


def sort_out(
    journal: Journal,
    plan: BatchPlan,
    partition: ReceiverPartition,
    messages: list[dict[str, Any]],
    dropping: frozenset[str] | set[str],
    clocks: Clocks,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], frozenset[str]]:
    """``messages`` split into those kept and those dropped (without their bodies: only their
    handles and window keys are needed), and the window copies among the dropped.
    ``dropping``: the drops, and under deleteAfterJournal what this receiver's parts hold.

    The window is looked up after receiving: a copy exists only after its delete, which comes
    after its window segment (journal/window.py), so this sees the segment of any copy here."""
    elsewhere = _held_elsewhere(journal, plan, partition, messages)
    copies = _window_copies(journal, partition, plan, messages, clocks)
    held = [
        m["MessageId"] in dropping or m["MessageId"] in elsewhere or m["MessageId"] in copies
        for m in messages
    ]
    kept = [m for m, h in zip(messages, held, strict=True) if not h]
    dropped = [_slim(m) for m, h in zip(messages, held, strict=True) if h]
    return kept, dropped, copies


def _slim(message: dict[str, Any]) -> dict[str, Any]:
    """A received message without its body: what deleting it and its window keys need."""
    return {
        k: message[k] for k in ("MessageId", "ReceiptHandle", "MessageAttributes") if k in message
    }


def window_seal(
    journal: Journal, partition: ReceiverPartition, plan: BatchPlan
) -> window.Seal | None:
    """One receiver of each batch seals the previous batch's window segments (journal/window.py)
    with the ids it acknowledges, before its deletes: later readers then read one object per
    batch, and a segment of that batch written afterwards goes on to a later one. The previous
    batch is committed (Spark runs a batch only after the one before it), so its receivers'
    segments exist; the sealer is fixed by the stored plan (the first receiver assigned to
    acknowledge the previous batch, whose ids then go into the seal at no extra write; else one
    of the receivers that receive), so a retry picks the same one. None for every other
    receiver, with the window off, for a FIFO queue (no segments) and for a previous batch
    with no plan (removed: sealed already)."""
    options = partition.options
    # Batches are numbered from 1: the first has none before it.
    if options.duplicate_window <= 0 or partition.batch < 2 or window.is_fifo(partition.queue_url):
        return None
    fresh = [r.receiver for r in plan.receivers if r.adopt_from is None]
    previous = partition.batch - 1
    acking = sorted(a.by for a in plan.acks if a.batch == previous)
    sealer = acking[0] if acking else fresh[previous % len(fresh)] if fresh else None
    if sealer != partition.receiver:
        return None
    receivers = journal.batches.live_receivers(previous)
    if receivers is None:
        return None
    return window.Seal(previous, tuple(receivers), plan.window_from)


def window_lookup(partition: ReceiverPartition, plan: BatchPlan) -> duplicates.Lookup:
    """What a lookup of this receiver must see (executor/duplicates.py): its batch's segments,
    and those of earlier batches from the plan's ``windowFrom`` (a plan written before: from
    the oldest batch pending when it was planned, or the one before)."""
    batch = partition.batch
    start = plan.window_from
    if start is None:
        start = min((*plan.pending, batch - 1)) if batch > 0 else 0
    return duplicates.Lookup(
        batch,
        tuple(r.receiver for r in plan.receivers),
        max(0, start),
        plan.window_legacy_until,
    )


def _window_copies(
    journal: Journal,
    partition: ReceiverPartition,
    plan: BatchPlan,
    messages: list[dict[str, Any]],
    clocks: Clocks,
) -> frozenset[str]:
    """Ids of ``messages`` that copy a message acknowledged within ``duplicateWindow``: by
    MessageId, or by their ``duplicateAttribute`` value (also among ``messages`` themselves:
    two sends of one row handed to this receiver)."""
    options = partition.options
    keys = {m["MessageId"]: window_keys(m, options) for m in messages}
    seen = duplicates.copies(
        journal.store,
        options.journal_location,
        options.duplicate_window,
        [k for m in messages for k in (m["MessageId"], *keys[m["MessageId"]])],
        queue_url=partition.queue_url,
        now=clocks.wall_clock(),
        lookup=window_lookup(partition, plan),
        live_receivers=journal.batches.live_receivers,
    )
    found: set[str] = set()
    first: set[str] = set()
    for m in messages:
        mine = keys[m["MessageId"]]
        if m["MessageId"] in seen or any(k in seen or k in first for k in mine):
            found.add(m["MessageId"])
        first.update(mine)
    if found:
        logger.warning(
            "batch %d receiver %d: dropped %d copies of messages acknowledged within the last "
            "%.0fs (duplicateWindow)",
            partition.batch,
            partition.receiver,
            len(found),
            options.duplicate_window,
        )
    return frozenset(found)


def window_keys(message: dict[str, Any], options: Any) -> tuple[str, ...]:
    """The window keys of a message's ``duplicateAttribute`` value (none without one)."""
    name = options.duplicate_attribute
    if not name or options.duplicate_window <= 0:
        return ()
    value = ((message.get("MessageAttributes") or {}).get(name) or {}).get("StringValue")
    return (window.attribute_key(value),) if value else ()


def window_metadata(messages: list[dict[str, Any]], options: Any) -> dict[bytes, bytes]:
    """The entry's ``duplicateAttribute`` keys, which its acknowledgement adds to the window."""
    keys = [k for m in messages for k in window_keys(m, options)]
    return {WINDOW_KEYS: json.dumps(keys).encode()} if keys else {}


def _held_elsewhere(
    journal: Journal,
    plan: BatchPlan,
    partition: ReceiverPartition,
    messages: list[dict[str, Any]],
) -> frozenset[str]:
    """Ids journaled by the batches pending when this one was planned (its other receivers
    included), read only when a message arrives that SQS delivered before: its visibility ran
    out while a batch held it (a late or failing heartbeat, a task started late, a restart).
    Each batch's receivers are those its plan (or carry record) names, read by key.

    A batch's entries count only if the batch is still live *after* they were read, its own
    batch included: acknowledged, its messages were deleted (a copy is the duplicate
    window's); retired, what it held was copied into the batch that adopted it, and what a
    task of a dead driver wrote there afterwards is delivered by nobody, so dropping (and
    deleting) a redelivery of it would lose the message. A retirement after that status read
    comes after the entries were read, and the adoption, which reads entries after retiring,
    copies them. A batch whose plan has another identity than the one this plan names for it
    was removed and planned again (by a driver that lost the journal while paused): what an
    attempt of its first plan wrote there meanwhile, that attempt removes, and nobody
    delivers."""
    again = [m for m in messages if _receive_count(m) > 1]
    if not again:
        return frozenset()
    ids: set[str] = set()
    for batch in plan.pending:
        if batch == partition.batch:
            receivers: tuple[int, ...] | None = tuple(r.receiver for r in plan.receivers)
        else:
            receivers = journal.batches.live_receivers(batch)
        if not receivers:
            continue
        held = journal.entries.batch_message_ids(
            batch, receivers, but=partition.receiver if batch == partition.batch else None
        )
        if held and journal.batches.status(batch, plan.pending_plan(batch)) == LIVE:
            ids |= held
    return frozenset(ids)


def _receive_count(message: dict[str, Any]) -> int:
    try:
        return int((message.get("Attributes") or {}).get("ApproximateReceiveCount", "1"))
    except ValueError:
        return 1


def delete_redeliveries(
    journal: Journal,
    client: SqsClient,
    partition: ReceiverPartition,
    dropped: list[dict[str, Any]],
    clocks: Clocks,
) -> None:
    """Delete redeliveries of already-journaled messages with their fresh receipt handles."""
    entries = [Entry(m["MessageId"], m["ReceiptHandle"]) for m in dropped]
    ids = sorted(k for m in dropped for k in (m["MessageId"], *window_keys(m, partition.options)))
    # Like every delete: a copy SQS hands out after it must find the id in the window.
    deletion = delete_messages(
        journal,
        BatchCaller(client, partition.queue_url, sleep=clocks.sleep),
        [entries],
        window=[(i, None) for i in ids],
        queue_url=partition.queue_url,
        duplicate_window=partition.options.duplicate_window,
        batch=partition.batch,
        who=window.receiver_writer(partition.receiver),
        catch=Exception,
        clock=clocks.clock,
    )
    if deletion.error is not None:
        logger.warning("could not delete redelivered messages", exc_info=deletion.error)
        failed = len(entries)
    else:
        failed = len(deletion.permanent) + len(deletion.transient)
    # If a delete failed the message comes back once more and is dropped again.
    logger.warning(
        "batch %d receiver %d: dropped %d redelivered messages already journaled by an earlier "
        "batch (%d could not be deleted yet)",
        partition.batch,
        partition.receiver,
        len(dropped),
        failed,
    )
