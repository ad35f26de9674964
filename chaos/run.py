"""``make chaos`` / ``make soak``: kill the query and break its SQS calls, then count.

Runs in: the harness process (an embedded moto SQS, a producer thread, the kill loop). The query
runs in a child process (``chaos/child.py``) that is SIGKILLed at random moments and restarted
from its checkpoint (each run with a ``numPartitions`` and ``maxMessagesPerTrigger`` drawn
anew), while every SQS call it makes fails at ``--fault-rate``, and with an ``s3://`` journal on
the embedded moto server every S3 call too (see ``chaos/faults.py``). At the end the committed
output of the file sink is checked by message id and payload number against what the producer
sent, and the queue must be empty. In the sink round trip (``fifo-sqs-sink``) the query writes
with ``writeStream.format("sqs")`` into a second FIFO queue instead, and what arrived there is
drained and checked the same way once the query has stopped (``drain_target``).

The ``-cluster`` scenarios run the query's executors on a Spark standalone cluster that the
harness starts from the pip package (``chaos/cluster.py``), with speculation on: executor JVMs
are SIGKILLed mid-batch while the driver lives, one receiver task in a share of batches is
slowed until Spark launches a speculative copy beside it, the journal is on the embedded S3,
and the sink writes every batch and then skips ids it has (``write-then-skip``). Speculative
attempts and lost executors are counted from Spark's event log.

A scenario passes with zero lost, zero duplicated, nothing left in the queue and, on FIFO
queues, every message group in order; a cluster scenario also needs at least one speculative
attempt. The exit status is 0 only if every scenario passes.

A soak with ``--steady N`` keeps the producer going for N more seconds after the kills, while
the last run (no kills) takes the traffic, and samples the RSS of that run's processes from
/proc (``RssSampler``): the driver's streaming-source process and the executors' Python
workers must be flat after warm-up (``flatness``). Reported, not a pass condition.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chaos.cluster import (
    EventLogCounts,
    StandaloneCluster,
    application_id,
    busy_executors,
    count_event_log,
    die_with_parent,
    event_logs,
    executor_identity,
    executor_pids,
    free_port,
    session_conf,
)
from chaos.cluster import processes as _processes
from chaos.faults import (
    ENV,
    KINDS,
    OPERATIONS,
    S3_OPERATIONS,
    SINK_OPERATIONS,
    SLOW_POINTS,
    FaultConfig,
    count_faults,
    faults_by_role_and_service,
    slow_tasks,
)
from chaos.kills import Schedule, SpeculationWatch, carry_out, draw_kills
from chaos.sink import committed_batches, skipped_batches, write_then_skip_batches
from spark_sqs.sqs.client import queue_counts

REPO = Path(__file__).resolve().parent.parent
INJECT = Path(__file__).resolve().parent / "inject"
CHILD = Path(__file__).resolve().parent / "child.py"
FIFO_GROUPS = 8


JOURNAL_BUCKET = "chaos-journal"


@dataclass(frozen=True)
class Scenario:
    name: str
    fifo: bool
    delete_after_journal: bool = False
    # "local": a directory in the work dir; "s3": a prefix in a bucket on the embedded moto
    # server, whose PutObject, GetObject, ListObjectsV2 and DeleteObject calls fail too.
    journal: str = "local"
    # "parquet": the file sink; "sqs": writeStream.format("sqs") into a second FIFO queue, whose
    # SendMessageBatch calls fail too; "write-then-skip": a foreachBatch that writes every batch,
    # then skips the commit of an id it has (Iceberg's streaming write).
    sink: str = "parquet"
    # Several queues in one stream: the producer spreads its messages over them.
    queues: int = 1
    # poisonMessagePolicy=deadLetter, and one message that makes its batch fail every time.
    poison: bool = False
    # The producer publishes to an SNS topic the queue subscribes to (envelopes, not raw
    # delivery); the query reads with messageFormat=sns.
    sns: bool = False
    # Executors on a standalone cluster the harness starts (chaos/cluster.py), speculation on,
    # executor JVMs SIGKILLed and receiver tasks slowed; needs one speculative attempt to pass.
    cluster: bool = False


def _on_cluster(name: str, fifo: bool, delete_after_journal: bool = False) -> Scenario:
    return Scenario(
        name, fifo, delete_after_journal, journal="s3", sink="write-then-skip", cluster=True
    )


# SQS drops a FIFO copy only within 5 minutes of the first send (moto too: it compares send
# times against the same 300 s). A sink round trip that runs longer may duplicate legitimately.
DEDUPE_WINDOW_SECONDS = 300.0

SCENARIOS = {
    "standard": Scenario("standard", fifo=False),
    "standard-journal-delete": Scenario("standard-journal-delete", False, True),
    "fifo": Scenario("fifo", fifo=True),
    "fifo-journal-delete": Scenario("fifo-journal-delete", True, True),
    "standard-s3": Scenario("standard-s3", False, journal="s3"),
    "fifo-s3": Scenario("fifo-s3", True, journal="s3"),
    "fifo-journal-delete-s3": Scenario("fifo-journal-delete-s3", True, True, journal="s3"),
    # Not deleteAfterJournal: there one group's messages of a batch may be spread over several
    # receivers, and the sink then sends them in no defined order (docs/sink.md).
    "fifo-sqs-sink": Scenario("fifo-sqs-sink", fifo=True, sink="sqs"),
    "standard-two-queues": Scenario("standard-two-queues", False, queues=2),
    "fifo-two-queues": Scenario("fifo-two-queues", True, queues=2),
    # One message makes every task holding it fail (a UDF raises): the policy must narrow its
    # batch, quarantine it in the dead-letter queue once, and deliver the rest exactly once.
    "standard-poison": Scenario("standard-poison", False, poison=True),
    "standard-sns": Scenario("standard-sns", False, sns=True),
    "fifo-poison": Scenario("fifo-poison", True, poison=True),
    # A real cluster: more receivers than task slots, lost executors and speculative copies,
    # behind a sink that runs replayed batches (write-then-skip), with the journal on S3.
    "standard-cluster": _on_cluster("standard-cluster", fifo=False),
    "fifo-cluster": _on_cluster("fifo-cluster", fifo=True),
    "fifo-journal-delete-cluster": _on_cluster("fifo-journal-delete-cluster", True, True),
}


@dataclass
class Outcome:
    scenario: str
    sent: int = 0
    kills: int = 0
    worker_kills: int = 0
    runs: int = 0
    query_failures: int = 0
    faults: dict[tuple[str, str], int] = field(default_factory=dict)
    fault_roles: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    # (numPartitions, maxMessagesPerTrigger) of each run, in order.
    run_options: list[tuple[int, int]] = field(default_factory=list)
    journal: str = "local"
    sink: str = "parquet"
    # Sink round trip: seconds from the first run's start until the target queue held
    # everything; over DEDUPE_WINDOW_SECONDS a replay may legitimately duplicate.
    sink_span: float = 0.0
    # Target messages sharing a deduplication id: SQS (and moto) should have dropped them.
    same_dedupe_id: int = 0
    # The sink's counters summed over its metrics files (the last attempt of each batch).
    sink_counters: dict[str, int] = field(default_factory=dict)
    # Poison scenarios: copies of the poison message in the dead-letter queue (must be 1) and
    # in the sink (must be 0); other messages there count as unexpected.
    poison: bool = False
    quarantined: int = 0
    poison_in_sink: int = 0
    rows: int = 0
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    left_in_queue: int = 0
    order_violations: int = 0
    stalls: int = 0
    seconds: float = 0.0
    drained: bool = False
    # A soak's steady run (--steady): its processes' RSS samples and their flatness.
    steady_seconds: float = 0.0
    rss: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Cluster scenarios: executor JVMs the harness SIGKILLed while they ran a task, the slowed
    # tasks (of them, those a copy woke, and those killed in their sleep: with their executor,
    # or when their stage ended), what the event log shows, and the batches the
    # write-then-skip sink ran again and dropped.
    cluster: bool = False
    executor_kills: int = 0
    slowed: int = 0
    slowed_woken_by_copy: int = 0
    slowed_cut_short: int = 0
    events: EventLogCounts = field(default_factory=EventLogCounts)
    skipped_batches: int = 0
    # Kills held while a slowed task waited for its copy (before the first speculative
    # attempt was on record), and for how long in all.
    kills_held: int = 0
    held_seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return (
            (not self.cluster or self.events.speculative >= 1)
            and self.drained
            and self.lost == 0
            and self.duplicated == 0
            and self.unexpected == 0
            and self.left_in_queue == 0
            and self.order_violations == 0
            and (not self.poison or (self.quarantined == 1 and self.poison_in_sink == 0))
        )


def say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


class Producer(threading.Thread):
    """Numbered messages at a steady rate; remembers what SQS accepted."""

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        *,
        fifo: bool,
        rate: float,
        total: int | None,
        until: float | None,
        sns: tuple[Any, str] | None = None,
    ) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        # (SNS client, topic ARN): publish there instead; ``sent`` then holds SNS message ids.
        self._sns = sns
        # Several queues (comma-separated): each batch of ten goes to the next queue.
        self._urls = queue_url.split(",")
        self._sqs, self._url, self._fifo, self._rate = sqs, self._urls[0], fifo, rate
        self._total, self._until = total, until
        self._halt = threading.Event()
        self.sent: dict[int, str] = {}

    def run(self) -> None:
        from spark_sqs.producer import numbered_entries

        started = time.monotonic()
        n = 0
        while not self._halt.is_set():
            if self._total is not None and n >= self._total:
                break
            if self._until is not None and time.monotonic() >= self._until:
                break
            stop = n + 10 if self._total is None else min(n + 10, self._total)
            group = f"g{(n // 10) % FIFO_GROUPS}" if self._fifo else None
            entries = numbered_entries(n, stop, fifo_group=group)
            url = self._urls[(n // 10) % len(self._urls)]
            if self._sns is not None:
                client, topic = self._sns
                response = client.publish_batch(
                    TopicArn=topic,
                    PublishBatchRequestEntries=[
                        {"Id": e["Id"], "Message": e["MessageBody"]} for e in entries
                    ],
                )
            else:
                response = self._sqs.send_message_batch(QueueUrl=url, Entries=entries)
            if response.get("Failed"):
                raise RuntimeError(f"the producer's send failed: {response['Failed']}")
            for ok in response["Successful"]:
                self.sent[int(ok["Id"])] = ok["MessageId"]
            n = stop
            ahead = n / self._rate - (time.monotonic() - started)
            if ahead > 0:
                self._halt.wait(ahead)

    def stop(self) -> None:
        self._halt.set()
        self.join(30)


class Child:
    """One run of the query process."""

    def __init__(
        self,
        work: Path,
        run: int,
        endpoint: str,
        queue_url: str,
        args: Any,
        scenario: Scenario,
        faults: FaultConfig | None,
        journal: str,
        receivers: int,
        max_per_trigger: int,
        target_url: str | None = None,
        poison: tuple[int, str] | None = None,
        cluster: StandaloneCluster | None = None,
    ) -> None:
        self.sns = scenario.sns
        self.number = run
        self._application: str | None = None
        visibility = visibility_of(scenario, args)
        self.control = work / f"control-{run}"
        self.control.mkdir()
        self.log = work / f"child-{run}.log"
        command = [
            sys.executable, str(CHILD),
            "--endpoint", endpoint, "--queue-url", queue_url,
            "--journal", journal, "--checkpoint", str(work / "checkpoint"),
            "--out", str(work / "out"), "--control", str(self.control),
            "--visibility", str(visibility), "--receivers", str(receivers),
            "--max-per-trigger", str(max_per_trigger),
            "--stall-every", str(args.stall_every),
            "--stall-seconds", str(args.stall_factor * visibility),
        ]  # fmt: skip
        if scenario.delete_after_journal:
            command.append("--delete-after-journal")
        if scenario.sink == "sqs":
            command += ["--sink", "sqs", "--target-queue-url", str(target_url)]
        elif scenario.sink != "parquet":
            command += ["--sink", scenario.sink]
        if poison is not None:
            command += ["--poison-number", str(poison[0]), "--dead-letter-url", poison[1]]
        if scenario.sns:
            command += ["--message-format", "sns"]
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        # sitecustomize in INJECT installs the faults in every Python process of the query.
        env["PYTHONPATH"] = os.pathsep.join([str(INJECT), str(REPO), env.get("PYTHONPATH", "")])
        if faults is not None:
            # The run number keeps copies' marks of one application from waking another's tasks.
            env[ENV] = replace(faults, run=run).to_env()
        if args.log_level:
            env["SPARK_SQS_CHAOS_LOG_LEVEL"] = args.log_level
        # Python workers of this run: the driver's own (local mode) or the cluster's.
        self.sessions = cluster.sessions if cluster is not None else set()
        self.ui_port = 0
        if cluster is not None:
            # The executors get what they need the way a real cluster's do: through the
            # application's configuration (spark.executorEnv.*), not the workers' environment.
            self.ui_port = free_port()
            conf = session_conf(cluster, work / "eventlog", env, sys.executable, self.ui_port)
            command += ["--master", cluster.master_url, "--spark-conf", json.dumps(conf)]
            env["SPARK_LOCAL_IP"] = "127.0.0.1"
        with open(self.log, "wb") as log:
            # Its own session, so that the whole tree (driver, JVM, Python workers) dies at once,
            # as it does when a driver node is lost. A SIGTERM when the harness dies makes the
            # child kill that tree itself (child.py).
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                preexec_fn=functools.partial(die_with_parent, signal.SIGTERM),
            )  # fmt: skip
        self.sessions = self.sessions | {self.process.pid}

    @property
    def started(self) -> bool:
        return (self.control / "started").exists()

    def up(self) -> bool:
        """Started, or already gone."""
        return self.started or self.exited()

    def exited(self) -> bool:
        return self.process.poll() is not None

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(60)

    def kill_a_worker(self, rng: random.Random) -> bool:
        """SIGKILL one Python worker that Spark's daemon forked for a task: the task fails and
        Spark retries it. Linux only (reads /proc)."""
        table = _processes()
        workers = []
        for pid, (parent, session, command) in table.items():
            if session not in self.sessions or b"pyspark.worker" not in command:
                continue
            # Forked by the daemon (same command line as its parent), not the daemon itself.
            if table.get(parent, (0, 0, b""))[2] == command:
                workers.append(pid)
        if not workers:
            return False
        try:
            os.kill(rng.choice(sorted(workers)), signal.SIGKILL)
        except ProcessLookupError:
            return False
        return True

    def application(self) -> str | None:
        """This run's Spark application id (the driver's REST API), once it answers."""
        if self._application is None and self.ui_port:
            self._application = application_id(self.ui_port)
        return self._application

    def kill_an_executor(
        self, rng: random.Random, left: Callable[[], float], hold: Callable[[], None]
    ) -> bool:
        """SIGKILL one executor JVM of this run's application while it runs a task (the
        driver's REST API says which), waiting for one while ``left()`` (seconds until the
        query's own kill) is positive; ``hold()`` first waits while a slowed task waits for its
        copy. Returns whether it killed one. Linux only (reads /proc)."""
        while not self.exited():
            hold()
            running = busy_executors(self.ui_port)
            if running is not None and running[1]:
                table = _processes()
                busy = []
                for pid in executor_pids(table, self.sessions):
                    identity = executor_identity(table[pid].command)
                    if identity is not None and identity[0] == running[0]:
                        if identity[1] in running[1]:
                            busy.append(pid)
                if busy:
                    try:
                        os.kill(rng.choice(sorted(busy)), signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    return True
            if left() <= 0:
                break
            time.sleep(0.2)
        return False

    def stop(self, timeout: float) -> None:
        (self.control / "stop").write_text("")
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        else:
            # Python workers can outlive a clean exit by a moment; nothing may keep running.
            self.kill()

    def tail(self, chars: int = 2500) -> str:
        return self.log.read_text(errors="replace")[-chars:]


def _held(watch: SpeculationWatch | None, run: Child) -> bool:
    """Whether a kill of ``run`` must wait for a slowed task's copy (never off the cluster)."""
    return watch is not None and watch.held(run.number, run.application())


