"""Keeping the garbage collection that PySpark runs after every task to that task's objects.
Runs on: executors (the source's receivers and the sink's writers).

A reused Python worker (``spark.python.worker.reuse``, the default) runs ``gc.collect()`` after
each task (``pyspark/daemon.py``): a full collection, which walks every object the collector
tracks. A receiver's worker holds about 120,000 of them for as long as it lives (PySpark's
worker, pyarrow and pandas, botocore with its clients' service models, this package), and
walking them all cost 60 ms of CPU a task, measured through Spark on a small core: 0.12 ms a
message at 500 messages a task, a quarter of a receiver's CPU (bench/results/cost-cpu.md). A
sink writer's worker holds as many (122,000: 67 ms after each task of 1,000 rows, a quarter
of its CPU). ``gc.freeze()`` moves the objects that exist to the permanent generation, which
collections skip; whatever later tasks allocate is collected as before.

Frozen objects are still freed when their last reference goes; only a reference cycle among
them would never be. So this is done in a process's first two tasks only, each time after a
full collection (the caller's own before the first, PySpark's after the first task before
the second): what is frozen is what the worker keeps anyway, plus what a task holds at that
moment. Two, because the first task's rows bring PySpark's Arrow serializer its own imports
(pandas, some 30,000 objects) after the receiver has started. Receivers and sink writers call
it once their task has the process's SQS client (and, for a receiver, its journal store).
"""

from __future__ import annotations

import gc
import logging
import os
import threading

logger = logging.getLogger(__name__)

# Tasks of a process that freeze: the first (modules, clients, the journal store) and the
# second (what the first task's rows imported).
FREEZES = 2
# Set by Spark in the environment of reused workers, whose daemon collects after each task.
REUSED_WORKER = "SPARK_REUSE_WORKER"

_process: int | None = None
_frozen = 0
_lock = threading.Lock()


def freeze_long_lived() -> bool:
    """At the start of a receiver's or sink writer's task in a reused PySpark worker: freeze
    the objects the process holds, in its first ``FREEZES`` tasks (a forked child counts its
    own). True if it froze them now."""
    global _process, _frozen
    if not os.environ.get(REUSED_WORKER):
        # A worker that runs one task (spark.python.worker.reuse=false), or no PySpark worker
        # at all: no collection after each task to spare.
        return False
    pid = os.getpid()
    with _lock:
        if _process != pid:
            _process, _frozen = pid, 0
        if _frozen >= FREEZES:
            return False
        _frozen += 1
        count = _frozen
    if count == 1:
        # Garbage frozen would never be freed, and nothing has collected in this process yet.
        # Before the second, PySpark's collection after the first task has just run (a full
        # one, over what the first task left: 20-50 ms that need not be spent twice).
        gc.collect()
    gc.freeze()
    # (Not gc.get_freeze_count(): it walks every frozen object.)
    logger.debug("froze this worker's long-lived objects (task %d of this process)", count)
    return True
