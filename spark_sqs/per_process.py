"""One object per key per process: the clients (and the duplicate windows) that tasks share.
Runs on: driver and executors.

A Python worker runs many tasks, one after another and in threads of one task, and each task
builds its objects anew from pickled options; a boto3 client of its own would cost every task
a botocore session and a service model read again (50-100 ms of CPU, and with a role an
AssumeRole call). So each such object is held in a ``PerProcess``: built on the first call for
its key, under a lock so that threads that ask at once get the same object, and kept for as
long as the process lives. boto3 clients are safe to share between threads.

Nothing here resets after a fork: PySpark's daemon forks its workers before they import this
package, so a worker builds its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class PerProcess(Generic[K, V]):
    """The objects of one kind, one per key, built once each in this process."""

    def __init__(self) -> None:
        self._held: dict[K, V] = {}
        self._lock = threading.Lock()

    def get_or_build(self, key: K, build: Callable[[], V]) -> V:
        """The object of ``key``, built by ``build`` if this process has none yet. The build
        runs under the lock: a second thread waits for the first one's object."""
        with self._lock:
            found = self._held.get(key)
            if found is None:
                found = self._held[key] = build()
            return found

    def clear(self) -> None:
        """Forget every object (the next call for a key builds anew)."""
        with self._lock:
            self._held.clear()

    def __len__(self) -> int:
        return len(self._held)
