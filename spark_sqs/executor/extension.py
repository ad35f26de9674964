"""First visibility extension on the executor that journaled the messages. Runs on: executors.

When batches run long relative to ``visibilityTimeout``, the driver's heartbeat would have to
read every journal entry's receipt handles and extend every message itself: work per message,
on one process. Instead the batch's plan (``BatchPlan.extend_by``, decided by the driver)
asks each receiver to extend its own messages right after its entry is journaled, by the
heartbeat's reach, and then to create an empty marker whose name holds the deadline reached
(``Entries.write_extension``). The heartbeat learns every deadline from the LIST of the batch it
makes anyway and reads an entry only when it has no marker or its deadline nears.

Order and crashes: the entry first (the durable record: the messages may then stay invisible
as long as anyone likes, a replay reads them from the journal), the extension next, the marker
last and only if every message was extended. A receiver that dies or fails anywhere in between
leaves no marker, and the driver extends that entry as before. The deadline in the marker is
taken before the call (SQS counts from the call), so it never overstates. A replayed receiver
does not extend: its handles may be stale, and the driver's fallback covers the entry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pyarrow as pa

from ..journal import Journal, receipts_of
from ..sqs.batching import BatchCaller, entries_of
from ..sqs.client import SqsClient

logger = logging.getLogger(__name__)

# SQS refuses an extension past 12 hours from the receive; this much is kept in reserve for
# the time between the receive loop's start (the entry's receive time) and the call.
MAX_INVISIBLE_SECONDS = 43200
CEILING_RESERVE_SECONDS = 60


def extend_journaled(
    journal: Journal,
    client: SqsClient,
    queue_url: str,
    batch: int,
    receiver: int,
    table: pa.Table,
    extend_by: int,
    *,
    wall_clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Extend the messages of the journaled ``table`` by ``extend_by`` seconds and record it.
    Never raises: the rows are journaled, and the driver extends an entry without a marker.
    True if the marker was written."""
    try:
        receipts = receipts_of(batch, receiver, table)
        now = wall_clock()
        reach = min(
            extend_by,
            int(MAX_INVISIBLE_SECONDS - (now - receipts.received_at)) - CEILING_RESERVE_SECONDS,
        )
        if reach <= 0:
            return False
        entries = entries_of(receipts)
        if entries:
            result = BatchCaller(client, queue_url, sleep=sleep).change_visibility(entries, reach)
            if result.permanent or result.transient:
                logger.warning(
                    "batch %d receiver %d: extended %d of %d journaled messages (%d failed: %s); "
                    "the driver's heartbeat takes over this entry",
                    batch,
                    receiver,
                    len(result.succeeded),
                    len(entries),
                    len(result.permanent) + len(result.transient),
                    sorted({*result.permanent.values(), *result.transient.values()}),
                )
                return False
        # Floored, and taken before the call: the messages stay invisible at least this long.
        journal.entries.write_extension(batch, receiver, int(now) + reach)
        logger.debug(
            "batch %d receiver %d: extended %d messages by %ds",
            batch,
            receiver,
            len(entries),
            reach,
        )
        return True
    except Exception:
        logger.warning(
            "batch %d receiver %d: could not extend the journaled messages; the driver's "
            "heartbeat takes over this entry",
            batch,
            receiver,
            exc_info=True,
        )
        return False
