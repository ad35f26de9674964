"""The journal: the durable record of what was received. Runs on: driver and executors.

One small record kind per module, each owning its keys, all over one store (``stores``, the
create-if-absent stores, local files and S3): ``plans``, ``batches`` (a batch's life),
``entries`` (receivers' entries and parts; also the ``Journal`` that holds the store and one
object per kind), ``drops``, ``dedupe``, ``state`` (markers), ``window`` (ids of acknowledged
messages kept for ``duplicateWindow``), ``metrics``, ``aliases``, ``meta`` (identity, ownership,
the store probe), ``poison`` (attempts, narrowing steps, carries, quarantine, release),
``reports`` (acknowledgement reports) and ``lease`` (the single-owner lease). docs/design.md
("The journal") lists every key.
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
    AckedEntry,
    AckReport,
    EntryReceipts,
    Journal,
    receipts_of,
)
from .plans import AckAssignment, BatchPlan, ReceiverPlan
from .reports import STOPPED_BY
from .state import JournalState
from .stores import JournalStore, LocalStore, S3Store, check_location, open_store

__all__ = [
    "AckAssignment",
    "AckedEntry",
    "AckReport",
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
