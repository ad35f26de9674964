"""A Spark standalone cluster on this machine, for the fault harness's ``-cluster`` scenarios.
Runs in: the harness process (it starts and stops the cluster's JVMs; the query's driver is the
harness's child process, which connects to the master).

The master listens on 127.0.0.1 and each worker on a loopback address of its own (127.0.0.2,
127.0.0.3, ...), all started from the pip package's ``bin/spark-class``. Distinct addresses
matter: Spark never runs a speculative copy on the host of the original attempt, and executors
of one host (``local-cluster``) never speculate. Each worker runs its executors as JVM processes
of their own (``CoarseGrainedExecutorBackend``), so one can be SIGKILLed while the driver lives,
as a lost node or spot instance does, and the master starts a replacement.

Every JVM is started in a session of its own (its executors and their Python daemons inherit
it), so ``stop`` kills each session whole. Stopping also runs from ``atexit`` and, through
``PR_SET_PDEATHSIG``, the master and workers die with the harness even when it is SIGKILLed (a
worker's executors then exit when they lose their worker).

Also here: what the harness reads about the cluster afterwards, by process (``/proc``) and from
Spark's event log (``SparkListenerTaskStart`` with ``"Speculative": true``).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

EXECUTOR_CLASS = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# The environment a worker must not pass on: a real cluster's executors get credentials and
# settings only through the application (spark.executorEnv.*), never from the worker's shell.
PRIVATE_ENV_PREFIXES = ("AWS_", "SPARK_SQS_", "PYSPARK_")
PRIVATE_ENV = ("PYTHONPATH",)


def spark_home() -> Path:
    """The pip package's folder: it holds ``bin/spark-class`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def worker_host(index: int) -> str:
    """Worker ``index`` (0-based) listens on 127.0.0.<index + 2>: 127.0.0.1 is the master's and
    the driver's."""
    if not 0 <= index < 250:
        raise ValueError(f"worker index {index} out of range")
    return f"127.0.0.{index + 2}"


