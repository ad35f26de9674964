"""Errors of the SQS sink. Runs on: driver and executors.

Subclasses of ``SqsSourceError`` (the package's base error), so one ``except`` catches both
directions; they pickle like their base, which matters because executor errors cross processes.
"""

from __future__ import annotations

from ..errors import SqsSourceError


class SinkInputError(SqsSourceError):
    """The DataFrame cannot be written to this queue: a missing, extra or wrong-typed column
    (found at query start, before anything is sent), or a row SQS would reject."""


class OversizeRowError(SinkInputError):
    """A row is larger than the queue's ``MaximumMessageSize``."""


class SinkSendError(SqsSourceError):
    """SQS kept rejecting a message after every allowed attempt, or rejected it for good."""
