"""Test doubles shared by the tests, each once (the builders of test data are in
tests/factories.py): a clock that moves only when told; SQS clients (scripted receives, SQS's
visibility rules, a FIFO queue's sends); an in-memory journal of receipts and in-memory or hooked
journal stores, some of which misbehave as real stores may (listings that lag, a create that
ignores existence, a key an executor does not see); and a stand-in for Databricks' service
credentials, which cannot run here. A double that only one test needs and that is part of
what that test says stays in the test."""

from __future__ import annotations

import random
import sys
import textwrap
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from botocore.exceptions import ClientError

from spark_sqs.journal import EntryReceipts, JournalStore
from tests.factories import QUEUE_URL, sqs_message

Hook = Callable[[str, str], None]

NOW = 1_700_000_000.0  # a wall clock time: 2023-11-14T22:13:20Z
TWELVE_HOURS = 43_200.0  # SQS's ceiling on a message's invisibility, from its receive


class Clock:
    """Monotonic or wall time that moves only when a test sets ``now`` or someone sleeps.
    ``on_sleep`` hooks run after every sleep (another party acting meanwhile)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.on_sleep: list[Callable[[], None]] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for hook in self.on_sleep:
            hook()


class HookedStore:
    """A real store, with ``before(method, key)`` and ``after(method, key)`` run around every
    call: a hook that raises stands for a failure before or after the effect (a lost
    response), one that blocks for a race, one that records for counting."""

    def __init__(
        self, inner: JournalStore, before: Hook | None = None, after: Hook | None = None
    ) -> None:
        self.inner = inner
        self.before = before
        self.after = after
        self.calls: list[tuple[str, str]] = []

    def _run(self, method: str, key: str, *args: Any) -> Any:
        self.calls.append((method, key))
        if self.before is not None:
            self.before(method, key)
        result = getattr(self.inner, method)(key, *args)
        if self.after is not None:
            self.after(method, key)
        return result

    def create(self, key: str, data: bytes) -> bool:
        return self._run("create", key, data)

    def put(self, key: str, data: bytes) -> None:
        self._run("put", key, data)

    def read(self, key: str) -> bytes | None:
        return self._run("read", key)

    def list(self, prefix: str) -> list[str]:
        return self._run("list", prefix)

    def delete(self, key: str) -> None:
        self._run("delete", key)

    def delete_many(self, keys: list[str]) -> None:
        for key in keys:
            self._run("delete", key)


def stub_sqs_client(attempts: int | None = None) -> Any:
    """A boto3 SQS client for botocore's ``Stubber``: a region and dummy keys, no endpoint it
    could reach; ``attempts`` caps botocore's own retries."""
    import boto3
    from botocore.config import Config

    config = Config(retries={"total_max_attempts": attempts}) if attempts is not None else None
    return boto3.client(
        "sqs",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=config,
    )


def client_error(code: str, status: int, operation: str = "ReceiveMessage") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        operation,
    )


