"""Why a receiver stopped receiving, as its journal entry records it. Runs on: executors
(written with the entry) and the driver (counted from the acknowledgement reports).

A receiver names its reason in its entry's metadata (``STOPPED_BY``); the receivers that
acknowledge the batch carry it in their reports (``spark_sqs.acknowledgement.reports``), and the
batch's metrics count it (``receiveStops``).
"""

from __future__ import annotations

# The key of an entry's metadata that holds its receiver's stop reason.
STOPPED_BY = b"spark_sqs.stoppedBy"
# Why a receiver stopped receiving (executor/receiving.py ``receive_messages``): logged,
# recorded in its entry (``STOPPED_BY``) and counted in its batch's metrics (``receiveStops``).
STOP_LIMIT = "limit"  # its share of the batch's limit
STOP_EMPTY = "empty receive"
STOP_CAUGHT_UP = "caught up"  # short answers
STOP_WAITED = "long poll waited"
STOP_VISIBLE = "visible when planned"  # its part of the planned count, and the margin
STOP_BUDGET = "time budget"
STOP_ERROR = "error"
STOP_IN_FLIGHT = "in-flight limit"
STOP_BYTES = "byte limit"  # maxBytesPerReceiver, or its share of maxBytesPerTrigger
