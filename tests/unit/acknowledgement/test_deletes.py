"""The one delete routine (spark_sqs/acknowledgement/deletes.py): the window segment before any
delete, then the deletes, the uncertain ids."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from spark_sqs.acknowledgement.deletes import (
    RESEGMENT_AFTER,
    OneByOne,
    delete_messages,
    lost_ids,
)
from spark_sqs.errors import TransientSqsError
from spark_sqs.sqs.batching import BatchResult, Entry
from tests.factories import FIFO_QUEUE_URL, QUEUE_URL

NOW = 1_000_000.0


class _Journal:
    def __init__(self, events: list[Any]) -> None:
        self.window = _Window(events)


class _Window:
    """The journal's duplicate-window records (journal/window.py ``Window``): records writes."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events

    def write(self, ids: list[str], *, batch: int, who: str, seal: Any = None) -> None:
        self.events.append(("window", sorted(ids), batch, who))


class _Deleter:
    def __init__(self, events: list[Any], results: Sequence[BatchResult | Exception]) -> None:
        self.events = events
        self.results = list(results)

    def delete(self, entries: Sequence[Entry]) -> BatchResult:
        self.events.append(("delete", [e.message_id for e in entries]))
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result


def _entries(*ids: str) -> list[Entry]:
    return [Entry(i, f"h-{i}") for i in ids]


def test_the_window_segment_is_written_before_any_delete() -> None:
    events: list[Any] = []
    deleter = _Deleter(events, [BatchResult(succeeded=["a"]), BatchResult(succeeded=["b"])])
    deletion = delete_messages(
        _Journal(events),
        deleter,
        [_entries("a"), _entries("b")],
        window=[("a", None), ("b", None), ("key", None)],
        queue_url=QUEUE_URL,
        duplicate_window=60,
        batch=3,
        who="r000001",
    )
    assert events == [
        ("window", ["a", "b", "key"], 3, "r000001"),
        ("delete", ["a"]),
        ("delete", ["b"]),
    ]
    assert deletion.deleted == 2 and deletion.uncertain == set()


def test_no_segment_with_the_window_off_and_no_fifo_ids_in_it() -> None:
    events: list[Any] = []
    common: dict[str, Any] = {"batch": 1, "who": "driver"}
    deleter = _Deleter(events, [BatchResult(succeeded=["a"])] * 2)
    delete_messages(
        _Journal(events), deleter, [_entries("a")], window=[("a", None)], queue_url=QUEUE_URL,
        duplicate_window=0, **common,
    )  # fmt: skip
    assert [e[0] for e in events] == ["delete"]
    events.clear()
    delete_messages(
        _Journal(events), deleter, [_entries("a")], window=[("a", FIFO_QUEUE_URL), ("b", None)],
        queue_url=QUEUE_URL, duplicate_window=60, **common,
    )  # fmt: skip
    assert events[0] == ("window", ["b"], 1, "driver")


def test_uncertain_ids_are_the_doubted_and_those_sqs_refused() -> None:
    events: list[Any] = []
    deleter = _Deleter(
        events, [BatchResult(succeeded=["a"], permanent={"b": "ReceiptHandleIsInvalid"})]
    )
    deletion = delete_messages(
        _Journal(events), deleter, [_entries("a", "b", "c")], window=[], queue_url=QUEUE_URL,
        duplicate_window=0, batch=1, who="x", doubtful=[{"c"}],
    )  # fmt: skip
    assert deletion.uncertain == {"b", "c"}
    assert deletion.groups[0].failures == 1 and deletion.permanent == {
        "b": "ReceiptHandleIsInvalid"
    }


def test_it_stops_after_a_group_that_failed_transiently() -> None:
    events: list[Any] = []
    deleter = _Deleter(events, [BatchResult(transient={"a": "ServiceUnavailable"})])
    deletion = delete_messages(
        _Journal(events), deleter, [_entries("a"), _entries("b")], window=[],
        queue_url=QUEUE_URL, duplicate_window=0, batch=1, who="r000000",
    )  # fmt: skip
    assert events == [("delete", ["a"])]
    assert deletion.transient == {"a": "ServiceUnavailable"} and len(deletion.groups) == 1


def test_an_error_of_a_delete_is_returned_only_when_asked_for() -> None:
    events: list[Any] = []
    error = TransientSqsError("down")
    common: dict[str, Any] = {
        "window": [("a", None)], "queue_url": QUEUE_URL, "duplicate_window": 60, "batch": 1,
        "who": "driver",
    }  # fmt: skip
    deletion = delete_messages(
        _Journal(events), _Deleter(events, [error]), [_entries("a")], catch=Exception, **common
    )
    assert deletion.error is error and deletion.groups == []
    with pytest.raises(TransientSqsError):
        delete_messages(_Journal(events), _Deleter(events, [error]), [_entries("a")], **common)
    # Both wrote their segment first.
    assert [e[0] for e in events] == ["window", "delete", "window", "delete"]


@pytest.mark.parametrize("stalled", [RESEGMENT_AFTER, RESEGMENT_AFTER + 1])
def test_a_stall_on_the_monotonic_clock_writes_the_segment_again(stalled: float) -> None:
    """Before each delete call the monotonic clock is read again: moved on by more than
    ``RESEGMENT_AFTER`` since the segment, the segment is written again; a jump of the wall
    clock meanwhile (an NTP step) counts for nothing."""
    events: list[Any] = []
    mono = [NOW]
    deleter = _Deleter(events, [BatchResult(succeeded=["a"]), BatchResult(succeeded=["b"])])
    original = deleter.delete

    def delete(entries: Sequence[Entry]) -> BatchResult:
        mono[0] += stalled  # the delete call itself stalls: before the second one, again
        return original(entries)

    deleter.delete = delete  # type: ignore[method-assign]
    with pytest.MonkeyPatch.context() as patch:
        wall = [NOW]

        def jumping() -> float:
            wall[0] += 3600
            return wall[0]

        patch.setattr(time, "time", jumping)
        delete_messages(
            _Journal(events), deleter, [_entries("a"), _entries("b")], window=[("a", None)],
            queue_url=QUEUE_URL, duplicate_window=60, batch=3, who="r000000",
            clock=lambda: mono[0],
        )  # fmt: skip
    again = stalled > RESEGMENT_AFTER
    assert [e[0] for e in events] == [
        "window", "delete", *(["window"] if again else []), "delete"
    ]  # fmt: skip


def test_one_by_one_deletes_each_entry_with_its_own_call_to_its_queue() -> None:
    calls: list[dict[str, str]] = []

    class _Client:
        def delete_message(self, **kwargs: str) -> None:
            calls.append(kwargs)

    result = OneByOne(_Client(), QUEUE_URL).delete([Entry("a", "ha"), Entry("b", "hb", "q2")])  # type: ignore[arg-type]
    assert calls == [
        {"QueueUrl": QUEUE_URL, "ReceiptHandle": "ha"},
        {"QueueUrl": "q2", "ReceiptHandle": "hb"},
    ]
    assert result.succeeded == ["a", "b"]


def test_lost_ids_are_those_the_heartbeat_lost() -> None:
    assert lost_ids(["a", "b", "c"], ["c", "z"]) == {"c"}
