"""Error classes of the SQS source. Runs on: driver and executors.

Every error says what went wrong and how to fix it. ``retriable`` tells callers whether trying
again later can succeed (throttling, 5xx, network) or a person must act (bad option, missing
queue, denied access). All errors survive pickling, because executor-side errors cross process
boundaries inside Spark task failures.
"""

from __future__ import annotations

from typing import Any


class SqsSourceError(Exception):
    """Base class of all errors raised by spark-sqs."""

    retriable: bool = False

    def __init__(self, message: str, *, retriable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if retriable is not None:
            self.retriable = retriable

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments are lost by the default Exception pickling.
        return (_rebuild, (type(self), self.message, self.retriable))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[SqsSourceError], message: str, retriable: bool) -> SqsSourceError:
    err = cls.__new__(cls)
    SqsSourceError.__init__(err, message, retriable=retriable)
    return err


class InvalidOptionError(SqsSourceError, ValueError):
    """An option is unknown, malformed, out of range or conflicts with another option."""

    @classmethod
    def for_option(
        cls, key: str, value: object, problem: str, fix: str, *, side: str = "source"
    ) -> InvalidOptionError:
        """The error for option ``key`` of the source or the sink (``side``) = ``value``."""
        shown = "<redacted>" if _is_secret(key) else repr(value)
        return cls(f"Invalid SQS {side} option '{key}' = {shown}: {problem}. Fix: {fix}")


class QueueNotFoundError(SqsSourceError):
    """The queue named by the options does not exist (or is not visible to these credentials)."""


class SqsAccessError(SqsSourceError):
    """AWS rejected the credentials or denied an action."""


class JournalError(SqsSourceError):
    """The journal under ``journalLocation`` cannot be read or written."""


class JournalOutcomeUnknown(JournalError):
    """A journal write failed in a way that does not tell whether it took effect (a timeout, a
    lost response). The caller must act as if it may have: messages it may hold stay held."""

    retriable = True


class JournalInUseError(JournalError):
    """Another live query owns the journal (or took it over from this one)."""


class CheckpointMismatchError(JournalError):
    """Spark's checkpoint and the journal under ``journalLocation`` do not describe one stream
    (the journal was moved, deleted or replaced while the checkpoint was kept)."""


class UnsafeStoreError(JournalError):
    """The store under ``journalLocation`` lacks a guarantee the journal needs (an atomic
    create-if-absent)."""


class InvalidEnvelopeError(SqsSourceError):
    """With ``messageFormat=sns``, a received message is not an SNS notification envelope."""


class ExtendedPayloadError(SqsSourceError):
    """An SQS Extended Client payload cannot be read from S3 (or its pointer is malformed)."""


class TransientSqsError(SqsSourceError):
    """An AWS call failed in a way that may succeed when retried."""

    retriable = True


_SECRET_KEYS = {"awsaccesskeyid", "awssecretaccesskey", "awssessiontoken"}


def _is_secret(key: str) -> bool:
    return key.lower() in _SECRET_KEYS