def visibility_of(scenario: Scenario, args: Any) -> int:
    """The query's visibilityTimeout: on the cluster, long enough that a receiver slowed after
    its first receive (at most ``--slow-after-max`` of it) stays within the receiver's budget."""
    return int(args.cluster_visibility if scenario.cluster else args.visibility)


def kill_window(scenario: Scenario, args: Any) -> tuple[float, float]:
    """Seconds after the query started in which its run is SIGKILLed: later on the cluster,
    whose first batch comes later (executors, their Python workers, the S3 journal)."""
    if scenario.cluster:
        return float(args.cluster_kill_window[0]), float(args.cluster_kill_window[1])
    return float(args.kill_min), float(args.kill_max)


_PUT_LOCK = threading.Lock()


def serialise_moto_s3_puts() -> None:
    """Make moto's conditional ``PutObject`` atomic, as S3's is. moto checks ``If-None-Match:
    *`` and then stores the object, unlocked: two attempts of one receiver that journal at the
    same instant (speculation, a lost executor's zombie task) could both succeed there, where S3
    answers one of them 412. Runs in the harness, which hosts the moto server."""
    from moto.s3.responses import S3Response

    if getattr(S3Response.put_object, "chaos_serialised", False):
        return
    original = S3Response.put_object

    def put_object(self: Any) -> Any:
        with _PUT_LOCK:
            return original(self)

    put_object.chaos_serialised = True  # type: ignore[attr-defined]
    S3Response.put_object = put_object  # type: ignore[method-assign]


