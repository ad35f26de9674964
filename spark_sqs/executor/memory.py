"""Handing back to the system the memory of messages already in their Arrow table. Runs on:
executors.

A receiver's messages arrive as Python strings (boto3's parsed responses), are copied into the
journal's Arrow table, and are then dropped. CPython gives a large string's memory back to
malloc, and glibc's malloc keeps it in its heap, for reuse: once an allocation of a megabyte has
been freed, glibc serves later ones of that size from the heap instead of separate mappings,
and a heap only shrinks from its top. A Python worker then holds its largest batch's messages
for as long as it lives, besides that batch's table, and the order of later allocations can
leave holes that the next batch's strings do not fit: measured through Spark with 1 MiB bodies,
the same receiver peaked at twice or five times its messages from one run to the next.
``malloc_trim(0)`` returns the heap's free pages to the system; called once a receiver's
messages are dropped, it keeps a worker at its current batch's table plus what it receives.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
from collections.abc import Callable

logger = logging.getLogger(__name__)

# Below this, what was freed is not worth a walk of the heap.
TRIM_AFTER = 8 << 20


def release(freed: int) -> bool:
    """Return free heap pages to the system once ``freed`` bytes of messages were dropped.
    True if it did (glibc only; elsewhere nothing is done)."""
    if freed < TRIM_AFTER:
        return False
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        # Another C library (musl has no malloc_trim): its heap is left as it is.
        logger.debug("malloc_trim is not available; received messages' memory stays in the heap")
        return None