class FakeSqs:
    """A queue of ``available`` messages, or scripted answers (a list of messages, or an
    exception to raise) for each ReceiveMessage call. Batch calls succeed for every entry.
    Records every call."""

    def __init__(
        self,
        available: int = 0,
        script: list[list[dict[str, Any]] | Exception] | None = None,
        on_receive: Callable[[], None] | None = None,
        queue_urls: tuple[str, ...] = (QUEUE_URL,),
    ) -> None:
        self.queue = [sqs_message(n) for n in range(available)]
        self.script = list(script) if script is not None else None
        self.on_receive = on_receive
        self.receive_calls: list[dict[str, Any]] = []
        self.batch_calls: list[tuple[str, list[dict[str, Any]]]] = []
        # The queues batch calls may name (several queues), and the one each call named.
        self.queue_urls = set(queue_urls)
        self.batch_queues: list[str] = []

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        self.receive_calls.append(kwargs)
        if self.on_receive is not None:
            self.on_receive()
        wanted = kwargs["MaxNumberOfMessages"]
        assert 1 <= wanted <= 10, f"SQS rejects MaxNumberOfMessages={wanted}"
        if self.script is not None:
            answer = self.script.pop(0) if self.script else []
            if isinstance(answer, Exception):
                raise answer
            assert len(answer) <= wanted, "script answers more than was asked for"
            messages = answer
        else:
            messages, self.queue = self.queue[:wanted], self.queue[wanted:]
        return {"Messages": messages} if messages else {}

    def deleted(self) -> list[dict[str, Any]]:
        """The entries of every DeleteMessageBatch call so far, in order."""
        return [e for action, entries in self.batch_calls if action == "delete" for e in entries]

    def _batch(self, action: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.batch_calls.append((action, Entries))
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        assert QueueUrl in self.queue_urls, QueueUrl
        self.batch_queues.append(QueueUrl)
        return self._batch("delete", Entries)

    def change_message_visibility_batch(
        self, QueueUrl: str, Entries: list[dict[str, Any]]
    ) -> dict[str, Any]:
        assert QueueUrl in self.queue_urls, QueueUrl
        self.batch_queues.append(QueueUrl)
        return self._batch("visibility", Entries)

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        """The driver's backlog poll: every count is the number of queued messages."""
        assert QueueUrl in self.queue_urls, QueueUrl
        return {"Attributes": {name: str(len(self.queue)) for name in AttributeNames}}


Failure = tuple[str, bool]  # (Code, SenderFault) of a Failed entry


@dataclass
class VisibilityCall:
    at: float  # monotonic time of the call
    entries: list[dict[str, Any]]

    @property
    def handles(self) -> list[str]:
        return [e["ReceiptHandle"] for e in self.entries]

    @property
    def timeouts(self) -> set[int]:
        return {e["VisibilityTimeout"] for e in self.entries}


class VisibilitySqs:
    """``change_message_visibility_batch`` with injected faults and SQS's visibility rules, for
    the messages a test ``receive``s: it refuses to extend a message that is no longer in
    flight, or past 12 hours from its receive, as SQS does."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.calls: list[VisibilityCall] = []
        # Raised by the next calls, one each, before any entry is looked at.
        self.errors: list[Exception] = []
        # Per receipt handle: failures for its next attempts, one each.
        self.failures: dict[str, list[Failure]] = defaultdict(list)
        # Per receipt handle of a message a test received: receive time and end of visibility.
        self.received_at: dict[str, float] = {}
        self.visible_at: dict[str, float] = {}
        # Rejections by the SQS model itself (a correct heartbeat never causes one).
        self.rejected: list[tuple[str, str]] = []
        self.on_call: Callable[[], None] | None = None

    def receive(self, handle: str, at: float, visibility: int) -> None:
        self.received_at[handle] = at
        self.visible_at[handle] = at + visibility

    def change_message_visibility_batch(
        self, QueueUrl: str, Entries: list[dict[str, Any]]
    ) -> dict[str, Any]:
        assert QueueUrl == QUEUE_URL
        assert 1 <= len(Entries) <= 10, "SQS takes 1 to 10 entries per batch call"
        now = self.clock()
        self.calls.append(VisibilityCall(now, [dict(e) for e in Entries]))
        if self.on_call is not None:
            self.on_call()
        if self.errors:
            raise self.errors.pop(0)
        successful: list[dict[str, str]] = []
        failed: list[dict[str, Any]] = []
        for entry in Entries:
            handle, timeout = entry["ReceiptHandle"], entry["VisibilityTimeout"]
            failure = self._check(handle, timeout, now)
            if failure is None:
                successful.append({"Id": entry["Id"]})
                if handle in self.visible_at:
                    self.visible_at[handle] = now + timeout
            else:
                code, sender_fault = failure
                failed.append(
                    {"Id": entry["Id"], "Code": code, "SenderFault": sender_fault, "Message": code}
                )
        return {"Successful": successful, "Failed": failed}

    def _check(self, handle: str, timeout: int, now: float) -> Failure | None:
        if self.failures[handle]:
            return self.failures[handle].pop(0)
        if handle not in self.received_at:
            return None
        if self.visible_at[handle] <= now:
            self.rejected.append((handle, "not in flight"))
            return ("AWS.SimpleQueueService.MessageNotInflight", True)
        if now + timeout > self.received_at[handle] + TWELVE_HOURS:
            self.rejected.append((handle, "past 12 hours"))
            return ("InvalidParameterValue", True)
        return None

    def handles_sent(self) -> list[str]:
        return [h for c in self.calls for h in c.handles]


class MemoryStore:
    """A journal store in a dict (what the acknowledger's report records need of one)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def create(self, key: str, data: bytes) -> bool:
        if key in self.objects:
            return False
        self.objects[key] = data
        return True

    def put(self, key: str, data: bytes) -> None:
        self.objects[key] = data

    def read(self, key: str) -> bytes | None:
        return self.objects.get(key)

    def list(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    def delete_many(self, keys: list[str]) -> None:
        for key in keys:
            self.delete(key)


class _Records:
    """A record kind of a fake journal: the fake's methods, under the names the kind's object
    gives them (``journal.entries.read_receipts``, ``journal.dedupe.write``, ...)."""

    def __init__(self, journal: object, **methods: str) -> None:
        self._journal = journal
        self._methods = methods

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._journal, self._methods[name])
        except KeyError:
            raise AttributeError(name) from None


class FakeJournal:
    """The journal's receipts in memory, as the heartbeat and the acknowledger read them
    (entries by batch and receiver, drop and dedupe records); records every read."""

    location = "memory://fake"

    def __init__(
        self, batches: dict[int, list[tuple[str, str]]] | None = None, received_at: float = NOW
    ) -> None:
        self.store = MemoryStore()
        self.stored: dict[int, dict[int, EntryReceipts]] = defaultdict(dict)
        self.listed: list[int] = []  # batches whose receivers were listed
        self.read: list[tuple[int, int]] = []  # entries read one by one
        self.reads: list[int] = []  # batches read whole
        self.unreadable: set[tuple[int, int]] = set()  # listed, but read_receipts answers None
        self.removed: list[int] = []
        self.collected: list[int] = []  # oldest pending batch at each drop-set collection
        # Batch -> its uncertain ids and until when (monotonic) they are kept; None: an earlier
        # driver's record, kept a window from when it is read (as journal/dedupe.py's).
        self.dedupe_records: dict[int, tuple[list[str], float | None]] = {}
        self.segments: list[tuple[list[str], float]] = []  # duplicate-window segments written
        # Per batch: receiver -> the deadline its extension marker names (executor/extension.py).
        self.extended: dict[int, dict[int, float]] = defaultdict(dict)
        self.marker_reads: list[tuple[int, int]] = []  # (batch, receiver) markers read by key
        # The record kinds, as the journal's objects name their methods (journal/entries.py).
        self.entries = _Records(
            self,
            read_receipts="read_receipts",
            batch_receipts="batch_receipts",
            receiver_ids="receiver_ids",
            batch_message_ids="batch_message_ids",
            extended_receivers="extended_receivers",
            names="entry_names",
        )
        self.batches = _Records(self, remove="remove_batch", collect="collect_batches")
        self.drops = _Records(self, collect="collect_drops")
        self.window = _Records(
            self, write="write_window", collect="collect_window", driver_seal="driver_seal"
        )
        self.dedupe = _Records(
            self,
            write="write_dedupe",
            read="read_dedupe",
            expire="expire_dedupe",
            collect="expire_dedupe",
        )
        self.metrics = _Records(self, collect_legacy="collect_legacy_metrics")
        for batch, pairs in (batches or {}).items():
            self.add_pairs(batch, pairs, received_at)

    def add(self, receipts: EntryReceipts) -> None:
        self.stored[receipts.batch][receipts.receiver] = receipts

    def add_pairs(self, batch: int, pairs: list[tuple[str, str]], received_at: float = NOW) -> None:
        """One entry, of receiver 0, holding ``(message id, receipt handle)`` pairs."""
        ids, handles = zip(*pairs, strict=True) if pairs else ((), ())
        self.stored[batch][0] = EntryReceipts(batch, 0, received_at, tuple(ids), tuple(handles))

    def receivers(self, batch: int) -> list[int]:
        self.listed.append(batch)
        return sorted(self.stored.get(batch, {}))

    def batch_index(self, batch: int) -> tuple[list[int], dict[int, float]]:
        return self.receivers(batch), dict(self.extended.get(batch, {}))

    def read_receipts(self, batch: int, receiver: int) -> EntryReceipts | None:
        self.read.append((batch, receiver))
        if (batch, receiver) in self.unreadable:
            self.unreadable.discard((batch, receiver))
            return None
        return self.stored.get(batch, {}).get(receiver)

    def batch_receipts(
        self, batch: int, receivers: Iterable[int] | None = None
    ) -> list[EntryReceipts]:
        """Without ``receivers``, the entries that hold messages; with them, as the journal
        reads by key: the entries of those receivers that exist."""
        self.reads.append(batch)
        entries = self.stored.get(batch, {})
        if receivers is not None:
            return [entries[r] for r in sorted(set(receivers)) if r in entries]
        return [entries[r] for r in sorted(entries) if entries[r].message_ids]

    def receiver_ids(self, batch: int, receiver: int) -> list[str]:
        self.read.append((batch, receiver))
        entry = self.stored.get(batch, {}).get(receiver)
        return [] if entry is None else list(entry.message_ids)

    def batch_message_ids(
        self, batch: int, receivers: Iterable[int], but: int | None = None
    ) -> frozenset[str]:
        return frozenset(
            i for r in sorted(set(receivers)) if r != but for i in self.receiver_ids(batch, r)
        )

    def extended_receivers(self, batch: int, receivers: Iterable[int]) -> set[int]:
        """Which of ``receivers`` have an extension marker (read by key, one each)."""
        asked = sorted(set(receivers))
        self.marker_reads.extend((batch, r) for r in asked)
        return {r for r in asked if r in self.extended.get(batch, {})}

    def remove_batch(
        self,
        batch: int,
        also: Sequence[str] = (),
        files: Sequence[str] | None = None,
        probed: bool = False,
    ) -> None:
        self.removed.append(batch)
        self.stored.pop(batch, None)

    def entry_names(self, receivers: Iterable[int]) -> list[str]:
        return [f"{r:05d}.arrow" for r in sorted(set(receivers))]

    def collect_batches(self, below: int) -> int:
        return 0

    def collect_drops(self, oldest_pending: int) -> int:
        self.collected.append(oldest_pending)
        return 0

    def write_window(
        self,
        message_ids: list[str],
        *,
        batch: int,
        who: str,
        expires_at: float,
        seal: Any = None,
    ) -> None:
        self.segments.append((sorted(message_ids), expires_at))

    def collect_window(self, now: float, oldest_pending: int | None = None) -> int:
        return 0

    def driver_seal(self, batch: int, receivers: Any) -> None:
        return None

    def collect_legacy_metrics(self, acked: int) -> bool:
        return False  # no earlier version's metrics/ files

    def write_dedupe(
        self, batch: int, message_ids: list[str], *, now: float, window: float, wall: float
    ) -> None:
        self.dedupe_records[batch] = (list(message_ids), now + window)

    def read_dedupe(self, now: float, window: float) -> dict[str, float]:
        out: dict[str, float] = {}
        for batch, (ids, until) in sorted(self.dedupe_records.items()):
            if until is None:
                until = now + window
                self.dedupe_records[batch] = (ids, until)
            if until > now:
                for i in ids:
                    out[i] = max(until, out.get(i, 0.0))
        return out

    def expire_dedupe(self, now: float) -> None:
        return None  # the fake keeps every record (tests read what was written)


class ListHidingStore(HookedStore):
    """A real store whose LIST misses the keys ``hidden(key)`` is true for: written and
    readable by key, but not listed yet, as a listing that lags a write (S3-compatible stores,
    NFS across hosts)."""

    def __init__(self, inner: JournalStore, hidden: Callable[[str], bool]) -> None:
        super().__init__(inner)
        self.hidden = hidden

    def list(self, prefix: str) -> list[str]:
        return [k for k in super().list(prefix) if not self.hidden(k)]


class CreateIgnoresExistenceStore(HookedStore):
    """A real store whose ``create`` overwrites and always answers that it created the key:
    an S3-compatible store that accepts ``If-None-Match: *`` and ignores it."""

    def create(self, key: str, data: bytes) -> bool:
        self.calls.append(("create", key))
        self.inner.put(key, data)
        return True


class FakeFifoSqs:
    """A FIFO queue's SendMessageBatch: slow calls, random per-entry and whole-call failures.
    Records the order in which each group's messages were accepted, and what was in flight."""

    def __init__(self, fail_rate: float, seed: int) -> None:
        self.random = random.Random(seed)
        self.fail_rate = fail_rate
        self.lock = threading.Lock()
        self.accepted: dict[str, list[int]] = {}
        self.in_flight_groups: set[str] = set()
        self.overlap: list[str] = []
        self.max_concurrent = 0
        self.concurrent = 0
        self.calls: list[list[str]] = []

    def send_message_batch(self, QueueUrl: str, Entries: list[dict]) -> dict:  # noqa: N803
        groups = [e["MessageGroupId"] for e in Entries]
        assert len(groups) == len(set(groups)), "one entry per group per call"
        with self.lock:
            self.calls.append(groups)
            self.overlap.extend(g for g in groups if g in self.in_flight_groups)
            self.in_flight_groups.update(groups)
            self.concurrent += 1
            self.max_concurrent = max(self.max_concurrent, self.concurrent)
            call_fails = self.random.random() < self.fail_rate
            fails = [self.random.random() < self.fail_rate for _ in Entries]
        time.sleep(0.002)
        try:
            if call_fails:
                raise ClientError(
                    {"Error": {"Code": "ThrottlingException"}, "ResponseMetadata": {}},
                    "SendMessageBatch",
                )
            ok, failed = [], []
            with self.lock:
                for entry, fail in zip(Entries, fails, strict=True):
                    if fail:
                        failed.append({"Id": entry["Id"], "Code": "InternalError"})
                    else:
                        n = int(entry["MessageBody"][1:])
                        self.accepted.setdefault(entry["MessageGroupId"], []).append(n)
                        ok.append({"Id": entry["Id"]})
            return {"Successful": ok, "Failed": failed}
        finally:
            with self.lock:
                self.in_flight_groups.difference_update(groups)
                self.concurrent -= 1


class FlakyJournal(FakeJournal):
    """Raises on the first entry read; signals once a later tick got through."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.recovered = threading.Event()
        self.threads: set[threading.Thread] = set()

    def read_receipts(self, batch: int, receiver: int) -> EntryReceipts | None:
        self.threads.add(threading.current_thread())
        self.calls += 1
        if self.calls == 1:
            raise OSError("journal store unreachable (injected)")
        if self.calls >= 3:
            self.recovered.set()
        return super().read_receipts(batch, receiver)


class GhostListingStore(HookedStore):
    """A real store whose LIST still shows keys deleted within the lag (``ghosts``), as a
    listing that lags a delete."""

    def __init__(self, inner: Any, ghosts: list[str]) -> None:
        super().__init__(inner)
        self.ghosts = ghosts

    def list(self, prefix: str) -> list[str]:
        return sorted({*super().list(prefix), *(g for g in self.ghosts if g.startswith(prefix))})


class BlindStore:
    """A store on which one key reads as absent, by key and by range: an executor that does not
    see what the driver wrote (another mount, a lagging store)."""

    def __init__(self, inner: Any, hidden: str) -> None:
        self.inner, self.hidden = inner, hidden

    def read(self, key: str) -> bytes | None:
        return None if key == self.hidden else self.inner.read(key)

    def open_random(self, key: str) -> Any:
        # Ranged reads (entries' receipt columns) miss it too.
        return None if key == self.hidden else self.inner.open_random(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# -- Databricks ----------------------------------------------------------------------------------

# Databricks' service-credential provider cannot run here (it exists only on a Databricks
# runtime): this module implements exactly the UDF API Databricks documents and nothing more;
# nothing here ran on Databricks.
DATABRICKS_SERVICE_CREDENTIALS = '''
"""Stand-in for Databricks' databricks.service_credentials (the documented UDF API only)."""
import botocore.session

CALLS = []
KNOWN = {"sqs-orders": ("AKIASERVICECREDENTIAL", "service-secret")}


def getServiceCredentialsProvider(name):
    CALLS.append(name)
    if name not in KNOWN:
        raise PermissionError(f"service credential {name} does not exist or no ACCESS")
    session = botocore.session.Session()
    session.set_credentials(*KNOWN[name])
    return session
'''


def install_databricks_service_credentials(directory: Path, monkeypatch: Any) -> ModuleType:
    """A stand-in for Databricks' ``databricks.service_credentials`` module, which cannot run
    here: ``getServiceCredentialsProvider(name)`` as Databricks documents it (a botocore session
    for a known name, ``PermissionError`` otherwise), written under ``directory`` and importable
    for the rest of the test (``monkeypatch`` puts it on ``sys.path``)."""
    package = directory / "databricks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "service_credentials.py").write_text(textwrap.dedent(DATABRICKS_SERVICE_CREDENTIALS))
    for name in ("databricks", "databricks.service_credentials"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(directory))
    import databricks.service_credentials as module  # type: ignore[import-not-found]

    return module
