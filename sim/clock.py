"""A simulated clock: monotonic and wall time that move only when told. Runs on: the
simulator's process only.

Real code takes ``clock.monotonic`` / ``clock.time`` / ``clock.sleep`` where it would use the
``time`` module; in a simulation nothing waits for real, so thousands of seeds run in seconds
and the same seed always sees the same times.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

# An arbitrary but realistic start (2024-01-01T00:00:00Z) so wall-clock values look like AWS
# millisecond timestamps, and a monotonic origin far from zero so code never relies on it.
DEFAULT_WALL_START = 1_704_067_200.0
DEFAULT_MONOTONIC_START = 10_000.0


class SimClock:
    """Monotonic and wall time that advance together, only through ``advance`` or ``sleep``."""

    def __init__(
        self,
        wall_start: float = DEFAULT_WALL_START,
        monotonic_start: float = DEFAULT_MONOTONIC_START,
    ) -> None:
        self._wall_start = float(wall_start)
        self._monotonic_start = float(monotonic_start)
        self._elapsed = 0.0
        self._lock = threading.Lock()
        self._listeners: list[Callable[[float], None]] = []

    @property
    def elapsed(self) -> float:
        """Seconds since the clock was created."""
        return self._elapsed

    def monotonic(self) -> float:
        """Like ``time.monotonic()``."""
        return self._monotonic_start + self._elapsed

    def time(self) -> float:
        """Like ``time.time()``: wall time in seconds since the epoch."""
        return self._wall_start + self._elapsed

    def time_millis(self) -> int:
        return int(round(self.time() * 1000))

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (zero is allowed, going back is not)."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back (advance({seconds!r}))")
        with self._lock:
            self._elapsed += float(seconds)
            now = self._elapsed
        for listener in list(self._listeners):
            listener(now)

    def advance_to(self, elapsed: float) -> None:
        """Move time forward to ``elapsed`` seconds since creation (no-op if already past)."""
        if elapsed > self._elapsed:
            self.advance(elapsed - self._elapsed)

    def sleep(self, seconds: float) -> None:
        """Like ``time.sleep``: returns at once, with the clock ``seconds`` later."""
        self.advance(max(0.0, float(seconds)))

    def on_advance(self, listener: Callable[[float], None]) -> None:
        """Call ``listener(elapsed)`` after every advance (a scheduler's hook)."""
        self._listeners.append(listener)

    def __repr__(self) -> str:
        return f"SimClock(elapsed={self._elapsed:.3f}s)"


class ActorClock:
    """One simulated process's view of a :class:`SimClock`: its wall clock is off by ``skew``
    seconds and both its clocks run at ``rate`` (1.02: 2 % fast), from the moment the view is
    made. Real hosts' clocks differ like this (NTP keeps them within seconds to minutes, and a
    clock drifts between corrections); the project's code takes ``clock`` / ``wall_clock`` /
    ``sleep`` seams, so each actor is handed a view of its own. SQS and the journal store stay
    on the true clock (``SimClock``): they are the services, not the hosts.

    ``sleep(s)`` lasts ``s`` seconds as this process measures them: ``s / rate`` true seconds,
    through ``true_sleep`` (the scheduler's sleep, so that other actors run meanwhile)."""

    def __init__(
        self,
        clock: SimClock,
        *,
        skew: float = 0.0,
        rate: float = 1.0,
        monotonic_origin: float = DEFAULT_MONOTONIC_START,
        true_sleep: Callable[[float], None] | None = None,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"a clock's rate must be positive, not {rate!r}")
        self.true = clock
        self.skew = float(skew)
        self.rate = float(rate)
        self._born = clock.elapsed
        self._wall_born = clock.time()
        self._monotonic_origin = float(monotonic_origin)
        self._true_sleep = true_sleep or clock.sleep

    def _local(self) -> float:
        """Seconds since the view was made, as this process measures them."""
        return (self.true.elapsed - self._born) * self.rate

    def monotonic(self) -> float:
        return self._monotonic_origin + self._local()

    def time(self) -> float:
        """Wall time: the true wall time when the view was made, plus the skew, plus what this
        process measured since."""
        return self._wall_born + self.skew + self._local()

    def time_millis(self) -> int:
        return int(round(self.time() * 1000))

    def sleep(self, seconds: float) -> None:
        self._true_sleep(max(0.0, float(seconds)) / self.rate)

    def offset(self) -> float:
        """How far this wall clock is ahead of the true one now (negative: behind)."""
        return self.time() - self.true.time()

    def __repr__(self) -> str:
        return f"ActorClock(skew={self.skew:+.1f}s, rate={self.rate:.3f})"
