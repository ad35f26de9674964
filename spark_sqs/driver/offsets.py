"""Offsets of the SQS source. Runs on: driver.

SQS has no positions to seek to, so an offset is a micro-batch sequence number of the source's
own: ``{"batch": N}``. Batch N's messages are whatever its receivers journaled under N. Spark
compares offsets as JSON strings, so the dict is tiny and has one key. Receipt handles never go
into offsets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import SqsSourceError

KEY = "batch"


def make(batch: int) -> dict[str, int]:
    return {KEY: int(batch)}


def batch_of(offset: Mapping[str, Any] | None) -> int:
    """The batch number in an offset Spark hands back (from the offset log or the runner)."""
    if offset is None:
        return 0
    try:
        value = offset[KEY]
    except (KeyError, TypeError):
        raise SqsSourceError(
            f"Offset {offset!r} was not written by the SQS source (no '{KEY}' key). Fix: the "
            "checkpoint belongs to another source; use a new checkpointLocation"
        ) from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SqsSourceError(f"Offset {offset!r} has an invalid batch number")
    return value
