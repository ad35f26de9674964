"""lag: the age of a batch's messages, recorded by receivers and combined by the driver."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from spark_sqs.acknowledgement.acknowledger import Acknowledger
from spark_sqs.journal import EntryReceipts
from spark_sqs.lag import (
    LAG,
    batch_lag,
    combine,
    entry_lag_metadata,
    lag_summary,
    message_ages_ms,
    read_lag,
)
from tests.factories import SENT_MS, sqs_message
from tests.fakes import MemoryStore


def test_ages_are_measured_from_sent_timestamp_and_never_negative() -> None:
    messages = [sqs_message(0), sqs_message(250), {"MessageId": "no-attributes"}]
    # sqs_message(n) was sent at SENT_MS + n; "now" is 100 ms after the first send.
    assert message_ages_ms(messages, (SENT_MS + 100) / 1000) == [100, 0]


@pytest.mark.parametrize(
    ("ages", "oldest", "median"),
    [([5], 5, 5), ([1, 9, 4], 9, 4), ([10, 1, 7, 3], 10, 3), ([0, 0], 0, 0)],
)
def test_summary_has_the_oldest_and_the_lower_median(
    ages: list[int], oldest: int, median: int
) -> None:
    assert lag_summary(ages) == {
        "messages": len(ages),
        "oldestAgeMs": oldest,
        "medianAgeMs": median,
    }


def test_no_messages_no_lag() -> None:
    assert lag_summary([]) is None
    assert entry_lag_metadata([], 0.0) == {}
    assert batch_lag([{}, None]) == {"oldestMessageAgeMs": None, "medianMessageAgeMs": None}


def test_entry_metadata_round_trips() -> None:
    metadata = entry_lag_metadata([sqs_message(0), sqs_message(10)], (SENT_MS + 1000) / 1000)
    assert read_lag(metadata) == {"messages": 2, "oldestAgeMs": 1000, "medianAgeMs": 990}


def test_combining_entries_weighs_each_median_by_its_messages() -> None:
    big = {"messages": 9, "oldestAgeMs": 400, "medianAgeMs": 100}
    small = {"messages": 1, "oldestAgeMs": 9000, "medianAgeMs": 9000}
    assert combine([small, big, None]) == {"messages": 10, "oldestAgeMs": 9000, "medianAgeMs": 100}
    # Equal weights: the lower median, as for one entry.
    a = {"messages": 2, "oldestAgeMs": 3, "medianAgeMs": 2}
    b = {"messages": 2, "oldestAgeMs": 30, "medianAgeMs": 20}
    assert combine([b, a])["medianAgeMs"] == 2


def _receipts(ages: list[int]) -> EntryReceipts:
    """A journal entry whose messages have the given ages (ms) when received."""
    ids = tuple(f"m{i}" for i in range(len(ages)))
    summary = lag_summary(ages)
    return EntryReceipts(
        batch=1,
        receiver=0,
        received_at=1e12,
        message_ids=ids,
        receipt_handles=tuple(f"h{i}" for i in range(len(ages))),
        rows=len(ages),
        journaled=tuple((i, None) for i in ids),
        metadata={LAG: json.dumps(summary).encode()} if summary else {},
    )


class _Journal:
    location = "memory://lag"

    def __init__(self, entries: list[EntryReceipts]) -> None:
        self.receipts = entries
        self.entries = _Records(
            batch_receipts=lambda batch, receivers: self.receipts, names=lambda receivers: []
        )
        self.batches = _Records(remove=self._remove, collect=lambda below: 0)
        self.drops = _Records(collect=lambda oldest_pending: 0)
        self.window = _Records(collect=lambda now, oldest=None: 0, driver_seal=lambda *a: None)
        self.metrics = _Records(collect_legacy=lambda acked: False)
        # Without a heartbeat nothing bounds the handles: every delete counts uncertain.
        self.dedupe = _Records(
            read=lambda now, window: {},
            write=lambda *args, **kwargs: None,
            expire=lambda now: None,
            collect=lambda now: None,
        )
        self.store = MemoryStore()

    def _remove(
        self, batch: int, also: object = (), files: object = None, probed: bool = False
    ) -> None:
        self.receipts = []


class _Records:
    """A record kind of the journal (journal/entries.py): only the methods given."""

    def __init__(self, **methods: Callable[..., Any]) -> None:
        self.__dict__.update(methods)


class _Caller:
    queue_url = "https://sqs.example/lag"

    def delete(self, entries: list) -> object:  # type: ignore[type-arg]
        from spark_sqs.sqs.batching import BatchResult

        return BatchResult(succeeded=[e.message_id for e in entries])


def test_acknowledged_batch_counters_carry_the_lag() -> None:
    journal = _Journal([_receipts([100, 5000, 300]), _receipts([]), _receipts([200])])
    ack = Acknowledger(
        journal,
        _Caller(),  # type: ignore[arg-type]
        delete=True,
        on_acked=lambda b, _: None,
        visibility_timeout=120,
        dedupe_window=60,
        wall_clock=lambda: 0.0,
    )
    ack.start(0, {1: (0, 1, 2)})

    (counters,) = ack.acknowledge_through(1).per_batch

    assert counters["oldestMessageAgeMs"] == 5000
    # The entries' medians 300 (3 messages) and 200 (1): the weighted lower median is 300.
    assert counters["medianMessageAgeMs"] == 300
    assert counters["journaled"] == 4
