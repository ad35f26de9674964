"""A deterministic scheduler of cooperative actors. Runs on: the simulator's process only.

Every concurrent thing of a simulated query (the Spark driver's micro-batch loop, the
heartbeat thread, each task attempt, a second query) is an *actor*: a Python thread that runs
only while the scheduler has handed it the baton, so exactly one runs at a time and the seeded
scheduler alone decides the interleaving. An actor gives the baton back at *points*: every call
it makes to the simulated SQS or journal store (through :class:`HookedSqs` and
:class:`HookedStore`), every ``sleep`` on the simulated clock, every ``wait`` for a condition,
and the steps the Spark model marks itself. At a point the scheduler may also kill the actor:
it then raises :class:`Crash` (a ``BaseException``, so that no ``except Exception`` clean-up of
the code under test runs, as with SIGKILL), before the call's effect or after it (the effect
happened, the process died before it saw the answer).

At a point the scheduler may also *hold* an actor (``stall``, the unkind world): it then runs
nothing until the simulated clock reaches ``hold_until``, while the others run, as a process
frozen by a GC pause, a stalled network or a suspended VM. A held process's sleeping actors
wake no earlier than the hold's end.
"""

from __future__ import annotations

import _thread
import random
import threading
from collections.abc import Callable
from typing import Any

from sim.clock import SimClock


class Crash(BaseException):
    """The simulated process running this actor was killed."""


class Deadlock(Exception):
    """No actor can run and none waits for a time: the model (or the code) hangs."""


def _baton() -> Any:
    """A binary semaphore, taken: released once per hand-over, acquired once. A raw lock, not
    ``threading.Semaphore`` (a Condition in Python): every step hands the baton over twice."""
    lock = _thread.allocate_lock()
    lock.acquire()
    return lock


class Actor:
    def __init__(self, name: str, group: str, fn: Callable[[], Any], kind: str) -> None:
        self.name = name
        self.group = group  # the simulated process: killed together
        self.kind = kind  # "driver", "heartbeat", "task", "query2", "producer"
        self.fn = fn
        self.go = _baton()
        self.status = "paused"  # paused (holds no baton), running, done
        self.label = "start"
        self.wait_until: Callable[[], bool] | None = None
        self.wake_at: float | None = None
        self.kill: str | None = None  # "before" or "after" the effect of the next point
        self.result: Any = None
        self.error: BaseException | None = None
        self.killed = False
        # Held (stalled, paused) until this simulated time: not run before, whatever it waits for.
        self.hold_until: float | None = None

    @property
    def done(self) -> bool:
        return self.status == "done"

    def __repr__(self) -> str:
        return f"Actor({self.name}, {self.status}, {self.label})"


