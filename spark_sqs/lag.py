"""How far behind the queue a micro-batch is. Runs on: executors (recording) and driver
(aggregation).

A receiver records, in the schema metadata of the journal entry it writes, how old the messages
it journals are: ``now - SentTimestamp`` for the oldest one and the median, with the number of
messages measured. ``now`` is when the receive call (``deleteAfterJournal``) or the receive loop
returned, so the figure is the time from the send to the message being durable in the pipeline.
The driver combines a batch's entries when it acknowledges the batch (``batch_lag``): the oldest
is exact, the median is the message-weighted median of the entries' medians (exact with one
receiver, an estimate with several).

These are the SQS counterparts of the Kinesis source's ``avgMsBehindLatest`` and the Kafka
source's ``offsetsBehindLatest``; the queue's ``ApproximateNumberOfMessagesNotVisible`` comes
from the driver's backlog poll.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

# Schema metadata key of a journal entry: JSON {"messages": n, "oldestAgeMs": ms,
# "medianAgeMs": ms}, absent when no message of the entry had a SentTimestamp.
LAG = b"spark_sqs.lag"


def message_ages_ms(messages: Iterable[Mapping[str, Any]], now: float) -> list[int]:
    """Age in milliseconds at ``now`` (epoch seconds) of each message with a ``SentTimestamp``.

    Negative ages (clock skew between SQS and the executor) count as 0.
    """
    now_ms = int(now * 1000)
    ages = []
    for message in messages:
        sent = (message.get("Attributes") or {}).get("SentTimestamp")
        if sent is not None:
            ages.append(max(0, now_ms - int(sent)))
    return ages


def lag_summary(ages: list[int]) -> dict[str, int] | None:
    """Oldest and median age of a set of messages (lower median for an even count)."""
    if not ages:
        return None
    ordered = sorted(ages)
    return {
        "messages": len(ordered),
        "oldestAgeMs": ordered[-1],
        "medianAgeMs": ordered[(len(ordered) - 1) // 2],
    }


def entry_lag_metadata(messages: Iterable[Mapping[str, Any]], now: float) -> dict[bytes, bytes]:
    """The ``LAG`` metadata of a journal entry holding ``messages``, received at ``now``."""
    summary = lag_summary(message_ages_ms(messages, now))
    return {} if summary is None else {LAG: json.dumps(summary, sort_keys=True).encode()}


def read_lag(metadata: Mapping[bytes, bytes] | None) -> dict[str, int] | None:
    raw = (metadata or {}).get(LAG)
    return None if raw is None else json.loads(raw)


def combine(summaries: Iterable[Mapping[str, int] | None]) -> dict[str, int] | None:
    """One summary of several: the oldest of the oldest, the message-weighted median of the
    medians."""
    parts = [s for s in summaries if s and s.get("messages")]
    if not parts:
        return None
    total = sum(s["messages"] for s in parts)
    seen = 0
    median = parts[0]["medianAgeMs"]
    for s in sorted(parts, key=lambda s: s["medianAgeMs"]):
        seen += s["messages"]
        median = s["medianAgeMs"]
        # The lower median of the combined set, as lag_summary picks for one entry.
        if seen >= (total + 1) // 2:
            break
    return {
        "messages": total,
        "oldestAgeMs": max(s["oldestAgeMs"] for s in parts),
        "medianAgeMs": median,
    }


def merged_lag_metadata(metadatas: Iterable[Mapping[bytes, bytes] | None]) -> dict[bytes, bytes]:
    """The ``LAG`` metadata of an entry combined from parts (``deleteAfterJournal``)."""
    summary = combine(read_lag(m) for m in metadatas)
    return {} if summary is None else {LAG: json.dumps(summary, sort_keys=True).encode()}


def batch_lag(metadatas: Iterable[Mapping[bytes, bytes] | None]) -> dict[str, int | None]:
    """The lag counters of an acknowledged batch, from its entries' schema metadata."""
    summary = combine(read_lag(m) for m in metadatas)
    return {
        "oldestMessageAgeMs": None if summary is None else summary["oldestAgeMs"],
        "medianMessageAgeMs": None if summary is None else summary["medianAgeMs"],
    }