# -- memory over a long run ---------------------------------------------------------------------

# What a run's processes are, by their command line (the executors' Python workers are forked
# by Spark's daemon and keep its command line; the daemon itself is their parent).
RSS_ROLES = ("source_runner", "worker_max", "workers_total", "driver_python", "jvm")


def _rss(pid: int) -> int:
    """Resident bytes of ``pid`` (/proc/<pid>/statm), 0 if it is gone."""
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def rss_by_role(table: dict[int, tuple[int, int, bytes]], session: int) -> dict[str, int]:
    """The RSS of each kind of process of the query whose session is ``session`` (the child's
    pid): the driver's streaming-source process, the largest executor Python worker and the
    workers' sum, the driver's Python and the JVM."""
    out = dict.fromkeys(RSS_ROLES, 0)
    for pid, (parent, sid, command) in table.items():
        if sid != session:
            continue
        if b"python_streaming_source_runner" in command:
            role = "source_runner"
        elif b"pyspark.daemon" in command or b"pyspark.worker" in command:
            if table.get(parent, (0, 0, b""))[2] != command:
                continue  # the daemon: what it forks are the workers
            rss = _rss(pid)
            out["worker_max"] = max(out["worker_max"], rss)
            out["workers_total"] += rss
            continue
        elif pid == session:
            role = "driver_python"
        elif b"java" in command.split(b"\0", 1)[0]:
            role = "jvm"
        else:
            continue
        out[role] = max(out[role], _rss(pid))
    return out


