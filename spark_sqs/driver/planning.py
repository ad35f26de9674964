"""Planning a micro-batch into receivers. Runs on: driver (partitions are pickled to executors).

A batch's plan (``BatchPlan``: its receivers, their limits, the entries of orphaned batches it
delivers, its drop set) is fixed the first time the batch is planned and stored in the journal
before any receiver runs. Every later ``partitions`` call for the batch (a restart, possibly
with other options) and every receiver reads that plan, never the current options: a replay
holds exactly what the first attempt planned. New options apply from the next new batch.

Each input partition is one receiver; it carries only names (batch, receiver), so its pickled
size does not grow with the drop set, which receivers read from the journal by digest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from pyspark.sql.datasource import InputPartition

from ..journal import BatchPlan, ReceiverPlan
from ..options import SqsOptions

# Adopted entries are numbered from here, above any receiver numPartitions can create.
ADOPTED_FROM = 10000
# SQS's most messages per ReceiveMessage call: a receiver's part of the visible messages comes
# in units of it, since a call costs the same for 1 message as for 10.
RECEIVE_UNIT = 10
# A new batch plans one receiver per this many visible messages of a queue (ten receive calls,
# a fraction of a second): every receiver costs journal writes (an entry, a report, a window
# segment) and a Spark task whatever it receives, so a trickle is received by one, and only a
# backlog is spread over numPartitions.
MESSAGES_PER_RECEIVER = 10 * RECEIVE_UNIT


@dataclass(frozen=True)
class ReceiverPartition(InputPartition):
    """Receiver ``receiver`` of micro-batch ``batch``; the rest is in the batch's plan."""

    batch: int
    receiver: int
    max_messages: int
    queue_url: str
    options: SqsOptions
    # Served from a stored plan after a restart: its other receivers' journaled messages may
    # have become visible again meanwhile, and must not be journaled a second time.
    replay: bool = False
    # With a replay: the drop set of the driver serving it (its inherited batches), by digest.
    replay_drops: str | None = None
    # The driver run that planned this partition: part of the attempt key (executor/poison.py).
    run: str = ""
    # Its part of the messages visible when the batch was planned (``ReceiverPlan.visible``);
    # the receiver sets it from the stored plan, as it does ``max_messages``.
    visible: int | None = None
    # The plan's byte limit of this receiver (its memory bound); None: no limit (a plan written
    # before byte limits). Set from the stored plan by the receiver, like ``max_messages``.
    max_bytes: int | None = None
    # The identity of the plan the driver made it from (``BatchPlan.plan_id``): an attempt that
    # finds another plan of its batch delivers nothing (its own plan was removed).
    plan_id: str | None = None

    def __repr__(self) -> str:
        return (
            f"ReceiverPartition(batch={self.batch}, receiver={self.receiver}, "
            f"max_messages={self.max_messages})"
        )


def split(max_messages: int, receivers: int) -> dict[int, int]:
    """``max_messages`` split evenly over at most ``receivers`` receivers."""
    count = max(1, min(receivers, max_messages))
    share, extra = divmod(max_messages, count)
    return {i: share + (1 if i < extra else 0) for i in range(count)}