class Scheduler:
    """Picks, at every point, which actor runs next; advances the simulated clock.

    The baton goes straight from the actor that reaches a point to the next one (``run_until``):
    the choosing runs in the thread that gives the baton up, so a step costs one thread switch,
    none when the same actor goes on, instead of two through a scheduler thread. The order of
    choices, random draws and clock moves is the same as one ``step`` at a time.
    """

    def __init__(
        self,
        seed: int,
        clock: SimClock,
        *,
        trace: Callable[[str], None] | None = None,
        decide: Callable[[Actor], str | None] | None = None,
        stall: Callable[[Actor], bool] | None = None,
    ) -> None:
        self.rng = random.Random(f"sched:{seed}")
        self.clock = clock
        self.actors: list[Actor] = []
        self._main = _baton()  # the thread that called step/run_until/kill waits on it
        self._local = threading.local()
        self._trace = trace
        # Called before each resume: returns "before"/"after" to kill the actor at this point.
        self.decide = decide
        # Called for the actor chosen to run: True if it (or its process) was held instead
        # (``hold``); another actor is chosen then. Only at points where the actor neither
        # sleeps nor waits.
        self.stall = stall
        self.steps = 0
        # Who gets the baton back from a resume that waits for it (kill, step); else None.
        self._return_to: Any = None
        self._until: Callable[[], bool] | None = None  # run_until's condition
        self._choosing = False  # in _choose: kills resume their victims at once
        self._error: BaseException | None = None
        # The choosing thread's own actor was killed while it chose: it dies first (as a victim
        # resumed by a kill would), then hands the baton to the actor it chose.
        self._killed_chooser = False
        self._chosen: Actor | None = None

    # -- inside actors ---------------------------------------------------------------------------

    def current(self) -> Actor | None:
        return getattr(self._local, "actor", None)

    def point(
        self,
        label: str,
        *,
        wait: Callable[[], bool] | None = None,
        wake_at: float | None = None,
    ) -> bool:
        """Give the baton back; returns True if the actor must die right after this call's
        effect. Raises Crash if it must die before. A no-op outside actors (set-up)."""
        actor = self.current()
        if actor is None:
            return False
        actor.label = label
        actor.wait_until = wait
        actor.wake_at = wake_at
        actor.status = "paused"
        if not self._hand_on(actor):
            actor.go.acquire()
        actor.status = "running"
        actor.wait_until = None
        actor.wake_at = None
        if actor.kill == "before":
            raise Crash
        return actor.kill == "after"

    def sleep(self, seconds: float) -> None:
        self.point(f"sleep {seconds:.2f}s", wake_at=self.clock.elapsed + max(0.0, seconds))

    def wait(self, label: str, condition: Callable[[], bool]) -> None:
        while not condition():
            self.point(label, wait=condition)

    # -- the scheduler's side --------------------------------------------------------------------

    def spawn(self, name: str, group: str, kind: str, fn: Callable[[], Any]) -> Actor:
        actor = Actor(name, group, fn, kind)
        thread = threading.Thread(target=self._body, args=(actor,), name=name, daemon=True)
        self.actors.append(actor)
        thread.start()
        return actor

    def _body(self, actor: Actor) -> None:
        self._local.actor = actor
        actor.go.acquire()
        actor.status = "running"
        try:
            if actor.kill is not None:
                raise Crash
            actor.result = actor.fn()
        except Crash:
            actor.killed = True
        except BaseException as exc:  # noqa: BLE001 - recorded and judged by the model
            actor.error = exc
        finally:
            actor.status = "done"
            self._hand_on(actor)

    def _hand_on(self, actor: Actor) -> bool:
        """``actor`` gives the baton up: to whoever waits for it back, else to the actor chosen
        next, else (``run_until``'s condition holds) to the thread that called ``run_until``.
        True if the baton stays with ``actor`` (it was chosen again)."""
        if self._return_to is not None:
            back, self._return_to = self._return_to, None
            back.release()
            return False
        following = None
        if self._chosen is not None:
            # This actor was killed while it chose: it has unwound to here, and the actor it
            # chose runs now.
            following, self._chosen = self._chosen, None
        elif self._until is not None and not self._until():
            try:
                following = self._choose()
            except BaseException as exc:  # noqa: BLE001 - raised by run_until in its thread
                self._error = exc
            if self._killed_chooser:
                self._killed_chooser = False
                self._chosen = following
                return True  # point() raises Crash (kill "before"); _hand_on runs again
        if following is actor:
            return True
        (self._main if following is None else following.go).release()
        return False

    def _resume(self, actor: Actor) -> None:
        """Run ``actor`` to its next point and wait for the baton to come back."""
        me = self.current()
        back = self._main if me is None else me.go
        self._return_to = back
        actor.go.release()
        back.acquire()

    def kill(self, actor: Actor, when: str = "before") -> None:
        """Kill ``actor``: at once if paused (called by the scheduler), else at its next point."""
        if actor.done:
            return
        actor.kill = when
        if (self._choosing or self.current() is None) and actor.status == "paused":
            actor.kill = "before"
            if actor is self.current():
                self._killed_chooser = True  # cannot resume itself: see _hand_on
                return
            self._resume(actor)

    def hold(self, actor: Actor, until: float) -> None:
        """Run nothing of ``actor`` before simulated time ``until`` (a stall)."""
        if actor.hold_until is None or until > actor.hold_until:
            actor.hold_until = until

    def ready(self, actor: Actor, now: float) -> bool:
        if actor.status != "paused":
            return False
        if actor.kill is not None:
            return True
        if actor.hold_until is not None:
            if actor.hold_until > now:
                return False
            actor.hold_until = None
        if actor.wait_until is None and actor.wake_at is None:
            return True
        if actor.wait_until is not None and actor.wait_until():
            return True
        return actor.wake_at is not None and actor.wake_at <= now

    def _choose(self) -> Actor | None:
        """Pick the actor that runs next (advancing the clock); None when no actor is left."""
        self.actors = [a for a in self.actors if not a.done]
        if not self.actors:
            return None
        while True:
            while True:
                now = self.clock.elapsed
                ready = [a for a in self.actors if self.ready(a, now)]
                if ready:
                    break
                timed = [t for a in self.actors if (t := _next_time(a, now)) is not None]
                if not timed:
                    raise Deadlock(
                        "no actor can run: "
                        + ", ".join(f"{a.name} at {a.label}" for a in self.actors)
                    )
                self.clock.advance_to(min(timed))
            actor = ready[self.rng.randrange(len(ready))]
            # Work takes time: most steps a few milliseconds, some much longer.
            roll = self.rng.random()
            self.clock.advance(0.002 if roll < 0.8 else 0.2 if roll < 0.97 else 3.0)
            if (
                self.stall is None
                or actor.kill is not None
                or actor.wait_until is not None
                or actor.wake_at is not None
                or not self.stall(actor)
            ):
                break
            if self._trace is not None:
                held = (actor.hold_until or 0.0) - self.clock.elapsed
                self._trace(f"{actor.name:<22} {actor.label}  ** HELD for {held:.1f}s **")
        if actor.kill is None and self.decide is not None:
            self._choosing = True
            try:
                actor.kill = self.decide(actor)
            finally:
                self._choosing = False
        self.steps += 1
        if self._trace is not None:
            crash = f"  ** KILLED {actor.kill} effect **" if actor.kill else ""
            self._trace(f"{actor.name:<22} {actor.label}{crash}")
        return actor

    def step(self) -> Actor | None:
        """Run one actor to its next point. None when no actor is left."""
        actor = self._choose()
        if actor is not None:
            self._resume(actor)
        return actor

    def run_until(self, done: Callable[[], bool]) -> None:
        """Run actors, handing the baton from one to the next, until ``done()`` holds after a
        step (or no actor is left). Raises what choosing raised (``Deadlock``)."""
        if done():
            return
        first = self._choose()
        if first is None:
            return
        self._until, self._error = done, None
        try:
            first.go.release()
            self._main.acquire()
        finally:
            self._until = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def shutdown(self) -> None:
        """Kill every actor left (their threads end)."""
        for actor in list(self.actors):
            while not actor.done:
                actor.kill = "before"
                if actor.status == "paused":
                    self._resume(actor)
        self.actors = []