class RssSampler(threading.Thread):
    """The RSS of a run's processes every ``interval`` seconds, from /proc (Linux)."""

    def __init__(self, session: int, interval: float = 2.0) -> None:
        super().__init__(name="chaos-rss", daemon=True)
        self._session = session
        self._interval = interval
        self._halt = threading.Event()
        self.samples: list[tuple[float, dict[str, int]]] = []

    def run(self) -> None:
        started = time.monotonic()
        while not self._halt.wait(self._interval):
            sample = rss_by_role(_processes(), self._session)
            if any(sample.values()):
                self.samples.append((time.monotonic() - started, sample))

    def stop(self) -> None:
        self._halt.set()
        self.join(30)


def flatness(values: list[int], warm_up: float = 0.25, tolerance: float = 0.1) -> dict[str, Any]:
    """Whether ``values`` (RSS samples in time order) stay flat after warm-up: the first
    ``warm_up`` share of them is left out, the rest is cut in thirds, and the median of the
    last third must be within ``tolerance`` (and 16 MiB) of the median of the first."""
    after = [v for v in values[int(len(values) * warm_up) :] if v]
    third = len(after) // 3
    if third < 2:
        return {"samples": len(after), "flat": None}
    first = statistics.median(after[:third])
    last = statistics.median(after[-third:])
    return {
        "samples": len(after),
        "first_third_median": int(first),
        "last_third_median": int(last),
        "peak": max(after),
        "growth": round(last / first, 3) if first else None,
        "flat": last <= first * (1 + tolerance) + (16 << 20),
    }


def queue_depth(sqs: Any, queue_url: str) -> int:
    """Visible plus in-flight messages (of every queue of a comma-separated list)."""
    return sum(sum(queue_counts(sqs, url)) for url in queue_url.split(","))


