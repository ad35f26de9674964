"""Numbered test messages, for ``spark-sqs send`` (and the demo in devtools/).
Runs on: a workstation.

Each body is JSON with a sequence number ``n``, so a consumer can check completeness and order.
"""

from __future__ import annotations

import json
from typing import Any


def numbered_entries(
    start: int,
    stop: int,
    *,
    fifo_group: str | None = None,
    text: str | None = None,
    attributes: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """``SendMessageBatch`` entries for messages ``start`` to ``stop - 1`` (at most 10)."""
    entries = []
    for n in range(start, stop):
        body: dict[str, Any] = {"n": n}
        if text is not None:
            body["text"] = text
        entry: dict[str, Any] = {"Id": str(n), "MessageBody": json.dumps(body)}
        if attributes:
            entry["MessageAttributes"] = attributes
        if fifo_group is not None:
            entry["MessageGroupId"] = fifo_group
            entry["MessageDeduplicationId"] = f"spark-sqs-{n}"
        entries.append(entry)
    return entries
