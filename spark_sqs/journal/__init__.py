"""The journal: the durable record of what was received. Runs on: driver and executors.

``entries`` holds the record types and the ``Journal`` (entries, plans, drop sets, state
markers); ``stores`` the create-if-absent stores (local files, S3) it writes through;
``stops`` why a receiver stopped receiving (recorded in its entry); ``lease`` the
single-owner lease of a journal; ``poison`` the records of poison batches
(attempts, narrowing steps, carries) that the driver and the executors both read; ``window``
the ids of acknowledged messages kept for ``duplicateWindow``.
"""

from .entries import (
    BYTES,
    DROPPED,
    EXPIRED_DROPPED,
    EXPIRES_AT,
    ID_COLUMNS,
    LIVE,
    PENDING_DELETE,
    RECEIPT_COLUMNS,
    RECEIVED_AT,
    REMOVED,
    RETIRED_STATUS,
    SEAL,
    WINDOW_DROPPED,
    WINDOW_KEYS,
    AckAssignment,
    BatchPlan,
    EntryReceipts,
    Journal,
    JournalState,
    ReceiverPlan,
    receipts_of,
)
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
