"""Fault injection on the real boto3 SQS and S3 clients. Runs in: every process of the query
under test (the driver, Spark's Python streaming-source runner, the executors' Python workers),
loaded by ``chaos/inject/sitecustomize.py`` when ``SPARK_SQS_CHAOS`` is set.

Each SQS client, and each S3 client (the ``s3://`` journal's, built in
``spark_sqs/journal/stores.py``), gets a ``before-send`` handler that, at a configurable rate
per service, replaces the HTTP exchange of chosen operations with a failure. botocore then sees
exactly what a bad network or an overloaded service would give it, so its retries, our
classification and our recovery all run as they would in production. The kinds:

- ``throttle``: SQS answers HTTP 400 ``ThrottlingException``, S3 HTTP 503 ``SlowDown``; the
  request never reached the service.
- ``server-error``: HTTP 500 (``InternalFailure`` on SQS, ``InternalError`` on S3); the request
  never reached the service.
- ``reset``: the connection closes before the request is sent.
- ``timeout``: the request *is* sent and the service acts on it, then the response is lost (a
  read timeout). A lost ReceiveMessage leaves messages in flight that nobody knows about; a lost
  DeleteMessageBatch deleted messages that the caller thinks are still there; a lost
  SendMessageBatch (the SQS sink's) sent messages that the sink sends again; a lost
  conditional PutObject created the journal object, and botocore's retry of it then gets 412
  ``PreconditionFailed``, as if another attempt had written first. These are the cases an
  exactly-once source must survive.

Every injected fault is appended, one line each, to the log file named in the configuration, so
the harness can count them across processes.

**Slow tasks** (the cluster scenarios, to make speculation launch copies): in a share of stages
(micro-batches), the first attempt of one receiver task sleeps once, either before its first
``ReceiveMessage`` (it holds nothing yet) or after that call's answer (it holds received
messages it has not journaled), until a copy of the task starts receiving or its time is up.
The task is chosen from Spark's ``TaskContext`` (stage, partition, attempt number 0) in the
executor's Python worker, so the library needs no hook. A speculative copy or a retry (attempt
number 1 and up) runs at full speed; its first ``ReceiveMessage`` leaves a mark that wakes the
sleeping original, so that both attempts then receive and journal at the same time. Each
sleep's start and end go to a log of their own.

**Until the first speculative attempt** of a scenario is on record (the harness leaves the mark
``SPECULATION_SEEN`` in the marks folder once Spark's event log shows one), receiver 0 of every
stage is slowed, whatever the share (every batch has a receiver 0), before its first
``ReceiveMessage`` (it holds nothing, so a long sleep is safe) and until its copy wakes it, for
at most ``EAGER_SECONDS``: Spark copies a task that runs 1.5 times its stage's median, or a
lone task after a threshold (``spark.speculation.task.duration.threshold``,
chaos/cluster.py), and a sleep that lasts until the copy comes makes it that slow whatever the
machine's load. From then on, the share, partitions, points and lengths drawn as configured.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV = "SPARK_SQS_CHAOS"
# In the slow-marks folder: the harness has seen a speculative attempt in Spark's event log.
SPECULATION_SEEN = "speculation-seen"
# Until then, a slowed task sleeps until its copy wakes it, at most this long: on a loaded
# machine a receiver here took 40-90 s, and a copy comes after 1.5 times its stage's median
# (one slept 108 s for its copy). The cap only stops a sleep whose copy never comes.
EAGER_SECONDS = 300.0
KINDS = ("throttle", "server-error", "reset", "timeout")
# The SQS sink's sends (the fifo-sqs-sink scenario): a lost SendMessageBatch answer means
# messages SQS accepted that botocore, or the sink, sends again with the same deduplication ids.
SINK_OPERATIONS = ("SendMessageBatch",)
SQS_OPERATIONS = (
    "ReceiveMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibilityBatch",
    "GetQueueAttributes",
    *SINK_OPERATIONS,
)
# The journal's requests on S3: create-if-absent writes, reads, listings, removals.
S3_OPERATIONS = ("PutObject", "GetObject", "ListObjectsV2", "DeleteObject")
OPERATIONS = SQS_OPERATIONS + S3_OPERATIONS
SERVICES = ("sqs", "s3")
# Where a slowed task sleeps: before its first ReceiveMessage is sent, or after its answer.
SLOW_POINTS = ("before", "after")


def service_of(operation: str) -> str:
    return "s3" if operation in S3_OPERATIONS else "sqs"


@dataclass(frozen=True)
class FaultConfig:
    rate: float
    log: str
    seed: int = 0
    kinds: tuple[str, ...] = KINDS
    operations: tuple[str, ...] = OPERATIONS
    # The share of S3 calls that fail; None: the same as ``rate``.
    s3_rate: float | None = None
    # Slow tasks: the share of stages (micro-batches) in which the first attempt of one receiver
    # task, among partitions 0 to slow_partitions - 1, sleeps; for how long at most (drawn from
    # the range; at the "after" point capped by ``slow_after_max``), and where it is logged. One
    # task a stage: two slowed at once would hold both of two task slots, and no copy could run.
    slow_share: float = 0.0
    slow_partitions: int = 1
    slow_seconds: tuple[float, float] = (0.0, 0.0)
    slow_points: tuple[str, ...] = SLOW_POINTS
    slow_after_max: float | None = None
    slow_log: str = ""
    # Where copies mark that they started receiving (a folder), and the run (application) they
    # belong to: stage ids start at 0 in every run.
    slow_marks: str = ""
    run: int = 0

    def rate_for(self, service: str) -> float:
        if service == "s3" and self.s3_rate is not None:
            return self.s3_rate
        return self.rate

    def to_env(self) -> str:
        return json.dumps(
            {
                "rate": self.rate,
                "log": self.log,
                "seed": self.seed,
                "kinds": list(self.kinds),
                "operations": list(self.operations),
                "s3_rate": self.s3_rate,
                "slow_share": self.slow_share,
                "slow_partitions": self.slow_partitions,
                "slow_seconds": list(self.slow_seconds),
                "slow_points": list(self.slow_points),
                "slow_after_max": self.slow_after_max,
                "slow_log": self.slow_log,
                "slow_marks": self.slow_marks,
                "run": self.run,
            }
        )

    @classmethod
    def from_env(cls, text: str) -> FaultConfig:
        raw = json.loads(text)
        return cls(
            rate=float(raw["rate"]),
            log=str(raw["log"]),
            seed=int(raw.get("seed", 0)),
            kinds=tuple(raw.get("kinds", KINDS)),
            operations=tuple(raw.get("operations", OPERATIONS)),
            s3_rate=None if raw.get("s3_rate") is None else float(raw["s3_rate"]),
            slow_share=float(raw.get("slow_share", 0.0)),
            slow_partitions=int(raw.get("slow_partitions", 1)),
            slow_seconds=_pair(raw.get("slow_seconds", (0.0, 0.0))),
            slow_points=tuple(raw.get("slow_points", SLOW_POINTS)),
            slow_after_max=(
                None if raw.get("slow_after_max") is None else float(raw["slow_after_max"])
            ),
            slow_log=str(raw.get("slow_log", "")),
            slow_marks=str(raw.get("slow_marks", "")),
            run=int(raw.get("run", 0)),
        )

    def slow_plan(
        self, stage: int, partition: int, eager: bool = False
    ) -> tuple[str, float] | None:
        """``(point, seconds)`` if the first attempt of this task is to be slow, else None: the
        same answer in every process (a function of the seed, the stage, the partition and
        ``eager``). ``eager`` (no speculative attempt seen yet): receiver 0 of every stage,
        before its first receive, until its copy comes (``EAGER_SECONDS`` at most)."""
        if self.slow_share <= 0:
            return None
        if eager:
            return ("before", EAGER_SECONDS) if partition == 0 else None
        draw = random.Random(f"{self.seed}-slow-{stage}")
        if draw.random() >= self.slow_share or draw.randrange(self.slow_partitions) != partition:
            return None
        point = draw.choice(self.slow_points)
        seconds = draw.uniform(*self.slow_seconds)
        if point == "after" and self.slow_after_max is not None:
            seconds = min(seconds, self.slow_after_max)
        return point, seconds


def _pair(value: Any) -> tuple[float, float]:
    low, high = value
    return float(low), float(high)


class _Raw:
    """The part of a urllib3 response botocore reads a body from."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