def run_scenario(scenario: Scenario, endpoint: str, root: Path, args: Any) -> Outcome:
    import boto3

    work = root / scenario.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    outcome = Outcome(scenario.name)
    started = time.monotonic()
    rng = random.Random(f"{args.seed}-{scenario.name}")
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=endpoint)
    name = f"chaos-{scenario.name}-{os.getpid()}-{int(time.time())}"
    attributes = {"FifoQueue": "true"} if scenario.fifo else {}
    queue_url = ",".join(
        sqs.create_queue(
            QueueName=f"{name}{'-q' + str(i) if i else ''}" + (".fifo" if scenario.fifo else ""),
            Attributes=attributes,
        )["QueueUrl"]
        for i in range(scenario.queues)
    )
    target_url = None
    if scenario.sink == "sqs":
        # No content-based deduplication: only the sink's own ids may make SQS drop a copy.
        target_url = sqs.create_queue(
            QueueName=f"{name}-target.fifo", Attributes={"FifoQueue": "true"}
        )["QueueUrl"]
    outcome.journal = scenario.journal
    outcome.sink = scenario.sink
    outcome.poison = scenario.poison
    outcome.cluster = scenario.cluster
    poison: tuple[int, str] | None = None
    if scenario.poison:
        dlq = sqs.create_queue(
            QueueName=f"{name}-dlq" + (".fifo" if scenario.fifo else ""), Attributes=attributes
        )["QueueUrl"]
        poison = (rng.randrange(max(1, args.messages // 2)), dlq)
    journal = str(work / "journal")
    if scenario.journal == "s3":
        s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=endpoint)
        try:
            s3.create_bucket(Bucket=JOURNAL_BUCKET)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        # The source's own syntax for an S3-compatible endpoint (stores.py S3Store).
        host = endpoint.split("://", 1)[1]
        journal = f"s3://{JOURNAL_BUCKET}/{name}/journal?endpoint_override={host}&scheme=http"
    faults = None
    slow_share = args.slow_share if scenario.cluster else 0.0
    slow_log = str(work / "slow.log")
    if args.fault_rate > 0 or (args.s3_fault_rate or 0) > 0 or slow_share > 0:
        faults = FaultConfig(
            rate=args.fault_rate, log=str(work / "faults.log"), seed=args.seed,
            kinds=tuple(args.fault_kinds), operations=tuple(args.fault_operations),
            s3_rate=args.s3_fault_rate, slow_share=slow_share,
            slow_partitions=min(args.cluster_receivers),
            slow_seconds=tuple(args.slow_seconds), slow_points=tuple(args.slow_points),
            slow_after_max=args.slow_after_max * visibility_of(scenario, args), slow_log=slow_log,
            slow_marks=str(work / "slow-marks"),
        )  # fmt: skip
    soak_until = started + args.soak if args.soak else None
    # A soak's steady run: the producer goes on this long after the kills, into the last run.
    steady = args.steady if args.soak else 0.0
    sns = None
    if scenario.sns:
        sns_client = boto3.client("sns", region_name="us-east-1", endpoint_url=endpoint)
        topic = sns_client.create_topic(Name=name)["TopicArn"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        sns_client.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
        sns = (sns_client, topic)
    producer = Producer(
        sqs, queue_url, fifo=scenario.fifo, rate=args.rate,
        total=None if args.soak else args.messages,
        until=None if soak_until is None else soak_until + steady, sns=sns,
    )  # fmt: skip
    producer.start()
    say(
        f"[{scenario.name}] queue {queue_url}, journal {journal}, work dir {work}"
        + (f", target queue {target_url}" if target_url else "")
    )
    first_start: list[float] = []

    def delivered() -> int:
        """Rows the sink holds so far (the target queue: every message, nothing deleted)."""
        if target_url is not None:
            return queue_depth(sqs, target_url)
        return len(_rows(work, scenario.sink))

    def child() -> Child:
        # Each run may come with other options: a replayed batch must still run the plan that
        # its first attempt persisted, and the new options apply from the next new batch.
        receivers = rng.choice(args.cluster_receivers if scenario.cluster else args.receivers)
        max_per_trigger = rng.choice(args.max_per_trigger)
        outcome.run_options.append((receivers, max_per_trigger))
        run = Child(
            work, outcome.runs, endpoint, queue_url, args, scenario, faults, journal,
            receivers, max_per_trigger, target_url, poison, cluster,
        )  # fmt: skip
        running.append(run)
        return run

    # A poison message fails one run per narrowing step (docs/operations.md): maxBatchAttempts
    # (3), then two per halving of the largest batch.
    poison_failures = (
        3 + 2 * math.ceil(math.log2(max(2, *args.max_per_trigger))) if poison is not None else 0
    )

    def more_kills() -> bool:
        if outcome.query_failures > max(3, args.kills) + poison_failures:
            return False  # something is broken: stop killing, report
        if soak_until is not None:
            return time.monotonic() < soak_until
        return outcome.kills < args.kills

    cluster = None
    watch = None
    running: list[Child] = []
    try:
        if scenario.cluster:
            (work / "eventlog").mkdir()
            watch = SpeculationWatch(work / "eventlog", slow_log, work / "slow-marks")
            watch.start()
            cluster = StandaloneCluster(work / "cluster", workers=args.workers)
            began = time.monotonic()
            cluster.start()
            say(
                f"[{scenario.name}] standalone cluster {cluster.master_url}: {args.workers} "
                f"workers of 1 core, started in {time.monotonic() - began:.0f} s"
            )
        while more_kills():
            outcome.runs += 1
            run = child()
            if not wait_for(run.up, args.start_timeout):
                run.kill()
                raise RuntimeError(f"the query did not start:\n{run.tail()}")
            if not first_start:
                first_start.append(time.monotonic())
            if run.exited():
                outcome.query_failures += 1
                say(f"[{scenario.name}] run {outcome.runs} failed to start:\n{run.tail()}")
                continue
            delay = rng.uniform(*kill_window(scenario, args))
            # Single Python workers, and on a cluster executor JVMs, die at random moments
            # before the whole tree does.
            kills = draw_kills(
                rng, delay, args.worker_kills, args.executor_kills if cluster is not None else 0
            )
            # On a cluster, no kill while a slowed task waits for its copy, until the first
            # speculative attempt is on record (chaos/kills.py).
            schedule = Schedule(functools.partial(_held, watch, run), cap=args.speculation_hold)

            def act(
                what: str, run: Child = run, schedule: Schedule = schedule, delay: float = delay
            ) -> None:
                if what == "worker" and run.kill_a_worker(rng):
                    outcome.worker_kills += 1
                elif what == "executor":
                    # Mid-batch: it waits for an executor that runs a task, until the query's
                    # own kill is due.
                    outcome.executor_kills += run.kill_an_executor(
                        rng,
                        left=lambda: schedule.left(delay),
                        hold=lambda: schedule.hold(stop=run.exited),
                    )
                elif what == "query":
                    run.kill()

            failed = not carry_out(kills, schedule, act, run.exited)
            outcome.kills_held += schedule.holds
            outcome.held_seconds += schedule.held_seconds
            if schedule.holds:
                say(
                    f"[{scenario.name}] run {outcome.runs}: kills held {schedule.held_seconds:.0f}"
                    " s while a slowed task waited for its speculative copy"
                )
            if failed:
                outcome.query_failures += 1
                say(f"[{scenario.name}] run {outcome.runs}: the query failed:\n{run.tail()}")
                continue
            outcome.kills += 1
            receivers, max_per_trigger = outcome.run_options[-1]
            say(
                f"[{scenario.name}] run {outcome.runs} (numPartitions {receivers}, "
                f"maxMessagesPerTrigger {max_per_trigger}): SIGKILL after "
                f"{delay + schedule.held_seconds:.1f} s "
                f"(sent {len(producer.sent)}, committed rows {delivered()})"
            )
        # The last run: no kill; it must take everything that is left (in a soak with
        # --steady, first the producer's steady traffic, its processes' RSS sampled).
        expected: set[int] = set()

        def done() -> bool:
            if final.exited():
                return True
            if target_url is not None:
                # The source deletes a batch's messages only once the batch (its sends
                # included) is committed: an empty source queue means every send is done.
                return queue_depth(sqs, queue_url) == 0 and delivered() >= len(expected)
            numbers = {n for n, _ in _numbers(_rows(work, scenario.sink))}
            return expected <= numbers and queue_depth(sqs, queue_url) == 0

        # With a poison message the last runs fail until its batch is narrowed down to it.
        for _ in range(1 + poison_failures):
            outcome.runs += 1
            final = child()
            if steady and not outcome.rss:
                sampler = RssSampler(final.process.pid)
                sampler.start()
                steady_from = time.monotonic()
                producer.join()
                outcome.steady_seconds = time.monotonic() - steady_from
                sampler.stop()
                for role in RSS_ROLES:
                    outcome.rss[role] = flatness([s[role] for _, s in sampler.samples])
            producer.join()
            expected = set(producer.sent) - ({poison[0]} if poison is not None else set())
            outcome.drained = (
                wait_for(done, args.drain_timeout, interval=1.0) and not final.exited()
            )
            if final.exited():
                outcome.query_failures += 1
                say(f"[{scenario.name}] the last run failed:\n{final.tail()}")
            final.stop(120)
            if outcome.drained:
                break
        if first_start:
            outcome.sink_span = time.monotonic() - first_start[0]
    finally:
        producer.stop()
        # Also when the harness fails or is stopped: no query or cluster process outlives it.
        for run in running:
            run.kill()
        if cluster is not None:
            cluster.stop()
        if watch is not None:
            watch.stop()

    if target_url is not None:
        # Only now: moto forgets a deduplication id once its message is deleted (AWS keeps it
        # for 5 minutes), so reading the target while the query runs would let copies in.
        _count_arrivals(outcome, drain_target(sqs, target_url), producer.sent)
        outcome.sink_counters = sink_counters(work / "sink-metrics")
    elif poison is not None:
        sent = {n: i for n, i in producer.sent.items() if n != poison[0]}
        _count(outcome, work, sent, scenario.fifo)
        poison_rows = [n for n, _ in _numbers(_rows(work, scenario.sink)) if n == poison[0]]
        outcome.poison_in_sink = len(poison_rows)
        # The poison row is "unexpected" against the rest (by number and by id); counted on its
        # own instead.
        outcome.unexpected -= 2 * min(1, len(poison_rows))
        dead = drain_target(sqs, poison[1])
        numbers = [json.loads(a["body"]).get("n") for a in dead]
        outcome.quarantined = numbers.count(poison[0])
        outcome.unexpected += len(numbers) - outcome.quarantined
        say(
            f"[{scenario.name}] poison message {poison[0]}: {outcome.quarantined} in the "
            f"dead-letter queue, {outcome.poison_in_sink} in the sink, "
            f"{outcome.query_failures} failed runs"
        )
    else:
        _count(outcome, work, producer.sent, scenario.fifo)
    outcome.left_in_queue = queue_depth(sqs, queue_url)
    stalled = work / "stalled"
    outcome.stalls = len(list(stalled.iterdir())) if stalled.is_dir() else 0
    if faults is not None:
        outcome.faults = count_faults(faults.log)
        outcome.fault_roles = faults_by_role_and_service(faults.log)
    if scenario.cluster:
        slowed = slow_tasks(slow_log)
        outcome.slowed = len(slowed)
        outcome.slowed_woken_by_copy = sum(1 for task in slowed if task.woken_by_copy)
        outcome.slowed_cut_short = sum(1 for task in slowed if not task.ended)
        outcome.events = count_event_log(event_logs(work / "eventlog"))
        outcome.skipped_batches = skipped_batches(work / "out")
    outcome.seconds = time.monotonic() - started
    return outcome


ROW_COLUMNS = ["messageId", "body", "messageGroupId"]


def _rows(work: Path, sink: str = "parquet") -> list[tuple[int, dict[str, Any]]]:
    if sink == "write-then-skip":
        batches = write_then_skip_batches(work / "out", ROW_COLUMNS)
    else:
        batches = committed_batches(work / "out", ROW_COLUMNS)
    return [(batch, row) for batch, rows in batches for row in rows]


def _numbers(rows: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, int]]:
    return [(json.loads(str(row["body"]))["n"], batch) for batch, row in rows]


def _count(outcome: Outcome, work: Path, sent: dict[int, str], fifo: bool) -> None:
    rows = _rows(work, outcome.sink)
    outcome.sent = len(sent)
    outcome.rows = len(rows)
    numbers = [n for n, _ in _numbers(rows)]
    ids = [str(row["messageId"]) for _, row in rows]
    seen = set(numbers)
    outcome.lost = len(set(sent) - seen)
    outcome.duplicated = max(len(numbers) - len(seen), len(ids) - len(set(ids)))
    # A row whose number or id the producer never got back would be a corrupted or foreign row.
    sent_ids = set(sent.values())
    outcome.unexpected = len(seen - set(sent)) + sum(1 for i in set(ids) if i not in sent_ids)
    if fifo:
        outcome.order_violations = _order_violations(rows)


def drain_target(sqs: Any, queue_url: str, timeout: float = 300.0) -> list[dict[str, Any]]:
    """Receive and delete everything in the sink's target queue, in the order SQS hands it out
    (per message group, the order it was accepted in). Runs after the query has stopped."""
    arrivals: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    empty = 0
    while time.monotonic() < deadline:
        messages = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=120,
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["MessageGroupId", "MessageDeduplicationId"],
        ).get("Messages", [])
        if not messages:
            # The group lock may hide visible messages for a moment; stop on an empty queue.
            empty += 1
            if empty >= 3 and queue_depth(sqs, queue_url) == 0:
                break
            time.sleep(0.2)
            continue
        empty = 0
        for message in messages:
            attributes = message.get("Attributes", {})
            arrivals.append(
                {
                    "body": message["Body"],
                    "group": attributes.get("MessageGroupId"),
                    "dedupe": attributes.get("MessageDeduplicationId"),
                }
            )
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ]
        response = sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        if response.get("Failed"):
            raise RuntimeError(f"draining the target queue: {response['Failed']}")
    return arrivals


