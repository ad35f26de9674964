"""Keeping the garbage collection that PySpark runs after every task to that task's objects.
Runs on: executors.

A reused Python worker runs ``gc.collect()`` after each task (``pyspark/daemon.py``): a full
collection, which walks every object the collector tracks. A receiver's worker holds about
120,000 of them for as long as it lives (PySpark's worker, pyarrow and pandas, botocore with
its clients' service models, this package), and walking them all cost 60 ms of CPU a task,
measured through Spark on a small core: 0.12 ms a message at 500 messages a task, a quarter of
a receiver's CPU (bench/results/cost-cpu.md). ``gc.freeze()`` moves the objects that exist to
the permanent generation, which collections skip; whatever later tasks allocate is collected
as before.

Frozen objects are still freed when their last reference goes; only a reference cycle among
them would never be. So this is done in a process's first two tasks only, each time after a
full collection: what is frozen is what the worker keeps anyway, plus what a task holds at
that moment. Two, because the first task's rows bring PySpark's Arrow serializer its own
imports (pandas, some 30,000 objects) after the receiver has started.
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

_process: int | None = None
_frozen = 0
_lock = threading.Lock()


def freeze_long_lived() -> bool:
    """At the start of a receiver's task: freeze the objects the process holds, in its first
    ``FREEZES`` tasks (a forked child counts its own). True if it froze them now."""
    global _process, _frozen
    pid = os.getpid()
    with _lock:
        if _process != pid:
            _process, _frozen = pid, 0
        if _frozen >= FREEZES:
            return False
        _frozen += 1
    # Garbage frozen would never be freed: collect first (once a task, twice a process).
    gc.collect()
    gc.freeze()
    logger.debug("froze this worker's long-lived objects (%d in all)", gc.get_freeze_count())
    return True