def _next_time(actor: Actor, now: float) -> float | None:
    """When a paused actor that cannot run now may run next (None: only on a condition)."""
    if actor.hold_until is not None and actor.hold_until > now:
        return actor.hold_until if actor.wake_at is None else max(actor.hold_until, actor.wake_at)
    return actor.wake_at


class SimLock:
    """A re-entrant lock whose waits are scheduler points (a real lock would block the baton)."""

    def __init__(self, sched: Scheduler, name: str) -> None:
        self._sched = sched
        self._name = name
        self._owner: Actor | None = None
        self._depth = 0

    def acquire(self) -> bool:
        me = self._sched.current()
        if self._owner is not None and self._owner is not me:
            owner = self._owner
            self._sched.wait(f"lock {self._name}", lambda: self._owner is None or owner.done)
            if self._owner is not None and self._owner.done:
                # Its holder died (a killed process holds nothing).
                self._owner, self._depth = None, 0
        self._owner = me
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if self._depth <= 0:
            self._owner, self._depth = None, 0

    def __enter__(self) -> SimLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class HookedStore:
    """A journal store whose every call is a scheduler point (and a place to die)."""

    def __init__(self, store: Any, sched: Scheduler, after: Callable[[str, str], None]) -> None:
        self.inner = store
        self._sched = sched
        self._after = after

    def _call(self, method: str, key: str, *args: Any) -> Any:
        # Probe keys carry a random uuid: the trace shows them without it, to compare replays.
        shown = "_probe/*" if key.startswith("_probe/") else key
        die_after = self._sched.point(f"store.{method} {shown}")
        try:
            return getattr(self.inner, method)(key, *args)
        finally:
            self._after(method, key)
            if die_after:
                raise Crash

    def create(self, key: str, data: bytes) -> bool:
        return self._call("create", key, data)

    def put(self, key: str, data: bytes) -> None:
        return self._call("put", key, data)

    def read(self, key: str) -> bytes | None:
        return self._call("read", key)

    def list(self, prefix: str) -> list[str]:
        return self._call("list", prefix)

    def delete(self, key: str) -> None:
        return self._call("delete", key)

    def delete_many(self, keys: list[str]) -> None:
        # One scheduler point per key: a crash may fall between any two removals.
        for key in keys:
            self._call("delete", key)


class HookedSqs:
    """A boto3-shaped SQS client whose every call is a scheduler point. ``after`` sees each
    call's name, arguments and answer (None when it raised)."""

    def __init__(
        self, client: Any, sched: Scheduler, after: Callable[[str, dict[str, Any], Any], None]
    ) -> None:
        self.inner = client
        self._sched = sched
        self._after = after

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if name.startswith("_") or not callable(target):
            return target

        def call(**kwargs: Any) -> Any:
            die_after = self._sched.point(f"sqs.{name} {_describe(kwargs)}")
            answer = None
            try:
                answer = target(**kwargs)
                return answer
            finally:
                self._after(name, kwargs, answer)
                if die_after:
                    raise Crash

        return call


def _describe(kwargs: dict[str, Any]) -> str:
    if "Entries" in kwargs:
        return f"{len(kwargs['Entries'])} entries"
    if "MaxNumberOfMessages" in kwargs:
        vis = kwargs.get("VisibilityTimeout")
        return f"max={kwargs['MaxNumberOfMessages']} vis={vis}"
    return ""