class FaultInjector:
    """The ``before-send`` handler. One per process; decisions are random per process (Python
    workers are forked from one daemon, so the generator is re-seeded after a fork)."""

    def __init__(self, config: FaultConfig, sleep: Any = time.sleep) -> None:
        self.config = config
        self._sleep = sleep
        self._lock = threading.Lock()
        self._pid = -1
        self._rng = random.Random()
        self._http: Any = None
        # Task attempts (Spark's task attempt ids) already slowed in this process.
        self._slowed: set[int] = set()

    def _draw(self, rate: float) -> str | None:
        with self._lock:
            pid = os.getpid()
            if pid != self._pid:
                self._pid = pid
                self._rng = random.Random(f"{self.config.seed}-{pid}")
            if self._rng.random() >= rate:
                return None
            return self._rng.choice(self.config.kinds)

    def __call__(self, request: Any, event_name: str = "", **_: Any) -> Any:
        # before-send.<service>.<Operation>
        operation = event_name.rsplit(".", 1)[-1]
        if operation == "ReceiveMessage" and self.config.slow_share > 0:
            slowed = self._slow(request)
            if slowed is not None:
                return slowed
        if operation not in self.config.operations:
            return None
        service = service_of(operation)
        kind = self._draw(self.config.rate_for(service))
        if kind is None:
            return None
        self._record(operation, kind)
        from botocore.exceptions import ConnectionClosedError, ReadTimeoutError

        if kind == "throttle":
            if service == "s3":
                return self._s3_error(request, 503, "SlowDown", "Please reduce your request rate.")
            return self._error(request, 400, "ThrottlingException", "Rate exceeded")
        if kind == "server-error":
            if service == "s3":
                return self._s3_error(
                    request, 500, "InternalError", "We encountered an internal error."
                )
            return self._error(request, 500, "InternalFailure", "We encountered an internal error")
        if kind == "reset":
            raise ConnectionClosedError(endpoint_url=request.url)
        # timeout: the service receives and acts on the request; its answer never arrives.
        self._send(request)
        raise ReadTimeoutError(endpoint_url=request.url)

    def _slow(self, request: Any) -> Any:
        """Sleep in the first ReceiveMessage of a chosen task's first attempt, until a copy
        starts receiving or the time is up; a copy's first ReceiveMessage leaves the mark.
        Returns the answer when the call was made here (the "after" point), else None (the
        caller goes on)."""
        task = _task()
        if task is None:
            return None
        attempt_id, stage, partition, attempt = task
        with self._lock:
            if attempt_id in self._slowed:
                return None
            self._slowed.add(attempt_id)
        mark = self._mark(stage, partition)
        if attempt != 0:
            if mark is not None:
                mark.touch()
            return None
        plan = self.config.slow_plan(stage, partition, eager=self._eager())
        if plan is None:
            return None
        point, seconds = plan
        where = f"{self.config.run} {stage} {partition} {attempt_id} {point} {seconds:.1f}"
        response = self._send(request) if point == "after" else None
        self._log_slow(f"start {where}")
        deadline = time.monotonic() + seconds
        copied = False
        while time.monotonic() < deadline:
            if mark is not None and mark.exists():
                copied = True
                break
            self._sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        self._log_slow(f"{'woken' if copied else 'end'} {where}")
        return response

    def _eager(self) -> bool:
        """No speculative attempt seen yet: the harness has not left its mark (only with a
        marks folder; without one, the share applies from the start)."""
        if not self.config.slow_marks:
            return False
        return not (Path(self.config.slow_marks) / SPECULATION_SEEN).exists()

    def _mark(self, stage: int, partition: int) -> Path | None:
        if not self.config.slow_marks:
            return None
        folder = Path(self.config.slow_marks)
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{self.config.run}-{stage}-{partition}"

    def _log_slow(self, text: str) -> None:
        if self.config.slow_log:
            _append(self.config.slow_log, f"{os.getpid()} {text} {time.time():.3f}\n")

    def _send(self, request: Any) -> Any:
        from botocore.httpsession import URLLib3Session

        with self._lock:
            if self._http is None:
                self._http = URLLib3Session(timeout=60)
            http = self._http
        response = http.send(request)
        # Read the whole answer (a GetObject's body is streamed), so the connection goes back
        # to the pool; the "after" point hands it on.
        _ = response.content
        return response

    @staticmethod
    def _s3_error(request: Any, status: int, code: str, message: str) -> Any:
        from botocore.awsrequest import AWSResponse, HeadersDict

        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            "<RequestId>chaos-injected</RequestId></Error>"
        ).encode()
        headers = HeadersDict(
            {
                "Content-Type": "application/xml",
                "x-amz-request-id": "chaos-injected",
                "Content-Length": str(len(body)),
            }
        )
        return AWSResponse(request.url, status, headers, _Raw(body))

    @staticmethod
    def _error(request: Any, status: int, code: str, message: str) -> Any:
        from botocore.awsrequest import AWSResponse, HeadersDict

        body = json.dumps({"__type": f"com.amazonaws.sqs#{code}", "message": message}).encode()
        headers = HeadersDict(
            {
                "Content-Type": "application/x-amz-json-1.0",
                "x-amzn-RequestId": "chaos-injected",
                "Content-Length": str(len(body)),
            }
        )
        return AWSResponse(request.url, status, headers, _Raw(body))

    def _record(self, operation: str, kind: str) -> None:
        # The wall-clock time lines a fault up with the run's log when diagnosing.
        _append(self.config.log, f"{os.getpid()} {operation} {kind} {_role()} {time.time():.3f}\n")