def _count_arrivals(outcome: Outcome, arrivals: list[dict[str, Any]], sent: dict[int, str]) -> None:
    """What the sink round trip delivered, against what the producer sent: each number once,
    and each group's numbers in increasing order (the order SQS accepted them in)."""
    outcome.sent = len(sent)
    outcome.rows = len(arrivals)
    numbers: list[int | None] = []
    for arrival in arrivals:
        try:
            numbers.append(int(json.loads(arrival["body"])["n"]))
        except (ValueError, KeyError, TypeError):
            numbers.append(None)  # not a message the producer wrote
    valid = [n for n in numbers if n is not None]
    seen = set(valid)
    outcome.lost = len(set(sent) - seen)
    outcome.duplicated = len(valid) - len(seen)
    outcome.unexpected = numbers.count(None) + len(seen - set(sent))
    dedupe_ids = [a["dedupe"] for a in arrivals if a.get("dedupe")]
    outcome.same_dedupe_id = len(dedupe_ids) - len(set(dedupe_ids))
    highest: dict[str, int] = {}
    violations = 0
    for arrival, n in zip(arrivals, numbers, strict=True):
        if n is None:
            continue
        group = str(arrival.get("group"))
        if n < highest.get(group, -1):
            violations += 1
        highest[group] = max(highest.get(group, -1), n)
    outcome.order_violations = violations


