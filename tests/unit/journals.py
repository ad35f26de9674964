"""Helpers of the journal's tests (tests/unit/test_journal*.py)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from spark_sqs.schema import messages_to_table
from tests.unit.factories import QUEUE_URL, sqs_message

OTHER_QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/payments"


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