def _append(path: str, line: str) -> None:
    # O_APPEND writes this small are atomic, so processes can share one log.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _task() -> tuple[int, int, int, int] | None:
    """``(task attempt id, stage, partition, attempt number)`` of the Spark task this Python
    worker runs, or None outside a task (the driver's processes)."""
    import sys

    if "pyspark" not in sys.modules:
        return None
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return None
    return ctx.taskAttemptId(), ctx.stageId(), ctx.partitionId(), ctx.attemptNumber()


def slow_tasks(log: str) -> list[SlowTask]:
    """The slowed tasks of a slow log, with whether each sleep ended, and whether a copy of the
    task woke it (a task killed while it slept, with its executor, or because a copy succeeded
    or the stage ended, has no end)."""
    found: dict[tuple[str, str], SlowTask] = {}
    try:
        with open(log, encoding="utf-8") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) != 9 or parts[1] not in ("start", "end", "woken"):
                    continue  # a torn line of a killed process
                pid, event, run, stage, partition, attempt_id, point, seconds, at = parts
                key = (pid, attempt_id)
                if event == "start":
                    found[key] = SlowTask(
                        int(pid), int(stage), int(partition), point, float(seconds), float(at),
                        run=int(run),
                    )  # fmt: skip
                elif key in found:
                    found[key].ended = True
                    found[key].woken_by_copy = event == "woken"
    except FileNotFoundError:
        pass
    return list(found.values())


