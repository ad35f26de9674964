"""Planning a micro-batch into receivers. Runs on: driver (partitions are pickled to executors).

Each input partition is one receiver: everything it needs travels inside it, because ``read()``
runs on a different reader instance in another process.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from .options import SqsOptions


@dataclass(frozen=True)
class ReceiverPartition(InputPartition):
    """Receiver ``receiver`` of micro-batch ``batch``."""

    batch: int
    receiver: int
    max_messages: int
    queue_url: str
    options: SqsOptions
    # Messages whose earlier acknowledgement may not have taken effect: a receiver drops any
    # redelivery of them (and deletes it with the fresh receipt handle).
    drop_ids: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return (
            f"ReceiverPartition(batch={self.batch}, receiver={self.receiver}, "
            f"max_messages={self.max_messages}, drop_ids={len(self.drop_ids)})"
        )


def plan(
    batch: int,
    max_messages: int,
    queue_url: str,
    options: SqsOptions,
    journaled: list[int] | tuple[int, ...] = (),
    drop_ids: frozenset[str] = frozenset(),
    resuming: list[int] | tuple[int, ...] = (),
) -> list[ReceiverPartition]:
    """Split ``max_messages`` over ``numPartitions`` receivers.

    ``journaled`` lists receivers that already have a journal entry for this batch (a replay),
    ``resuming`` those that journaled parts but no entry (``deleteAfterJournal``). Both are
    always planned, even if ``numPartitions`` has since been lowered, because their messages
    must reach the sink before the batch can be acknowledged.
    """
    count = max(1, min(options.num_partitions, max_messages))
    share, extra = divmod(max_messages, count)
    limits = {i: share + (1 if i < extra else 0) for i in range(count)}
    for receiver in journaled:
        # The limit of a journaled receiver is irrelevant: it replays, it does not receive.
        limits.setdefault(receiver, 0)
    for receiver in resuming:
        # Outside the current share: it yields its parts and receives nothing more.
        limits.setdefault(receiver, 0)
    return [
        ReceiverPartition(
            batch=batch,
            receiver=i,
            max_messages=limits[i],
            queue_url=queue_url,
            options=options,
            # A replaying receiver receives nothing, so it needs no ids to drop.
            drop_ids=frozenset() if i in journaled else drop_ids,
        )
        for i in sorted(limits)
    ]
