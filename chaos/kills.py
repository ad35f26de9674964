"""When the harness kills during a run, and the hold that gives speculation its chance.
Runs in: the harness process.

Each run draws its kills up front (``draw_kills``): Python-worker and, on a cluster,
executor-JVM kills at random moments before the query's own SIGKILL. ``carry_out`` performs them
in order against the clock.

On a cluster, a kill that lands on the executor of a slowed task while it sleeps, or on the
query (or the other executor, where the copy would run) before Spark launched its copy, takes
the scenario's chance of a speculative attempt with it. So until the scenario's first
speculative attempt is on record in Spark's event log (``SpeculationWatch``), no kill is carried
out while a slowed task of the current run waits for its copy: from the start of its sleep (the
slow log) until its stage completes in the run's event log (Spark flushes the log there, so a
copy launched meanwhile is on record by then). A held kill happens as soon as the hold ends, and
every later kill of the run moves later by as long, so the run gets every kill it drew, in
order, with the same gaps. Holds last at most ``cap`` seconds a run, so that a stage that never
completes cannot stop the kills. Once a speculative attempt is on record, nothing is held.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from chaos.cluster import completed_stages, event_log_of, event_logs
from chaos.faults import SPECULATION_SEEN, SlowTask, slow_tasks

_SPECULATIVE = re.compile(r'"Speculative":\s*true')
# A kill: (seconds after the run started, what: "worker", "executor" or "query").
Kill = tuple[float, str]


def draw_kills(rng: random.Random, delay: float, workers: int, executors: int) -> list[Kill]:
    """The kills of one run: ``workers`` Python-worker and ``executors`` executor kills at
    random moments before ``delay``, in time order, then the query's at ``delay``."""
    moments = sorted(
        [(rng.uniform(0, delay), "worker") for _ in range(workers)]
        + [(rng.uniform(0, delay), "executor") for _ in range(executors)]
    )
    return [*moments, (delay, "query")]


def waiting_for_copy(slowed: Iterable[SlowTask], run: int, completed: set[int]) -> bool:
    """Whether a slowed task of run ``run`` has started its sleep in a stage that has not
    completed (``completed``: the stage ids the run's event log shows completed)."""
    return any(task.run == run and task.stage not in completed for task in slowed)


class Schedule:
    """A run's kill moments against the clock, moved later by every hold."""

    def __init__(
        self,
        held: Callable[[], bool],
        *,
        cap: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        interval: float = 0.5,
    ) -> None:
        self._held, self._cap, self.clock, self.sleep = held, cap, clock, sleep
        self._interval = interval
        self.began = clock()
        self.held_seconds = 0.0
        self.holds = 0

    def left(self, moment: float) -> float:
        """Seconds until ``moment`` (after the run started, moved by the holds so far)."""
        return self.began + self.held_seconds + moment - self.clock()

    def hold(self, stop: Callable[[], bool]) -> None:
        """Wait while a slowed task waits for its copy, within the run's cap, or until
        ``stop()`` (the run exited)."""
        if self.held_seconds >= self._cap or not self._held():
            return
        self.holds += 1
        start = self.clock()
        while not stop() and self.held_seconds + self.clock() - start < self._cap:
            self.sleep(self._interval)
            if not self._held():
                break
        self.held_seconds += self.clock() - start


def carry_out(
    kills: list[Kill],
    schedule: Schedule,
    act: Callable[[str], None],
    exited: Callable[[], bool],
    interval: float = 0.2,
) -> bool:
    """Each kill at its moment, once no hold keeps it back (``act(what)`` performs it).
    Returns False if the run exited before a kill was due (the query failed)."""
    for moment, what in kills:
        while schedule.left(moment) > 0:
            if exited():
                return False
            schedule.sleep(min(interval, schedule.left(moment)))
        schedule.hold(stop=exited)
        if exited():
            return False
        act(what)
    return True


def speculation_recorded(paths: Iterable[Path]) -> bool:
    """Whether an event log holds a speculative attempt (a ``SparkListenerTaskStart`` with
    ``"Speculative":true``; no other event carries the field as true before it)."""
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                if any(_SPECULATIVE.search(line) for line in handle):
                    return True
        except FileNotFoundError:
            continue
    return False


class SpeculationWatch(threading.Thread):
    """Watches a cluster scenario's event logs until one shows a speculative attempt, then
    leaves the mark that ends the eager slowing (chaos/faults.py) and releases every hold."""

    def __init__(self, eventlog: Path, slow_log: str, marks: Path, interval: float = 1.0) -> None:
        super().__init__(name="chaos-speculation", daemon=True)
        self._eventlog, self._slow_log, self._marks = eventlog, slow_log, marks
        self._interval = interval
        self._halt = threading.Event()
        self.seen = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set() and not self.seen.is_set():
            self.check()
            self._halt.wait(self._interval)

    def check(self) -> bool:
        if not self.seen.is_set() and speculation_recorded(event_logs(self._eventlog)):
            self._marks.mkdir(parents=True, exist_ok=True)
            (self._marks / SPECULATION_SEEN).touch()
            self.seen.set()
        return self.seen.is_set()

    def held(self, run: int, application: str | None) -> bool:
        """Whether a kill of run ``run`` (whose application is ``application``, None while
        its driver does not answer) must wait now."""
        if self.seen.is_set():
            return False
        slowed = slow_tasks(self._slow_log)
        if not any(task.run == run for task in slowed):
            return False
        completed = (
            completed_stages(event_log_of(self._eventlog, application)) if application else set()
        )
        return waiting_for_copy(slowed, run, completed) and not self.check()

    def stop(self) -> None:
        self._halt.set()
        self.join(30)
