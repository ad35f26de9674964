"""per_process: one object per key per process, built once under a lock."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from spark_sqs.per_process import PerProcess

THREADS = 8


class _CountingLock:
    """A lock that counts the threads that have come to take it (holding it or waiting)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self.callers = 0

    def __enter__(self) -> None:
        with self._changed:
            self.callers += 1
            self._changed.notify_all()
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def wait_for_callers(self, count: int) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.callers >= count, timeout=60)


def test_threads_that_ask_at_once_get_the_one_object_built_once() -> None:
    held: PerProcess[str, object] = PerProcess()
    lock = held._lock = _CountingLock()  # type: ignore[assignment]
    builds: list[object] = []
    everyone_waited: list[bool] = []

    def build() -> object:
        # The first build holds on until every thread has come to the lock: a build outside
        # the lock, or a second one, would show.
        everyone_waited.append(lock.wait_for_callers(THREADS))
        made = object()
        builds.append(made)
        return made

    start = threading.Barrier(THREADS)
    got: list[Any] = [None] * THREADS

    def ask(i: int) -> None:
        start.wait()
        got[i] = held.get_or_build("queue", build)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert everyone_waited == [True]
    assert len(builds) == 1
    assert all(g is builds[0] for g in got)
    assert len(held) == 1


def test_each_key_has_its_own_object_kept_until_cleared() -> None:
    held: PerProcess[tuple[str, int], object] = PerProcess()
    first = held.get_or_build(("a", 1), object)
    other_key = held.get_or_build(("a", 2), object)
    assert first is not other_key
    assert held.get_or_build(("a", 1), object) is first
    assert held.get_or_build(("a", 2), lambda: pytest.fail("built again")) is other_key
    assert len(held) == 2

    held.clear()
    assert len(held) == 0
    assert held.get_or_build(("a", 1), object) is not first


def test_a_failed_build_holds_nothing_and_the_next_call_builds_again() -> None:
    held: PerProcess[str, object] = PerProcess()

    def fail() -> object:
        raise RuntimeError("no credentials")

    with pytest.raises(RuntimeError, match="no credentials"):
        held.get_or_build("queue", fail)
    assert len(held) == 0
    made = held.get_or_build("queue", object)
    assert held.get_or_build("queue", object) is made
