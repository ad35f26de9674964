"""Offsets: ``{"batch": N}``, and a clear error for offsets some other source wrote."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spark_sqs.driver import offsets
from spark_sqs.errors import SqsSourceError


@pytest.mark.parametrize("batch", [0, 1, 42, 10**12])
def test_make_and_batch_of_round_trip_through_json(batch: int) -> None:
    # Spark stores offsets as JSON in the offset log and hands back the parsed dict.
    offset = offsets.make(batch)
    assert offset == {"batch": batch}
    assert offsets.batch_of(json.loads(json.dumps(offset))) == batch


def test_make_normalises_to_int() -> None:
    assert offsets.make("7") == {"batch": 7}  # type: ignore[arg-type]
    assert json.dumps(offsets.make(3)) == '{"batch": 3}'


def test_no_offset_means_batch_zero() -> None:
    assert offsets.batch_of(None) == 0


def test_offsets_compare_by_their_json() -> None:
    # Spark decides whether there is new data by comparing offset JSON strings.
    assert json.dumps(offsets.make(5)) == json.dumps({"batch": 5})
    assert json.dumps(offsets.make(5)) != json.dumps(offsets.make(6))


@pytest.mark.parametrize(
    "offset",
    [{}, {"offset": 3}, {"Batch": 3}, "batch", 5, ["batch"]],
    ids=["empty", "other-key", "wrong-case", "string", "int", "list"],
)
def test_offset_from_another_source_is_rejected_with_a_fix(offset: Any) -> None:
    with pytest.raises(SqsSourceError) as info:
        offsets.batch_of(offset)
    message = str(info.value)
    assert "was not written by the SQS source" in message
    assert "Fix:" in message
    assert "checkpointLocation" in message
    assert info.value.retriable is False


@pytest.mark.parametrize(
    "value",
    [-1, "3", True, False, 1.0, None, [1]],
    ids=["negative", "string", "true", "false", "float", "none", "list"],
)
def test_invalid_batch_number_is_rejected(value: Any) -> None:
    with pytest.raises(SqsSourceError, match="invalid batch number"):
        offsets.batch_of({"batch": value})
