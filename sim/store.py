"""An in-memory journal store for the deterministic simulation. Runs on: the simulator's
process only.

``SimJournalStore`` implements the journal store interface the protocol code is written
against (``spark_sqs.journal.stores.JournalStore``, which the real stores, local filesystem and
S3, implement too). Keys are '/'-separated paths relative to the journal root.

Faults, drawn from a seeded stream at ``StoreFaultRates`` or scripted with ``StoreFault``:

- "before": the call fails before its effect (``JournalError``, retriable).
- "after": the effect happens, then the answer is lost. A write (create, put, delete) then raises
  ``JournalOutcomeUnknown``: the caller cannot tell whether it happened. A read or list raises
  ``JournalError`` (nothing changed, so the outcome is known: nothing).

Requests are counted per method (``requests``), faulted ones included, as a store that bills
by request would count them.

Two stores of the unkind world (docs/simulation.md, "The unkind world"), off by default:

- ``honest_create=False``: a store that accepts create-if-absent and ignores it (some
  S3-compatible stores accept ``If-None-Match`` and overwrite anyway): ``create`` overwrites an
  existing key and answers True.
- ``list_lag=S``: a listing that lags writes (an S3-compatible store, NFS shared across hosts):
  each new key stays out of ``list`` for a time drawn in [0, S) seconds after its create, and
  each deleted key stays in it for a time drawn likewise (its ``read`` answers None at once:
  reads are consistent, listings are not). Drawn from a stream of its own (``store-lag:<seed>``).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sim.clock import SimClock
from spark_sqs.errors import JournalError, JournalOutcomeUnknown

METHODS = ("create", "put", "read", "list", "delete")
WRITES = frozenset({"create", "put", "delete"})


@dataclass
class StoreFault:
    """The next ``count`` calls of ``method`` (on keys starting with ``key_prefix``) fail
    ``when`` "before" or "after" their effect."""

    method: str
    when: str
    key_prefix: str = ""
    count: int = 1

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown store method {self.method!r}; one of {METHODS}")
        if self.when not in ("before", "after"):
            raise ValueError(f"a store fault is 'before' or 'after' its effect, not {self.when!r}")


@dataclass
class StoreFaultRates:
    """Probability per call of a fault before and after the effect, for the given methods."""

    before: float = 0.0
    after: float = 0.0
    methods: frozenset[str] = frozenset(METHODS)


@dataclass(frozen=True)
class StoreEvent:
    index: int
    at: float
    method: str
    key: str
    outcome: str

    def __str__(self) -> str:
        return f"{self.index:6d} t={self.at:11.3f} store.{self.method} {self.key} -> {self.outcome}"


class SimJournalStore:
    """A dict of key -> bytes with create-if-absent, faults and request counts."""

    def __init__(
        self,
        seed: int | str = 0,
        *,
        clock: SimClock | None = None,
        fault_rates: StoreFaultRates | None = None,
        faults: list[StoreFault] | None = None,
        honest_create: bool = True,
        list_lag: float = 0.0,
    ) -> None:
        self.seed = seed
        self.honest_create = honest_create
        self.list_lag = float(list_lag)
        self._lag_rng = random.Random(f"store-lag:{seed}")
        # list_lag: when each key (re)appears in listings, and until when a deleted one stays.
        self._listed_from: dict[str, float] = {}
        self._listed_until: dict[str, float] = {}
        self.lagged_listings = 0  # listings that missed a key or showed a deleted one
        # Keys whose calls draw no fault (probe keys while the store lies about creates: a
        # transient fault must not pass for the probe's refusal).
        self.fault_free_prefixes: tuple[str, ...] = ()
        self.clock = clock or SimClock()
        self.fault_rates = fault_rates or StoreFaultRates()
        self.scripted: list[StoreFault] = list(faults or [])
        self._rng = random.Random(f"store-faults:{seed}")
        self._objects: dict[str, bytes] = {}
        self._lock = threading.RLock()
        self.requests: dict[str, int] = dict.fromkeys(METHODS, 0)
        self.trace: list[StoreEvent] = []
        # (time, method, key) of every write that took effect, in order.
        self.writes: list[tuple[float, str, str]] = []

    # --- the JournalStore interface -------------------------------------------------------

    def create(self, key: str, data: bytes) -> bool:
        _check_key(key)
        data = bytes(data)

        def effect() -> tuple[bool, str]:
            if key in self._objects:
                if self.honest_create:
                    return False, "exists"
                self._objects[key] = data
                self.writes.append((self.clock.elapsed, "create", key))
                return True, "overwritten (create-if-absent ignored)"
            self._appear(key)
            self._objects[key] = data
            self.writes.append((self.clock.elapsed, "create", key))
            return True, "created"

        return self._call("create", key, effect)

    def put(self, key: str, data: bytes) -> None:
        _check_key(key)
        data = bytes(data)

        def effect() -> tuple[None, str]:
            if key not in self._objects:
                self._appear(key)
            self._objects[key] = data
            self.writes.append((self.clock.elapsed, "put", key))
            return None, "written"

        return self._call("put", key, effect)

    def read(self, key: str) -> bytes | None:
        _check_key(key)
        return self._call("read", key, lambda: _found(self._objects.get(key)))

    def list(self, prefix: str) -> list[str]:
        directory = _directory(prefix)

        def effect() -> tuple[list[str], str]:
            keys = sorted(k for k in self._listed() if k.startswith(directory))
            if self.list_lag > 0 and keys != sorted(
                k for k in self._objects if k.startswith(directory)
            ):
                self.lagged_listings += 1
                return keys, f"{len(keys)} keys (lagging)"
            return keys, f"{len(keys)} keys"

        return self._call("list", prefix, effect)

    def delete_many(self, keys: list[str]) -> None:
        """One call per key: each may fail on its own, as separate requests would."""
        for key in keys:
            self.delete(key)

    def delete(self, key: str) -> None:
        _check_key(key)

        def effect() -> tuple[None, str]:
            if self._objects.pop(key, None) is None:
                return None, "absent"
            self._disappear(key)
            self.writes.append((self.clock.elapsed, "delete", key))
            return None, "deleted"

        return self._call("delete", key, effect)

    # --- scripting and inspection (no faults, not counted) ---------------------------------

    def inject(self, fault: StoreFault) -> None:
        with self._lock:
            self.scripted.append(fault)

    def keys(self) -> list[str]:
        return sorted(self._objects)

    def snapshot(self) -> dict[str, bytes]:
        """A copy of every object, for invariant checks."""
        return dict(self._objects)

    def peek(self, key: str) -> bytes | None:
        return self._objects.get(key)

    def clear(self) -> dict[str, bytes]:
        """Remove every key (a journal deleted by hand, ``aws s3 rm --recursive``); returns what
        was there. Deletes like any other: a lagging listing still shows them for a while."""
        with self._lock:
            removed = dict(self._objects)
            for key in sorted(removed):
                del self._objects[key]
                self._disappear(key)
                self.writes.append((self.clock.elapsed, "delete", key))
            return removed

    def restore(self, objects: dict[str, bytes], keep: Iterable[str] = ()) -> None:
        """Make the store hold ``objects`` again (a deleted journal restored from a backup);
        what was written since is gone, but for the keys in ``keep``."""
        with self._lock:
            for key in sorted(set(self._objects) - set(objects) - set(keep)):
                del self._objects[key]
                self._disappear(key)
            for key, data in sorted(objects.items()):
                if key not in self._objects:
                    self._appear(key)
                self._objects[key] = data
            self.writes.append((self.clock.elapsed, "restore", ""))

    def listed_now(self) -> list[str]:
        """What ``list("")`` would answer now (no fault, not counted)."""
        return sorted(self._listed())

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    def format_trace(self, last: int | None = None) -> str:
        events = self.trace if last is None else self.trace[-last:]
        return "\n".join(str(e) for e in events)

    # --- machinery ----------------------------------------------------------------------------

    def _appear(self, key: str) -> None:
        """A key is created: with ``list_lag``, listings see it only after a drawn delay."""
        self._listed_until.pop(key, None)
        if self.list_lag > 0:
            self._listed_from[key] = self.clock.elapsed + self._lag_rng.uniform(0, self.list_lag)

    def _disappear(self, key: str) -> None:
        """A key is deleted: with ``list_lag``, listings keep it for a drawn delay."""
        self._listed_from.pop(key, None)
        if self.list_lag > 0:
            self._listed_until[key] = self.clock.elapsed + self._lag_rng.uniform(0, self.list_lag)

    def _listed(self) -> set[str]:
        if self.list_lag <= 0:
            return set(self._objects)
        now = self.clock.elapsed
        shown = {k for k in self._objects if self._listed_from.get(k, 0.0) <= now}
        shown.update(
            k for k, until in self._listed_until.items() if until > now and k not in self._objects
        )
        return shown

    def _call(self, method: str, key: str, effect: Callable[[], tuple[Any, str]]) -> Any:
        with self._lock:
            self.requests[method] += 1
            when = self._draw(method, key)
            if when == "before":
                self._log(method, key, "fault before effect")
                raise JournalError(
                    f"simulated journal store: {method} {key!r} failed before its effect",
                    retriable=True,
                )
            result, outcome = effect()
            if when == "after":
                self._log(method, key, f"{outcome}; answer lost")
                if method in WRITES:
                    raise JournalOutcomeUnknown(
                        f"simulated journal store: the answer to {method} {key!r} was lost; "
                        "the write may or may not have happened"
                    )
                raise JournalError(
                    f"simulated journal store: the answer to {method} {key!r} was lost",
                    retriable=True,
                )
            self._log(method, key, outcome)
            return result

    def _draw(self, method: str, key: str) -> str | None:
        if self.fault_free_prefixes and key.startswith(self.fault_free_prefixes):
            return None
        for i, fault in enumerate(self.scripted):
            if fault.method == method and key.startswith(fault.key_prefix):
                fault.count -= 1
                if fault.count <= 0:
                    del self.scripted[i]
                return fault.when
        rates = self.fault_rates
        if method not in rates.methods or not (rates.before or rates.after):
            return None
        draw = self._rng.random()
        if draw < rates.before:
            return "before"
        if draw < rates.before + rates.after:
            return "after"
        return None

    def _log(self, method: str, key: str, outcome: str) -> None:
        self.trace.append(StoreEvent(len(self.trace), self.clock.elapsed, method, key, outcome))


def _found(data: bytes | None) -> tuple[bytes | None, str]:
    return data, "absent" if data is None else f"{len(data)} bytes"


def _check_key(key: str) -> None:
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(
            f"journal store keys are '/'-separated relative paths without empty, '.' or '..' "
            f"parts, not {key!r}"
        )


def _directory(prefix: str) -> str:
    """``list`` works on directories: "a/b" lists "a/b/..." and not "a/bc"."""
    if prefix == "":
        return ""
    _check_key(prefix.rstrip("/"))
    return prefix.rstrip("/") + "/"