def sink_counters(location: Path) -> dict[str, int]:
    """The sink's counters (docs/sink.md) summed over its per-batch metrics files."""
    totals: dict[str, int] = {}
    if not location.is_dir():
        return totals
    for path in sorted(location.glob("batch-*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for key in ("rows", "sent", "retried", "throttled", "failed", "calls"):
            totals[key] = totals.get(key, 0) + int(data.get(key, 0))
    return totals


def _order_violations(rows: list[tuple[int, dict[str, Any]]]) -> int:
    """Per message group, every micro-batch must hold later messages than the batches before it
    (rows of one group within one batch may come from several receivers)."""
    by_group: dict[str, dict[int, list[int]]] = {}
    for batch, row in rows:
        n = json.loads(str(row["body"]))["n"]
        by_group.setdefault(str(row["messageGroupId"]), {}).setdefault(batch, []).append(n)
    violations = 0
    for batches in by_group.values():
        highest = -1
        for batch in sorted(batches):
            numbers = batches[batch]
            if min(numbers) < highest:
                violations += 1
            highest = max(highest, max(numbers))
    return violations


def render(outcomes: list[Outcome], args: Any) -> str:
    lines = [
        "| scenario | journal | sent | kills | worker kills | runs | query failures "
        "| faults injected | batches stalled past the visibility timeout | lost | duplicated "
        "| left in queue | FIFO order violations | time | result |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.scenario} | {o.journal} | {o.sent} | {o.kills} | {o.worker_kills} | "
            f"{o.runs} | {o.query_failures} | "
            f"{sum(o.faults.values())} | {o.stalls} | {o.lost} | {o.duplicated} | "
            f"{o.left_in_queue} | "
            f"{o.order_violations if 'fifo' in o.scenario else '-'} | {o.seconds:.0f} s | "
            f"{'PASS' if o.passed else 'FAIL'} |"
        )
    clusters = [o for o in outcomes if o.cluster]
    if clusters:
        lines += [
            "",
            f"On the standalone cluster ({args.workers} workers of 1 core; speculative attempts, "
            "concurrent ones, kills by Spark and lost executors from Spark's event log):",
            "",
            "| scenario | executor kills mid-task | tasks slowed | of them woken by their copy "
            "| killed in their sleep | speculative attempts | started beside a running attempt "
            "| copies that finished first | attempts killed as another succeeded "
            "| executors lost | tasks lost with an executor | batches written then skipped "
            "| applications | kills held for a slowed task |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for o in clusters:
            e = o.events
            lines.append(
                f"| {o.scenario} | {o.executor_kills} | "
                f"{o.slowed} | {o.slowed_woken_by_copy} | {o.slowed_cut_short} | "
                f"{e.speculative} | {e.concurrent} | "
                f"{e.speculative_won} | {e.killed_by_other_attempt} | {e.executors_removed} | "
                f"{e.tasks_lost_with_executor} | {o.skipped_batches} | {e.applications} | "
                f"{o.kills_held} ({o.held_seconds:.0f} s) |"
            )
    sinks = [o for o in outcomes if o.sink == "sqs"]
    if sinks:
        lines += [
            "",
            "Sink round trip (the target queue, drained after the last run; sink counters "
            "summed over the metrics file of each committed batch):",
            "",
            "| scenario | target messages | same deduplication id | first start to all "
            "delivered | within SQS's 5-minute deduplication window | sink sent | retried "
            "| throttled | failed attempts | calls |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for o in sinks:
            c = o.sink_counters
            within = "yes" if o.sink_span <= DEDUPE_WINDOW_SECONDS else "**no**"
            lines.append(
                f"| {o.scenario} | {o.rows} | {o.same_dedupe_id} | {o.sink_span:.0f} s | "
                f"{within} | {c.get('sent', 0)} | {c.get('retried', 0)} | "
                f"{c.get('throttled', 0)} | {c.get('failed', 0)} | {c.get('calls', 0)} |"
            )
    lines += [
        "",
        "Options of each run (numPartitions/maxMessagesPerTrigger; the last run drains):",
        "",
        "| scenario | runs | restarts that changed numPartitions |",
        "|---|---|---|",
    ]
    for o in outcomes:
        runs = ", ".join(f"{r}/{m}" for r, m in o.run_options)
        pairs = zip(o.run_options, o.run_options[1:], strict=False)
        changed = sum(1 for a, b in pairs if a[0] != b[0])
        lines.append(f"| {o.scenario} | {runs} | {changed} |")
    lines += ["", "Faults injected, by operation and kind (all processes of the query):", ""]
    kinds = list(args.fault_kinds)
    lines.append("| scenario | operation | " + " | ".join(kinds) + " |")
    lines.append("|---|---|" + "---|" * len(kinds))
    for o in outcomes:
        for operation in args.fault_operations:
            if operation in S3_OPERATIONS and o.journal != "s3":
                continue  # a local journal makes no S3 calls
            if operation in SINK_OPERATIONS and o.sink != "sqs":
                continue  # only the SQS sink sends
            counts = [str(o.faults.get((operation, kind), 0)) for kind in kinds]
            lines.append(f"| {o.scenario} | {operation} | " + " | ".join(counts) + " |")
    lines += [
        "",
        "Where the faults landed:",
        "",
        "| scenario | role | service | faults | processes |",
        "|---|---|---|---|---|",
    ]
    for o in outcomes:
        for (role, service), (count, processes) in sorted(o.fault_roles.items()):
            lines.append(f"| {o.scenario} | {role} | {service} | {count} | {processes} |")
    steady = [o for o in outcomes if o.rss]
    if steady:
        lines += [
            "",
            "Memory of the last run, under steady traffic without kills (RSS from /proc every "
            "2 s; the first quarter is warm-up; medians of the first and last third of the "
            "rest, MiB; flat: the last within 10% and 16 MiB of the first):",
            "",
            "| scenario | steady run | process | samples | first third | last third | peak "
            "| growth | flat |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        mib = 1 << 20
        for o in steady:
            for role in RSS_ROLES:
                f = o.rss.get(role, {})
                if not f.get("samples") or f.get("flat") is None:
                    continue
                lines.append(
                    f"| {o.scenario} | {o.steady_seconds:.0f} s | {role} | {f['samples']} | "
                    f"{f['first_third_median'] / mib:.0f} | {f['last_third_median'] / mib:.0f} | "
                    f"{f['peak'] / mib:.0f} | {f['growth']} | {'yes' if f['flat'] else '**no**'} |"
                )
    s3_rate = args.fault_rate if args.s3_fault_rate is None else args.s3_fault_rate
    lines += [
        "",
        f"Parameters: messages {args.messages if not args.soak else 'unbounded'}, "
        f"rate {args.rate}/s, soak {args.soak or 0} s, kills {args.kills} (and "
        f"{args.worker_kills} worker kills per run), kill "
        f"{args.kill_min}-{args.kill_max} s after the query started, fault rate "
        f"{args.fault_rate} per SQS call and {s3_rate} per S3 call, "
        f"steady run {args.steady if args.soak else 0} s, visibilityTimeout "
        f"{args.visibility} s, numPartitions drawn from {args.receivers} and "
        f"maxMessagesPerTrigger from {args.max_per_trigger} for each run, one message in "
        f"{args.stall_every} stalls its batch for {args.stall_factor * args.visibility:.0f} s, "
        f"seed {args.seed}.",
    ]
    if clusters:
        cluster_visibility = args.cluster_visibility
        lines[-1] += (
            f" Cluster: {args.workers} workers of 1 core, numPartitions drawn from "
            f"{args.cluster_receivers}, visibilityTimeout {cluster_visibility} s, kill "
            f"{args.cluster_kill_window[0]:.0f}-{args.cluster_kill_window[1]:.0f} s after the "
            f"query started, {args.executor_kills} executor kills per run, "
            f"one receiver task slowed in {args.slow_share:.0%} of batches for up to "
            f"{args.slow_seconds[0]:.0f}-{args.slow_seconds[1]:.0f} s "
            f"({' or '.join(args.slow_points)} the first ReceiveMessage; after it at most "
            f"{args.slow_after_max * cluster_visibility:.0f} s; a copy wakes it; receiver 0 of "
            "every batch until the first speculative attempt is on record, and no kill while "
            f"such a task waits for its copy, at most {args.speculation_hold:.0f} s a run)."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument(
        "--scenarios",
        nargs="+",
        choices=sorted(SCENARIOS),
        default=[
            "standard",
            "fifo",
            "fifo-journal-delete",
            "standard-s3",
            "fifo-s3",
            "standard-cluster",
            "fifo-cluster",
        ],  # fmt: skip
    )
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=15.0, help="messages sent per second")
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument(
        "--worker-kills",
        type=int,
        default=1,
        help="SIGKILLs of single executor Python workers per run, before the run is killed",
    )
    parser.add_argument(
        "--kill-min", type=float, default=3.0, help="earliest kill, seconds after the query started"
    )
    # A cold query start takes 15-30 s here, so kills land both in start-up and in processing.
    parser.add_argument("--kill-max", type=float, default=40.0)
    parser.add_argument(
        "--fault-rate",
        type=float,
        default=0.2,
        help="share of SQS calls that fail (0 disables injection)",
    )
    parser.add_argument(
        "--s3-fault-rate",
        type=float,
        default=None,
        help="share of the s3:// journal's S3 calls that fail (default: --fault-rate)",
    )
    parser.add_argument("--fault-kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument(
        "--fault-operations", nargs="+", choices=OPERATIONS, default=list(OPERATIONS)
    )
    parser.add_argument("--visibility", type=int, default=10, help="visibilityTimeout")
    parser.add_argument(
        "--receivers",
        type=int,
        nargs="+",
        default=[1, 2, 3, 4],
        help="numPartitions: each run (restart) draws one of these",
    )
    parser.add_argument(
        "--stall-every",
        type=int,
        default=500,
        help="about one message in this many stalls its micro-batch (0: never)",
    )
    parser.add_argument(
        "--stall-factor",
        type=float,
        default=1.5,
        help="a stall lasts this many visibility timeouts",
    )
    parser.add_argument(
        "--max-per-trigger",
        type=int,
        nargs="+",
        default=[50, 100, 200],
        help="maxMessagesPerTrigger: each run (restart) draws one of these",
    )
    parser.add_argument(
        "--soak",
        type=float,
        default=0.0,
        help="run for this many seconds at --rate, killing until the end",
    )
    parser.add_argument(
        "--steady",
        type=float,
        default=0.0,
        help="with --soak: the producer goes on this many seconds after the kills, into the "
        "last run, whose processes' RSS is sampled and reported (flat after warm-up?)",
    )
    cluster = parser.add_argument_group("cluster scenarios (-cluster)")
    cluster.add_argument(
        "--workers", type=int, default=2, help="standalone workers of 1 core each (task slots)"
    )
    cluster.add_argument(
        "--cluster-receivers",
        type=int,
        nargs="+",
        default=[3, 4],
        help="numPartitions on the cluster, drawn for each run: more receivers than task slots",
    )
    cluster.add_argument(
        "--cluster-visibility", type=int, default=30, help="visibilityTimeout on the cluster"
    )
    cluster.add_argument(
        "--cluster-kill-window",
        type=float,
        nargs=2,
        default=[15.0, 75.0],
        metavar=("MIN", "MAX"),
        help="the query is SIGKILLed this many seconds after it started (its first batch on the "
        "cluster comes 20-45 s after the start on this machine)",
    )
    cluster.add_argument(
        "--executor-kills",
        type=int,
        default=1,
        help="SIGKILLs of executor JVMs per run, before the run is killed",
    )
    cluster.add_argument(
        "--slow-share",
        type=float,
        default=0.5,
        help="share of stages (micro-batches) in which the first attempt of one receiver task "
        "sleeps once (speculation copies it)",
    )
    cluster.add_argument(
        "--slow-seconds",
        type=float,
        nargs=2,
        default=[10.0, 30.0],
        metavar=("MIN", "MAX"),
        help="how long a slowed task sleeps at most (a copy that starts receiving wakes it)",
    )
    cluster.add_argument(
        "--slow-points",
        nargs="+",
        choices=SLOW_POINTS,
        default=list(SLOW_POINTS),
        help="where a slowed task sleeps: before its first ReceiveMessage, or after its answer "
        "(holding messages it has not journaled)",
    )
    cluster.add_argument(
        "--slow-after-max",
        type=float,
        default=0.4,
        help="a sleep after a ReceiveMessage answer lasts at most this many visibility timeouts "
        "(the receiver must journal within the visibility timeout)",
    )
    cluster.add_argument(
        "--speculation-hold",
        type=float,
        default=300.0,
        help="until the first speculative attempt is on record, kills wait while a slowed task "
        "waits for its copy, at most this many seconds a run (chaos/kills.py)",
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--start-timeout", type=float, default=240.0)
    parser.add_argument("--drain-timeout", type=float, default=600.0)
    parser.add_argument("--workdir", default=None)
    parser.add_argument(
        "--log-level",
        default=None,
        help="the source's log level in every process of the query (e.g. INFO), into the "
        "run logs; by default its warnings only",
    )
    parser.add_argument("--report", default=None, help="also write the Markdown report here")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the short CI run: a standard queue with a local journal, a FIFO queue with an "
        "s3:// journal and a standard queue on the cluster, 300 messages, 2 kills each (other "
        "options still apply)",
    )
    if parser.parse_known_args(argv)[0].quick:
        parser.set_defaults(
            scenarios=["standard", "fifo-s3", "standard-cluster"],
            messages=300,
            rate=10.0,
            kills=2,
            stall_every=150,
        )
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1_000_000)

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "chaos")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "chaos")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.pop(ENV, None)
    # A SIGTERM (a CI timeout, kill) unwinds like Ctrl-C: every finally stops what it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from devtools.local_sqs import MotoServer

    root = Path(args.workdir or tempfile.mkdtemp(prefix="spark-sqs-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    say(f"chaos: seed {args.seed}, scenarios {', '.join(args.scenarios)}, work dir {root}")
    serialise_moto_s3_puts()
    server = MotoServer()
    outcomes = []
    try:
        for name in args.scenarios:
            outcome = run_scenario(SCENARIOS[name], server.endpoint, root, args)
            outcomes.append(outcome)
            say(f"[{name}] {'PASS' if outcome.passed else 'FAIL'}")
    finally:
        server.stop()
    report = render(outcomes, args)
    say()
    say(report)
    if args.report:
        Path(args.report).write_text(report + "\n", encoding="utf-8")
    return 0 if outcomes and all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