@dataclass
class SlowTask:
    pid: int
    stage: int
    partition: int
    point: str
    seconds: float
    started: float
    ended: bool = False
    woken_by_copy: bool = False
    # The harness's run (application) it belongs to: stage ids start at 0 in every run.
    run: int = 0


def _role() -> str:
    """Which part of the query this process is, for the report. Spark starts its Python
    processes with ``python -m <module>``."""
    import sys

    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    main = getattr(spec, "name", "") or ""
    if main.endswith("python_streaming_source_runner"):
        return "driver"
    if main in ("pyspark.daemon", "pyspark.worker"):
        return "executor"
    return "other"


_INSTALLED: FaultInjector | None = None


def install(config: FaultConfig | None = None) -> FaultInjector | None:
    """Attach the injector to every SQS and S3 client this process creates from now on."""
    global _INSTALLED
    if _INSTALLED is not None:
        return _INSTALLED
    if config is None:
        text = os.environ.get(ENV)
        if not text:
            return None
        config = FaultConfig.from_env(text)
    import botocore.session

    injector = FaultInjector(config)
    original = botocore.session.Session.create_client

    def create_client(self: Any, service_name: str, *args: Any, **kwargs: Any) -> Any:
        client = original(self, service_name, *args, **kwargs)
        if service_name in SERVICES:
            client.meta.events.register(f"before-send.{service_name}", injector)
        return client

    botocore.session.Session.create_client = create_client  # type: ignore[method-assign]
    _INSTALLED = injector
    return injector


def count_faults(log: str) -> dict[tuple[str, str], int]:
    """``(operation, kind) -> count`` from a fault log."""
    counts: dict[tuple[str, str], int] = {}
    try:
        with open(log, encoding="utf-8") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) >= 3:
                    key = (parts[1], parts[2])
                    counts[key] = counts.get(key, 0) + 1
    except FileNotFoundError:
        pass
    return counts


def faults_by_role(log: str) -> dict[str, tuple[int, int]]:
    """``role -> (faults, distinct processes)``: where the faults landed."""
    return {role: counts for (role, _), counts in _by_role(log, lambda _: "").items()}


def faults_by_role_and_service(log: str) -> dict[tuple[str, str], tuple[int, int]]:
    """``(role, service) -> (faults, distinct processes)``."""
    return _by_role(log, service_of)


def _by_role(log: str, service: Any) -> dict[tuple[str, str], tuple[int, int]]:
    faults: dict[tuple[str, str], int] = {}
    processes: dict[tuple[str, str], set[str]] = {}
    try:
        with open(log, encoding="utf-8") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) >= 4:
                    key = (parts[3], service(parts[1]))
                    faults[key] = faults.get(key, 0) + 1
                    processes.setdefault(key, set()).add(parts[0])
    except FileNotFoundError:
        pass
    return {key: (faults[key], len(processes[key])) for key in faults}