def receivers_needed(
    visible: Mapping[str, int],
    queues: Sequence[str],
    num_partitions: int,
    per_receiver: int = MESSAGES_PER_RECEIVER,
) -> int:
    """How many receivers a new batch plans for new messages: one per ``per_receiver``
    (``MESSAGES_PER_RECEIVER``) messages visible in each queue, rounded up per queue (so that
    every queue with a backlog can have one), at least 1 and at most ``num_partitions``. All
    ``num_partitions`` when a queue's count is unknown (its last poll failed, or none yet):
    without a count, the batch is planned as for a backlog. ``visible``: per queue, only the
    queues whose poll answered. ``per_receiver`` 0: always ``num_partitions`` (the simulation
    replays seeds found before batches were planned by their backlog)."""
    if per_receiver <= 0 or not queues or any(q not in visible for q in queues):
        return max(1, num_partitions)
    wanted = sum(-(-max(0, visible[q]) // per_receiver) for q in queues)
    return max(1, min(num_partitions, wanted))


def new_plan(
    batch: int,
    max_messages: int,
    num_partitions: int,
    *,
    journaled: list[int] | tuple[int, ...] = (),
    resuming: list[int] | tuple[int, ...] = (),
    adopted: list[tuple[int, int]] | tuple[tuple[int, int], ...] = (),
    drops: str | None = None,
    drop_count: int = 0,
    delete_after_journal: bool | None = None,
    acknowledging: bool = False,
    max_bytes_per_receiver: int | None = None,
    max_bytes_per_trigger: int | None = None,
    receiving: int | None = None,
) -> BatchPlan:
    """The plan of a batch planned for the first time.

    ``journaled`` lists receivers that already have an entry for this batch, ``resuming`` those
    that journaled parts but no entry (``deleteAfterJournal``): both are always planned, with no
    share of new messages if ``numPartitions`` has since been lowered, because their messages
    must reach the sink. ``adopted`` lists (batch, receiver) entries of orphaned batches that
    this batch delivers, as receivers ``ADOPTED_FROM`` and up. ``acknowledging``: the batch's
    receivers delete committed batches first; with nothing to receive (an acknowledge-only
    batch) it still has ``numPartitions`` receivers, which share those deletes. Each
    receiver's byte limit (``byte_limits``) is ``max_bytes_per_receiver``, or its share of
    ``max_bytes_per_trigger`` split like the messages, whichever is lower. ``receiving``: how
    many receivers share the new messages (``receivers_needed``; default ``num_partitions``).
    """
    if max_messages == 0 and acknowledging:
        limits = dict.fromkeys(range(max(1, num_partitions)), 0)
    else:
        limits = split(max_messages, num_partitions if receiving is None else receiving)
    for receiver in (*journaled, *resuming):
        limits.setdefault(receiver, 0)
    max_bytes = byte_limits(limits, max_bytes_per_receiver, max_bytes_per_trigger)
    receivers = [ReceiverPlan(r, limits[r], max_bytes=max_bytes[r]) for r in sorted(limits)]
    first = max(ADOPTED_FROM, num_partitions)
    receivers += [
        ReceiverPlan(first + i, 0, source, max_bytes=max_bytes_per_receiver)
        for i, source in enumerate(adopted)
    ]
    return BatchPlan(
        batch,
        tuple(receivers),
        drops=drops,
        drop_count=drop_count,
        delete_after_journal=delete_after_journal,
    )


def visible_parts(visible: int, receivers: int) -> list[int]:
    """``visible`` messages dealt to ``receivers`` receivers in units of ``RECEIVE_UNIT``, in
    turn from the first; the remainder below a unit goes to the next in turn. Few messages go
    to few receivers (10 visible over 4 receivers: 10, 0, 0, 0), so that the others need not
    wait for messages that one call of another takes; many are spread evenly."""
    if receivers <= 0:
        return []
    units, rest = divmod(max(0, visible), RECEIVE_UNIT)
    each, extra = divmod(units, receivers)
    parts = [RECEIVE_UNIT * (each + (1 if i < extra else 0)) for i in range(receivers)]
    parts[extra] += rest
    return parts


def with_visible(plan: BatchPlan, visible: Mapping[str, int], default_queue: str) -> BatchPlan:
    """``plan`` (a new plan, queues assigned) with each receiving receiver's part of the
    messages visible in its queue as last polled (``visible``: per queue, only the queues whose
    poll answered). Receivers that replay or deliver an adopted entry get none."""
    sharing: dict[str, list[int]] = {}
    for r in plan.receivers:
        queue = r.queue or default_queue
        if r.limit > 0 and r.adopt_from is None and queue in visible:
            sharing.setdefault(queue, []).append(r.receiver)
    part: dict[int, int] = {}
    for queue, numbers in sharing.items():
        part.update(zip(numbers, visible_parts(visible[queue], len(numbers)), strict=True))
    receivers = tuple(
        replace(r, visible=part[r.receiver]) if r.receiver in part else r for r in plan.receivers
    )
    return replace(plan, receivers=receivers)


def byte_limits(
    limits: dict[int, int], per_receiver: int | None, per_trigger: int | None
) -> dict[int, int | None]:
    """Each receiver's byte limit: ``per_receiver`` (maxBytesPerReceiver), or its share of
    ``per_trigger`` (maxBytesPerTrigger, split evenly over the receivers that get messages, as
    ``split`` splits messages), whichever is lower; None where neither is given."""
    sharing = [r for r in sorted(limits) if limits[r] > 0]
    shares = split(per_trigger, len(sharing)) if per_trigger is not None and sharing else {}
    share_of = {r: shares[i] for i, r in enumerate(sharing) if i in shares}
    out: dict[int, int | None] = {}
    for receiver in limits:
        caps = [c for c in (per_receiver, share_of.get(receiver)) if c is not None]
        out[receiver] = min(caps) if caps else None
    return out


def partitions_of(
    plan: BatchPlan,
    queue_url: str,
    options: SqsOptions,
    replay: bool = False,
    replay_drops: str | None = None,
) -> list[ReceiverPartition]:
    """``queue_url``: the queue of receivers whose plan records none (plans written before
    several queues; see queues.py)."""
    return [
        ReceiverPartition(
            plan.batch,
            r.receiver,
            r.limit,
            r.queue or queue_url,
            options,
            replay,
            replay_drops,
            max_bytes=r.max_bytes,
            plan_id=plan.plan_id,
        )
        for r in plan.receivers
    ]
