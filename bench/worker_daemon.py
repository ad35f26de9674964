"""A profiling stand-in for PySpark's Python worker daemon (``spark.python.daemon.module``).

Runs on: the Python worker processes of a benchmark's local Spark session (development tool;
not in the wheel). ``bench.worker_profile`` starts a session with
``spark.python.daemon.module=bench.worker_daemon`` and ``SPARK_SQS_WORKER_PROFILE`` (a folder)
in the executors' environment; this module then runs PySpark's own daemon with two wrappers:

- around each task (``pyspark.daemon.worker``: reading the command, unpickling the function,
  running it, writing the Arrow batches back): process CPU time, and a cProfile with a CPU
  clock, dumped to ``<folder>/<pid>-<task number in the process>.prof``;
- around the daemon's ``gc.collect()`` after each task of a reused worker: its CPU time and the
  number of objects it traversed.

Per task, one JSON line in ``<folder>/<pid>.jsonl``: the task's CPU, the collection's, and how
many botocore clients and sessions, thread pools and threads the task created.
"""

from __future__ import annotations

import cProfile
import gc
import json
import os
import threading
import time
from concurrent import futures
from typing import Any

import pyspark.daemon as daemon

FOLDER = os.environ.get("SPARK_SQS_WORKER_PROFILE", "")
# "0": times and counts only (cProfile's own overhead about doubles a task's CPU).
CPROFILE = os.environ.get("SPARK_SQS_WORKER_CPROFILE", "1") != "0"
# "1": each task's line also counts the collected objects by their type's module.
TYPES = os.environ.get("SPARK_SQS_WORKER_TYPES", "") == "1"

_counts: dict[str, int] = {}
_state: dict[str, Any] = {}


def _count(name: str, cls: type, method: str) -> None:
    original = getattr(cls, method)

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        _counts[name] = _counts.get(name, 0) + 1
        return original(self, *args, **kwargs)

    setattr(cls, method, counted)


def _patch_counters() -> None:
    # In the worker after the fork (the daemon imports nothing that starts threads).
    import botocore.client
    import botocore.session

    _count("botocore_sessions", botocore.session.Session, "__init__")
    _count("botocore_clients", botocore.client.BaseClient, "__init__")
    _count("thread_pools", futures.ThreadPoolExecutor, "__init__")
    _count("threads_started", threading.Thread, "start")
    from spark_sqs.source import SqsStreamReader

    original = SqsStreamReader.read

    def timed_read(self: Any, partition: Any) -> Any:
        # The generator's own resumptions: what Spark does with each batch between them
        # (Arrow to the JVM) is not in.
        rows = original(self, partition)
        while True:
            started = time.process_time()
            try:
                batch = next(rows)
            except StopIteration:
                return
            finally:
                _state["read_cpu_s"] = _state.get("read_cpu_s", 0.0) + time.process_time() - started
            yield batch

    SqsStreamReader.read = timed_read  # type: ignore[method-assign]
    try:
        from spark_sqs.executor import collection
    except ImportError:  # an older tree
        return
    freeze = collection.freeze_long_lived

    def timed_freeze() -> bool:
        started = time.process_time()
        try:
            return freeze()
        finally:
            _state["freeze_cpu_s"] = _state.get("freeze_cpu_s", 0.0) + time.process_time() - started

    collection.freeze_long_lived = timed_freeze  # type: ignore[assignment]


def _process_state() -> dict[str, Any]:
    if _state.get("pid") != os.getpid():
        _state.clear()
        _counts.clear()
        _state.update(pid=os.getpid(), tasks=0)
        _patch_counters()
    return _state


_original_worker = daemon.worker


def _profiled_worker(sock: Any, authenticated: bool) -> int:
    state = _process_state()
    before = dict(_counts)
    state["read_cpu_s"] = state["freeze_cpu_s"] = 0.0
    profile = cProfile.Profile(time.process_time) if CPROFILE else None
    started = time.process_time()
    wall = time.monotonic()
    if profile is not None:
        profile.enable()
    try:
        return _original_worker(sock, authenticated)
    finally:
        if profile is not None:
            profile.disable()
        cpu = time.process_time() - started
        state["tasks"] += 1
        state["last"] = {
            "pid": os.getpid(),
            "task": state["tasks"],
            "task_cpu_s": round(cpu, 6),
            "task_wall_s": round(time.monotonic() - wall, 6),
            "ended": time.time(),
            "read_cpu_s": round(state["read_cpu_s"], 6),
            "freeze_cpu_s": round(state["freeze_cpu_s"], 6),
            **{k: v - before.get(k, 0) for k, v in _counts.items()},
        }
        if profile is not None:
            profile.dump_stats(os.path.join(FOLDER, f"{os.getpid()}-{state['tasks']}.prof"))


class _TimedGc:
    """``gc`` as the daemon's loop sees it: ``collect`` timed, then the task's line written."""

    def __getattr__(self, name: str) -> Any:
        return getattr(gc, name)

    def collect(self, *args: Any) -> int:
        tracked = gc.get_objects()
        objects = len(tracked)
        kinds: dict[str, int] = {}
        if TYPES:
            for o in tracked:
                name = getattr(type(o), "__module__", "?") or "?"
                kinds[name] = kinds.get(name, 0) + 1
            for o in tracked:
                if isinstance(o, dict) and "__name__" in o and "__loader__" in o:
                    kinds["module dicts"] = kinds.get("module dicts", 0) + 1
        del tracked
        started = time.process_time()
        found = gc.collect(*args)
        cpu = time.process_time() - started
        line = {**_state.get("last", {}), "gc_cpu_s": round(cpu, 6), "gc_objects": objects}
        if TYPES:
            line["kinds"] = dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:15])
        with open(os.path.join(FOLDER, f"{os.getpid()}.jsonl"), "a") as out:
            out.write(json.dumps(line) + "\n")
        return found


if FOLDER:
    daemon.worker = _profiled_worker  # type: ignore[assignment]
    daemon.gc = _TimedGc()  # type: ignore[assignment]

if __name__ == "__main__":
    daemon.manager()