def die_with_parent(signal_number: int = signal.SIGKILL) -> None:
    """In the child before exec: send it ``signal_number`` when the harness (its parent thread)
    dies."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal_number)  # PR_SET_PDEATHSIG
    except Exception:  # pragma: no cover - not Linux: stop() and atexit still clean up
        pass


def worker_environment(base: Mapping[str, str], home: Path, host: str) -> dict[str, str]:
    """A worker's environment: the harness's, without credentials, fault settings or Python
    paths (which reach executors through ``spark.executorEnv.*`` only), bound to ``host``."""
    env = {
        key: value
        for key, value in base.items()
        if not key.startswith(PRIVATE_ENV_PREFIXES) and key not in PRIVATE_ENV
    }
    env["SPARK_HOME"] = str(home)
    env["SPARK_LOCAL_IP"] = host
    # Not the machine's name: the master and the driver must see this worker's loopback address.
    env["SPARK_LOCAL_HOSTNAME"] = host
    return env


class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores each; use as a context manager."""

    def __init__(self, work: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.work = work
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.home = spark_home()
        self.port = 0
        self.ui_port = 0
        self._processes: list[subprocess.Popen[bytes]] = []
        self._worker_pids: list[int] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def slots(self) -> int:
        return self.workers * self.cores

    @property
    def sessions(self) -> set[int]:
        """Session ids of the workers: every executor and Python worker of the cluster is in
        one of them."""
        return set(self._worker_pids)

    def __enter__(self) -> StandaloneCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop()

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = self.work / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [str(self.home / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.work,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        self._processes.append(process)
        return process

    def start(self, timeout: float = 180.0) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        self.port, self.ui_port = free_port(), free_port()
        self._spawn(
            "master",
            [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
             "--webui-port", str(self.ui_port)],
            worker_environment(os.environ, self.home, "127.0.0.1"),
        )  # fmt: skip
        self._wait(lambda state: state is not None, timeout, "the master did not start")
        for index in range(self.workers):
            host = worker_host(index)
            work_dir = self.work / f"worker-{index}"
            work_dir.mkdir(exist_ok=True)
            process = self._spawn(
                f"worker-{index}",
                [WORKER_CLASS, "--host", host, "--cores", str(self.cores),
                 "--memory", self.memory, "--work-dir", str(work_dir),
                 "--webui-port", str(free_port(host)), self.master_url],
                worker_environment(os.environ, self.home, host),
            )  # fmt: skip
            self._worker_pids.append(process.pid)
        self._wait(
            lambda state: state is not None and alive_workers(state) >= self.workers,
            timeout,
            f"{self.workers} workers did not register with the master",
        )

    def _wait(self, ready: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self._processes):
                break
            if ready(self.state()):
                return
            time.sleep(0.5)
        raise RuntimeError(f"{what}; see the logs in {self.work}")

    def state(self) -> dict[str, Any] | None:
        """The master's status page as JSON, or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
                return dict(json.load(r))
        except (OSError, ValueError):
            return None

    def executors(self) -> list[int]:
        """Process ids of the executor JVMs running on this cluster now."""
        return executor_pids(processes(), self.sessions)

    def stop(self) -> None:
        """Kill every JVM of the cluster and what it started (executors, Python daemons)."""
        atexit.unregister(self.stop)
        for process in reversed(self._processes):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for process in self._processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                pass
        # An executor that outlived its worker's session kill (it never leaves the session, but
        # be sure): anything left in the sessions goes too.
        leftovers = [pid for pid, p in processes().items() if p.session in self.sessions]
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._processes.clear()


def alive_workers(state: Mapping[str, Any]) -> int:
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


class Process(NamedTuple):
    parent: int
    session: int
    command: bytes


def processes() -> dict[int, Process]:
    """Every process of the machine, from /proc (Linux)."""
    found: dict[int, Process] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_bytes()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        # The command name in parentheses may contain spaces: split after its closing one.
        fields = stat[stat.rindex(b")") + 2 :].split()
        found[int(entry.name)] = Process(int(fields[1]), int(fields[3]), command)
    return found


def executor_pids(table: Mapping[int, Process], sessions: Iterable[int]) -> list[int]:
    """The executor JVMs (``CoarseGrainedExecutorBackend``) in ``sessions``, sorted."""
    wanted = set(sessions)
    return sorted(
        pid
        for pid, p in table.items()
        if p.session in wanted and EXECUTOR_CLASS in p.command and _is_java(p.command)
    )


def _is_java(command: bytes) -> bool:
    """A JVM, not a shell or a tool that only mentions the class on its command line."""
    program = command.split(b"\0", 1)[0]
    return program.rsplit(b"/", 1)[-1] == b"java"


# Event log: Spark's JSON lines, one event a line (spark.eventLog.compress=false, no rolling).


@dataclass
class EventLogCounts:
    applications: int = 0
    tasks: int = 0
    speculative: int = 0
    # Speculative attempts that started while another attempt of the same task was running.
    concurrent: int = 0
    # Speculative attempts that finished first (their task's result is the copy's).
    speculative_won: int = 0
    # Attempts killed once another attempt of the same task had succeeded.
    killed_by_other_attempt: int = 0
    executors_removed: int = 0
    tasks_lost_with_executor: int = 0
    # (stage, stage attempt, partition index) of each speculative attempt, for the report.
    speculative_tasks: list[tuple[int, int, int]] = field(default_factory=list)


@dataclass
class _Attempt:
    launch: int
    speculative: bool = False
    finish: int | None = None
    reason: str | None = None


def _task_key(event: Mapping[str, Any]) -> tuple[int, int, int]:
    info = event.get("Task Info", {})
    return (
        int(event.get("Stage ID", -1)),
        int(event.get("Stage Attempt ID", 0)),
        int(info.get("Index", -1)),
    )


def count_event_log(paths: Iterable[Path]) -> EventLogCounts:
    """Speculative attempts, kills and executor losses in the event logs of several runs. A
    SIGKILLed driver leaves its log ``.inprogress`` and without the events still in its buffer,
    so these are lower bounds; a torn last line is skipped."""
    counts = EventLogCounts()
    for path in paths:
        counts.applications += 1
        # (stage, stage attempt, index) -> attempt number -> what the log says of it
        tasks: dict[tuple[int, int, int], dict[int, _Attempt]] = {}
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                kind = event.get("Event")
                info = event.get("Task Info", {})
                if kind == "SparkListenerTaskStart":
                    counts.tasks += 1
                    tasks.setdefault(_task_key(event), {})[int(info.get("Attempt", 0))] = _Attempt(
                        int(info.get("Launch Time", 0)), bool(info.get("Speculative"))
                    )
                elif kind == "SparkListenerTaskEnd":
                    attempt = tasks.setdefault(_task_key(event), {}).setdefault(
                        int(info.get("Attempt", 0)),
                        _Attempt(int(info.get("Launch Time", 0)), bool(info.get("Speculative"))),
                    )
                    attempt.finish = int(info.get("Finish Time", 0)) or None
                    attempt.reason = str(event.get("Task End Reason", {}).get("Reason"))
                elif kind == "SparkListenerExecutorRemoved":
                    counts.executors_removed += 1
        for key, attempts in tasks.items():
            succeeded = any(a.reason == "Success" for a in attempts.values())
            for number, attempt in attempts.items():
                if attempt.reason == "ExecutorLostFailure":
                    counts.tasks_lost_with_executor += 1
                if attempt.reason == "TaskKilled" and succeeded:
                    counts.killed_by_other_attempt += 1
                if not attempt.speculative:
                    continue
                counts.speculative += 1
                counts.speculative_tasks.append(key)
                counts.speculative_won += attempt.reason == "Success"
                # Running at the copy's launch: started before it and not finished before it
                # (an attempt with no end in the log was still running when the log stopped).
                if any(
                    other.launch <= attempt.launch
                    and (other.finish is None or other.finish > attempt.launch)
                    for n, other in attempts.items()
                    if n != number
                ):
                    counts.concurrent += 1
    return counts


def completed_stages(path: Path) -> set[int]:
    """Ids of the stages an application's event log shows completed (successful or failed).
    Spark flushes its log at each stage's end, so the task starts of a completed stage, its
    speculative attempts among them, are in the file by then."""
    done: set[int] = set()
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if '"SparkListenerStageCompleted"' not in line:
                    continue
                try:
                    done.add(int(json.loads(line)["Stage Info"]["Stage ID"]))
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line
    except FileNotFoundError:
        pass
    return done


def event_log_of(directory: Path, application: str) -> Path:
    """An application's event log: finished, or ``.inprogress`` while it runs (or since its
    driver was killed)."""
    finished = directory / application
    return finished if finished.exists() else directory / f"{application}.inprogress"


def event_logs(directory: Path) -> list[Path]:
    """The applications' event log files (finished, or ``.inprogress`` if the driver died)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))


# What a cluster scenario's executors need from the driver's environment, passed the way a real
# cluster's executors get it: as spark.executorEnv.* of the application.
EXECUTOR_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    # chaos/inject first (fault injection in every Python worker), then the repository.
    "PYTHONPATH",
    "SPARK_SQS_CHAOS",
    "SPARK_SQS_CHAOS_LOG_LEVEL",
)


# A lone task running this long gets a speculative copy (session_conf).
SPECULATION_THRESHOLD = "8s"


def session_conf(
    cluster: StandaloneCluster,
    event_log: Path,
    env: Mapping[str, str],
    python: str,
    ui_port: int | None = None,
) -> dict[str, str]:
    """The Spark configuration of a query on ``cluster``: every slot, speculation that
    launches a copy of a task slow against its stage's median, an uncompressed event log in one
    file per application, the executors' environment, and the driver's UI on ``ui_port``
    (its REST API tells which executors run a task now)."""
    conf = {
        "spark.cores.max": str(cluster.slots),
        "spark.executor.cores": str(cluster.cores),
        "spark.executor.memory": cluster.memory,
        # Lost executors fail their tasks too; the default of 4 could end a run on kills alone.
        "spark.task.maxFailures": "8",
        "spark.pyspark.python": python,
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": event_log.resolve().as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
        "spark.speculation": "true",
        "spark.speculation.interval": "200ms",
        "spark.speculation.multiplier": "1.5",
        # With 3 or 4 receivers on 2 slots, half of them done is enough to judge the rest.
        "spark.speculation.quantile": "0.5",
        "spark.speculation.minTaskRuntime": "2s",
        # Otherwise Spark skips copies of tasks it expects to finish soon anyway.
        "spark.speculation.efficiency.enabled": "false",
        # A stage of one task (a batch of a trickle has one receiver) has no finished task to
        # judge it by: copy it once it has run this long (below the shortest slowed sleep,
        # --slow-seconds), as a stage of no more tasks than an executor has slots.
        "spark.speculation.task.duration.threshold": SPECULATION_THRESHOLD,
    }
    if ui_port is not None:
        conf["spark.ui.enabled"] = "true"
        conf["spark.ui.port"] = str(ui_port)
    for key in EXECUTOR_ENV:
        if env.get(key):
            conf[f"spark.executorEnv.{key}"] = env[key]
    return conf


def application_id(ui_port: int) -> str | None:
    """The id of the application whose driver's UI is on ``ui_port``, or None while it does
    not answer (its event log is ``<eventlog>/<id>``, ``.inprogress`` while it runs)."""
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{ui_port}/api/v1/applications", timeout=5
        ) as answer:
            applications = json.load(answer)
        return str(applications[0]["id"]) if applications else None
    except (OSError, ValueError, KeyError, IndexError):
        return None


def busy_executors(ui_port: int) -> tuple[str, list[str]] | None:
    """``(application id, ids of executors running a task now)`` from the driver's REST API,
    or None while it does not answer."""
    base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
    app = application_id(ui_port)
    if app is None:
        return None
    try:
        with urllib.request.urlopen(f"{base}/{app}/executors", timeout=5) as answer:
            executors = json.load(answer)
    except (OSError, ValueError, KeyError):
        return None
    return app, [
        str(e["id"]) for e in executors if e.get("id") != "driver" and e.get("activeTasks", 0) > 0
    ]


def executor_identity(command: bytes) -> tuple[str, str] | None:
    """``(application id, executor id)`` from an executor JVM's command line."""
    args = [a.decode(errors="replace") for a in command.split(b"\0")]
    found = {}
    for flag in ("--app-id", "--executor-id"):
        if flag in args[:-1]:
            found[flag] = args[args.index(flag) + 1]
    if len(found) != 2:
        return None
    return found["--app-id"], found["--executor-id"]
