"""Error classes: raised on executors, they must cross process boundaries intact."""

from __future__ import annotations

import pickle

import pytest

import spark_sqs
from spark_sqs.errors import (
    InvalidOptionError,
    JournalError,
    QueueNotFoundError,
    SqsAccessError,
    SqsSourceError,
    TransientSqsError,
)

ALL_ERRORS = [
    SqsSourceError,
    InvalidOptionError,
    QueueNotFoundError,
    SqsAccessError,
    JournalError,
    TransientSqsError,
]
MESSAGE = "SQS queue q does not exist [GetQueueUrl: X] — ünïcödé. Fix: create the queue"


def roundtrip(err: BaseException) -> BaseException:
    return pickle.loads(pickle.dumps(err, protocol=pickle.HIGHEST_PROTOCOL))


@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda c: c.__name__)
def test_error_survives_pickling(cls: type[SqsSourceError]) -> None:
    err = cls(MESSAGE)
    restored = roundtrip(err)

    assert type(restored) is cls
    assert str(restored) == MESSAGE
    assert restored.message == MESSAGE  # type: ignore[attr-defined]
    assert restored.args == (MESSAGE,)
    assert restored.retriable is err.retriable  # type: ignore[attr-defined]
    assert isinstance(restored, SqsSourceError)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickling_works_with_every_protocol(protocol: int) -> None:
    restored = pickle.loads(pickle.dumps(TransientSqsError(MESSAGE), protocol=protocol))
    assert type(restored) is TransientSqsError
    assert restored.retriable is True
    assert str(restored) == MESSAGE


@pytest.mark.parametrize(
    ("cls", "retriable"),
    [
        (SqsSourceError, False),
        (InvalidOptionError, False),
        (QueueNotFoundError, False),
        (SqsAccessError, False),
        (JournalError, False),
        (TransientSqsError, True),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else str(v),
)
def test_only_transient_errors_are_retriable(cls: type[SqsSourceError], retriable: bool) -> None:
    assert cls("x").retriable is retriable
    assert roundtrip(cls("x")).retriable is retriable  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("override", [True, False])
def test_explicit_retriable_overrides_the_class_default_and_survives_pickling(
    cls: type[SqsSourceError], override: bool
) -> None:
    err = cls("x", retriable=override)
    assert err.retriable is override
    assert roundtrip(err).retriable is override  # type: ignore[attr-defined]
    # The override is per instance, not per class.
    assert cls("y").retriable is (cls is TransientSqsError)


def test_invalid_option_error_stays_a_value_error_after_pickling() -> None:
    err = InvalidOptionError.for_option("numPartitions", "0", "is out of range", "give 1-1000")
    restored = roundtrip(err)
    assert isinstance(restored, ValueError)
    assert str(restored) == str(err)
    with pytest.raises(ValueError, match="numPartitions"):
        raise restored


def test_pickled_error_can_be_raised_and_caught_by_its_class() -> None:
    restored = roundtrip(QueueNotFoundError(MESSAGE))
    with pytest.raises(QueueNotFoundError, match="does not exist"):
        raise restored


def test_package_exports_every_error() -> None:
    for cls in ALL_ERRORS:
        assert getattr(spark_sqs, cls.__name__) is cls
