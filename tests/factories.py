"""Builders of test data shared by the tests: realistic ReceiveMessage results, parsed options,
journal tables, receivers' partitions and a journal's planned batches (the test doubles are in
tests/fakes.py)."""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa

from spark_sqs.driver.planning import ReceiverPartition
from spark_sqs.journal import BatchPlan, Journal, ReceiverPlan, window
from spark_sqs.journal.state import JournalState
from spark_sqs.options import SqsOptions
from spark_sqs.schema import messages_to_table

QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
FIFO_QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo"
SENT_MS = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z
OTHER_QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/payments"


def make_options(journal: str = "/tmp/unused-journal", **extra: Any) -> SqsOptions:
    raw: dict[str, Any] = {"queueUrl": QUEUE_URL, "journalLocation": journal}
    raw.update(extra)
    return SqsOptions.parse(raw, env={})


def sqs_message(
    n: int,
    *,
    body: str | None = None,
    handle: str | None = None,
    receive_count: int = 1,
    fifo: bool = False,
    attributes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One message as boto3's ``receive_message`` returns it, with all system attributes."""
    text = body if body is not None else f'{{"n": {n}}}'
    system = {
        "SenderId": "AIDAEXAMPLESENDER",
        "ApproximateFirstReceiveTimestamp": str(SENT_MS + 1000 + n),
        "ApproximateReceiveCount": str(receive_count),
        "SentTimestamp": str(SENT_MS + n),
    }
    if fifo:
        system.update(
            MessageGroupId=f"group-{n % 2}",
            MessageDeduplicationId=f"dedup-{n}",
            SequenceNumber=f"1862{n:016d}",
        )
    message: dict[str, Any] = {
        "MessageId": f"00000000-0000-4000-8000-{n:012d}",
        "ReceiptHandle": handle or f"AQEB-receipt-{n}-{receive_count}",
        "MD5OfBody": hashlib.md5(text.encode()).hexdigest(),
        "Body": text,
        "Attributes": system,
    }
    if attributes:
        message["MessageAttributes"] = attributes
        message["MD5OfMessageAttributes"] = "0" * 32
    return message


def partition(
    max_messages: int = 100,
    *,
    batch: int = 1,
    receiver: int = 0,
    journal: str = "/tmp/unused-journal",
    drop_ids: frozenset[str] = frozenset(),
    visible: int | None = None,
    **options: Any,
) -> ReceiverPartition:
    """A partition; with a real journal directory, its batch's plan is stored there first, as
    the driver does before any receiver runs. ``visible``: its part of the messages the driver
    saw visible when it planned (None: no count, as in plans written before counts)."""
    opts = make_options(journal, **options)
    if journal != "/tmp/unused-journal":
        store = Journal(journal, opts)
        plan = BatchPlan(
            batch,
            (ReceiverPlan(receiver, max_messages, visible=visible),),
            drops=store.drops.write(drop_ids),
            drop_count=len(drop_ids),
        )
        store.plans.write(plan)
    return ReceiverPartition(
        batch=batch,
        receiver=receiver,
        max_messages=max_messages,
        queue_url=QUEUE_URL,
        options=opts,
        visible=visible,
    )


# -- journal tables --


def table_of(*numbers: int, **kwargs: Any) -> pa.Table:
    return messages_to_table([sqs_message(n, **kwargs) for n in numbers], QUEUE_URL)


def pairs(receipts: list[Any]) -> list[tuple[str, str]]:
    """(message id, receipt handle) of journal receipts, in order."""
    return [pair for r in receipts for pair in zip(r.message_ids, r.receipt_handles, strict=True)]


def handles_of(table: pa.Table) -> list[tuple[str, str]]:
    return list(
        zip(
            table.column("messageId").to_pylist(),
            table.column("_receiptHandle").to_pylist(),
            strict=True,
        )
    )


def planned_on_a_window_clock(
    journal: Journal, planned: int, window_seconds: float = 600
) -> list[float]:
    """``journal``'s window range on a clock the test moves (``clock[0] = seconds``), and
    batches 1 to ``planned`` numbered one at a time as a driver numbers them (each planned
    marker written, the one below it removed). Returns the clock."""
    clock = [0.0]
    journal.window.range = window.WindowRange(window_seconds, clock=lambda: clock[0])
    known = JournalState()
    for n in range(1, planned + 1):
        journal.state.write(JournalState(planned_batch=n), known)
        known = JournalState(planned_batch=n)
    return clock
