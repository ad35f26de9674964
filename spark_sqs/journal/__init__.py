"""The journal: the durable record of what was received. Runs on: driver and executors.

One small record kind per module, each owning its keys, all over one store (``stores``, the
create-if-absent stores, local files and S3): ``plans``, ``batches`` (a batch's life),
``entries`` (receivers' entries and parts; also the ``Journal`` that holds the store and one
object per kind), ``drops``, ``dedupe``, ``state`` (markers), ``window`` (ids of acknowledged
messages kept for ``duplicateWindow``), ``metrics``, ``aliases``, ``meta`` (identity, ownership,
the store probe), ``poison`` (attempts, narrowing steps, carries, quarantine, release),
``stops`` (why a receiver stopped receiving, recorded in its entry) and ``lease`` (the
single-owner lease); the acknowledgement reports are ``spark_sqs.acknowledgement.reports``.
docs/design.md ("The journal") lists every key.
"""

from .batches import LIVE, REMOVED, RETIRED_STATUS
from .dedupe import EXPIRES_AT
from .entries import (
    BYTES,
    DROPPED,
    EXPIRED_DROPPED,
    ID_COLUMNS,
    PENDING_DELETE,
    RECEIPT_COLUMNS,
    RECEIVED_AT,
    SEAL,
    WINDOW_DROPPED,
    WINDOW_KEYS,
    EntryReceipts,
    Journal,
    receipts_of,
)
from .plans import AckAssignment, BatchPlan, ReceiverPlan
from .state import JournalState
from .stops import STOPPED_BY
from .stores import JournalStore, LocalStore, S3Store, check_location, open_store

__all__ = [
    "AckAssignment",
    "BYTES",
    "DROPPED",
    "EXPIRED_DROPPED",
    "ID_COLUMNS",
    "LIVE",
    "REMOVED",
    "RETIRED_STATUS",
    "EXPIRES_AT",
    "SEAL",
    "STOPPED_BY",
    "WINDOW_DROPPED",
    "WINDOW_KEYS",
    "PENDING_DELETE",
    "RECEIPT_COLUMNS",
    "RECEIVED_AT",
    "BatchPlan",
    "EntryReceipts",
    "Journal",
    "JournalState",
    "JournalStore",
    "LocalStore",
    "ReceiverPlan",
    "S3Store",
    "check_location",
    "open_store",
    "receipts_of",
]
