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


def test_the_guard_keeps_only_the_numbers_that_can_still_matter() -> None:
    guard = offsets.CheckpointGuard("/j", "id", known_through=3, initial=2)
    # A run of 500 batches, each handed out, planned, and acknowledged two batches later.
    for batch in range(4, 504):
        guard.handed_out.add(batch)
        assert guard.check_end(offsets.make(batch, "id"), acked=batch - 2) == batch
        guard.planned.add(batch)
        assert guard.check_start(offsets.make(batch, "id"), batch - 1, planned_only=True) == batch
    assert len(guard.handed_out) <= 3 and len(guard.planned) <= 3
    # What is in flight is still known; a start at the acknowledged batch and the initial
    # batch (a new checkpoint on this journal) are still accepted.
    assert guard.check_start(offsets.make(503, "id"), 503, planned_only=True) == 503
    assert guard.check_start(offsets.make(2, "id"), 503, planned_only=False) == 2
    with pytest.raises(SqsSourceError, match="acknowledged batches up to 503"):
        guard.check_start(offsets.make(400, "id"), 503, planned_only=False)
