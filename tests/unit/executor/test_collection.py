"""Freezing a worker's long-lived objects (spark_sqs/executor/collection.py), so that PySpark's
collection after every task walks only that task's objects."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from spark_sqs.executor import collection


class _Gc:
    """``gc`` as the module sees it, counting what it is asked to do."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def collect(self) -> int:
        self.calls.append("collect")
        return 0

    def freeze(self) -> None:
        self.calls.append("freeze")


@pytest.fixture
def gc_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    fake = _Gc()
    monkeypatch.setattr(collection, "gc", fake)
    monkeypatch.setattr(collection, "_process", None)
    monkeypatch.setattr(collection, "_frozen", 0)
    monkeypatch.setenv(collection.REUSED_WORKER, "1")
    yield fake.calls


def test_a_process_freezes_in_its_first_two_tasks_only(gc_calls: list[str]) -> None:
    done = [collection.freeze_long_lived() for _ in range(6)]

    assert done == [True, True, False, False, False, False]
    # The first after a collection: garbage frozen would never be freed. The second task
    # starts right after PySpark's collection of the first.
    assert gc_calls == ["collect", "freeze", "freeze"]


def test_a_forked_child_freezes_its_own(
    gc_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        collection.freeze_long_lived()
    monkeypatch.setattr(collection.os, "getpid", lambda: -1)

    assert [collection.freeze_long_lived() for _ in range(3)] == [True, True, False]
    assert gc_calls.count("freeze") == 4


def test_a_worker_that_is_not_reused_freezes_nothing(
    gc_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its daemon collects nothing after its one task: nothing to spare.
    monkeypatch.delenv(collection.REUSED_WORKER)
    assert not collection.freeze_long_lived()
    assert gc_calls == []


def test_frozen_objects_are_left_out_of_collections_and_later_ones_are_not() -> None:
    # In a process of its own: freezing this one would outlive the test.
    script = textwrap.dedent(
        """
        import gc, os
        from spark_sqs.executor import collection

        os.environ[collection.REUSED_WORKER] = "1"

        before = [object()]
        assert collection.freeze_long_lived()
        after = [object()]
        tracked = {id(o) for o in gc.get_objects()}
        assert id(before) not in tracked, "not frozen"
        assert id(after) in tracked, "a later object is frozen"
        assert gc.get_freeze_count() > 0
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "ok", done.stderr
