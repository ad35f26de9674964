"""``make bench`` / ``python -m bench``: the SQS source against a plain boto3 consumer.

Everything is measured in one run on this machine and written to ``bench/results/``
(``results.json``, ``README.md`` with the tables, PNG plots). See ``bench/results/README.md``
for what each section measures; ``--quick`` is a smoke test of the whole pipeline (a few
minutes, numbers not meaningful).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from bench import load, servers

logger = logging.getLogger("bench")
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="smoke test: tiny counts, short windows")
    p.add_argument("--out", default=str(RESULTS), help="results directory")
    p.add_argument("--receivers", default="1,2,4,8", help="concurrency levels")
    p.add_argument("--delay-ms", type=float, default=20.0, help="delay proxy: ms per request")
    p.add_argument("--window", type=float, default=30.0, help="steady state: seconds measured")
    p.add_argument("--warmup", type=float, default=5.0, help="steady state: seconds not measured")
    p.add_argument("--depth", type=int, default=200, help="moto steady state: visible messages")
    p.add_argument("--moto-batch", type=int, default=250, help="moto: messages/receiver/batch")
    p.add_argument(
        "--drain-per-receiver", type=int, default=2500, help="LocalStack: backlog per receiver"
    )
    p.add_argument("--drain-batch", type=int, default=500, help="LocalStack: msgs/receiver/batch")
    p.add_argument("--body-bytes", type=int, default=200, help="message body size")
    p.add_argument(
        "--sink-messages",
        type=int,
        default=20000,
        help="sink: messages per run (at most 4000 when it falls back to moto)",
    )
    p.add_argument("--sink-repeats", type=int, default=3, help="sink: runs of each kind")
    p.add_argument(
        "--sink-partitions", type=int, default=2, help="sink: tasks (x 4 calls in flight)"
    )
    p.add_argument("--cores", type=int, default=8, help="Spark master local[N]")
    p.add_argument(
        "--base-ref",
        default=None,
        help="git ref for 'before' (default: the merge base with main, if HEAD is not on it)",
    )
    p.add_argument("--skip", default="", help="comma list of sections to skip")
    p.add_argument(
        "--only", default="", help="comma list of section name prefixes to run (default: all)"
    )
    p.add_argument("--latency-seconds", type=float, default=60.0, help="latency: seconds sent")
    p.add_argument(
        "--latency-servers", default="moto,localstack", help="latency: comma list of servers"
    )
    p.add_argument("--cost-window", type=float, default=60.0, help="cost: seconds counted")
    p.add_argument("--cost-warmup", type=float, default=5.0, help="cost: seconds not counted")
    p.add_argument(
        "--cost-drain-batch",
        type=int,
        default=10000,
        help="cost drain: maxMessagesPerTrigger (10000 is the default option)",
    )
    p.add_argument("--cost-drain-batches", type=int, default=3, help="cost drain: batches counted")
    p.add_argument("--cpu-receivers", default="4,16", help="CPU per message: receivers")
    p.add_argument("--cpu-batch", type=int, default=500, help="CPU: messages/receiver/batch")
    p.add_argument("--cpu-batches", type=int, default=4, help="CPU: batches measured")
    p.add_argument(
        "--cpu-warmup-batches",
        type=int,
        default=2,
        help="CPU: the source's batches before the window (the second is the first that deletes)",
    )
    p.add_argument(
        "--cpu-plain-processes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CPU: each pair also runs the plain consumer's loop in processes, one a receiver "
        "(the 16-receiver workers' target is checked against it)",
    )
    p.add_argument(
        "--cpu-repeats",
        type=int,
        default=3,
        help="CPU: pairs of plain consumer and source, interleaved; targets on the median",
    )
    p.add_argument(
        "--cpu-jit-max-batches",
        type=int,
        default=30,
        help="CPU: at most this many small source batches before the pairs, until the JVM's "
        "JIT compilers settle (0: none)",
    )
    p.add_argument(
        "--cpu-jit-batch", type=int, default=50, help="CPU: JIT warm-up messages/receiver/batch"
    )
    p.add_argument(
        "--cpu-jit-settled",
        type=float,
        default=0.2,
        help="CPU: the JIT has settled once its compilers spend at most this share of the "
        "JVM's CPU in each of two batches in a row",
    )
    p.add_argument("--report-only", action="store_true", help="rewrite README from results.json")
    args = p.parse_args(argv)
    if args.quick:
        args.receivers = "1,2"
        args.window, args.warmup = 6.0, 2.0
        args.drain_per_receiver = 300
        args.drain_batch = 150
        args.moto_batch = 100
        args.sink_messages, args.sink_repeats = 2000, 1
        args.latency_seconds = 10.0
        args.cost_window, args.cost_warmup = 10.0, 2.0
        args.cost_drain_batch, args.cost_drain_batches = 500, 2
        args.cpu_receivers, args.cpu_batch, args.cpu_batches = "2", 100, 2
        args.cpu_repeats, args.cpu_jit_max_batches = 2, 4
    return args


# -- machine and versions -------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = 0
    try:
        import psutil

        memory = psutil.virtual_memory().total
    except ImportError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory / 2**30, 1),
        "os": platform.platform(),
        "load_average_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def versions() -> dict[str, str]:
    import boto3
    import botocore
    import pyarrow
    import pyspark

    out = {
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "boto3": boto3.__version__,
        "botocore": botocore.__version__,
        "pyarrow": pyarrow.__version__,
    }
    try:
        import moto

        out["moto"] = moto.__version__
    except ImportError:
        out["moto"] = "missing"
    java = shutil.which("java")
    if os.environ.get("JAVA_HOME"):
        java = str(Path(os.environ["JAVA_HOME"], "bin", "java"))
    if java:
        text = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
        out["java"] = text.splitlines()[0] if text else "unknown"
    try:
        out["spark_sqs_commit"] = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        pass
    return out


# -- CPU by process role ------------------------------------------------------------------------

# Which process does what, for CPU accounting: this process runs the baseline's threads and
# PySpark's driver; the JVM's Python children are the driver's source runner (planning,
# acknowledgement bookkeeping, heartbeat) and the executors' Python workers (the receivers);
# with --cpu-plain-processes, the plain consumer's loop in processes of its own.
CPU_ROLES = (
    "sqs server",
    "delay proxy",
    "bench process",
    "JVM",
    "source runner",
    "Python workers",
    "plain consumer's processes",
)


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def cpu_snapshot(server_pid: int, proxy_pid: int) -> dict[str, dict[int, float]]:
    """CPU seconds by role and process id (see ``CPU_ROLES``); empty where there is no /proc."""
    from bench.sink import tree_cpu_seconds

    server = tree_cpu_seconds(server_pid)
    proxy = tree_cpu_seconds(proxy_pid)
    out: dict[str, dict[int, float]] = {role: {} for role in CPU_ROLES}
    out["sqs server"], out["delay proxy"] = server, proxy
    for pid, seconds in tree_cpu_seconds(os.getpid()).items():
        if pid in server or pid in proxy:
            continue
        cmd = _cmdline(pid)
        if not cmd and pid != os.getpid():
            # Exiting (a zombie has no command line): its role is unknown now, and the
            # sampler keeps its last sample.
            continue
        if pid == os.getpid():
            role = "bench process"
        elif "python_streaming_source_runner" in cmd:
            role = "source runner"
        elif "java" in cmd.split(" ", 1)[0]:
            role = "JVM"
        elif "multiprocessing" in cmd:
            role = "plain consumer's processes"  # bench.load.ProcessConsumer and its tracker
        else:
            role = "Python workers"
        out[role][pid] = seconds
    return out


class CpuSampler:
    """CPU seconds by role over a run (``cpu_snapshot`` at start, every ``interval`` s and at
    stop): a process that exits before the end (Spark's source runner stops with its query)
    still counts, up to its last sample."""

    def __init__(self, server_pid: int, proxy_pid: int, interval: float = 0.5) -> None:
        self._pids = (server_pid, proxy_pid)
        self._interval = interval
        self._before = cpu_snapshot(*self._pids)
        self._latest: dict[str, dict[int, float]] = {role: {} for role in CPU_ROLES}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for role, seconds in cpu_snapshot(*self._pids).items():
            latest = self._latest[role]
            for pid, value in seconds.items():
                latest[pid] = max(latest.get(pid, 0.0), value)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def stop(self, messages: int) -> dict[str, float]:
        """Milliseconds of CPU per message, by role."""
        self._stop.set()
        self._thread.join()
        self._sample()
        if not messages:
            return {}
        from bench.sink import cpu_spent

        return {
            role: round(
                1000 * cpu_spent(self._before.get(role, {}), self._latest[role]) / messages, 3
            )
            for role in CPU_ROLES
        }


# -- the endpoints ------------------------------------------------------------------------------


class Endpoints:
    """moto and (if it can be installed and started) LocalStack, each direct and via the delay
    proxy."""

    def __init__(self, delay: float, workdir: Path) -> None:
        self._children: list[Any] = []
        self.moto = servers.start_moto()
        self._children.append(self.moto)
        self.moto_proxy = servers.start_proxy(self.moto.value, delay)
        self._children.append(self.moto_proxy)
        self.localstack: servers.LocalStack | None = None
        self.localstack_proxy: servers.Child | None = None
        self.localstack_error = ""
        self.localstack_version = ""
        try:
            python = servers.ensure_localstack_venv(workdir / "localstack-install.log")
            self.localstack = servers.LocalStack(python, workdir / "localstack.log")
            self._children.append(self.localstack)
            self.localstack_version = self.localstack.version
            self.localstack_proxy = servers.start_proxy(self.localstack.endpoint, delay)
            self._children.append(self.localstack_proxy)
        except Exception as exc:  # noqa: BLE001 - reported, and the moto results still count
            self.localstack_error = str(exc)
            logger.error("LocalStack unavailable, its sections are skipped: %s", exc)

    def get(self, server: str, proxied: bool) -> tuple[str, str]:
        """(endpoint the consumer uses, endpoint for setup and the producer)."""
        if server == "moto":
            direct = self.moto.value
            via = f"http://127.0.0.1:{self.moto_proxy.value}"
        else:
            assert self.localstack is not None and self.localstack_proxy is not None
            direct = self.localstack.endpoint
            via = f"http://127.0.0.1:{self.localstack_proxy.value}"
        return (via if proxied else direct), direct

    def pids(self, server: str) -> tuple[int, ...]:
        """The server's and its delay proxy's process ids (for CPU accounting)."""
        if server == "moto":
            return (self.moto.pid, self.moto_proxy.pid)
        assert self.localstack is not None and self.localstack_proxy is not None
        return (self.localstack.pid, self.localstack_proxy.pid)

    def stop(self) -> None:
        for child in reversed(self._children):
            try:
                child.stop()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass


def new_queue(endpoint: str, prefix: str) -> str:
    sqs = load.client(endpoint)
    return sqs.create_queue(
        QueueName=f"{prefix}-{uuid.uuid4().hex[:10]}",
        Attributes={"VisibilityTimeout": "120"},
    )["QueueUrl"]


def delete_queue(endpoint: str, url: str) -> None:
    try:
        load.client(endpoint).delete_queue(QueueUrl=url)
    except Exception:  # noqa: BLE001 - cleanup only
        pass


class Producer:
    """``bench.load produce`` in its own process (a DepthKeeper), for moto steady state."""

    def __init__(self, endpoint: str, queue_url: str, depth: int, body_bytes: int) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.load",
                "produce",
                "--endpoint",
                endpoint,
                "--queue-url",
                queue_url,
                "--depth",
                str(depth),
                "--body-bytes",
                str(body_bytes),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.proc.stdout.readline()

    def stop(self) -> dict[str, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        out = self.proc.stdout.read().split()
        self.proc.wait(60)
        if len(out) >= 3 and out[0] == "SENT":
            return {"sent": int(out[1]), "median_depth": int(out[2])}
        return {}


# -- sections -----------------------------------------------------------------------------------


def steady_point(
    spark: Any, wd: Any, eps: Endpoints, proxied: bool, receivers: int, args: argparse.Namespace
) -> dict[str, Any]:
    from bench import spark_runs

    consumer_ep, setup_ep = eps.get("moto", proxied)
    row: dict[str, Any] = {"server": "moto", "proxied": proxied, "receivers": receivers}
    # Baseline.
    url = new_queue(setup_ep, "steady-base")
    producer = Producer(setup_ep, url, args.depth, args.body_bytes)
    time.sleep(1.0)
    consumer = load.BaselineConsumer(consumer_ep, url, receivers)
    consumer.start()
    time.sleep(args.warmup)
    d0, t0 = consumer.deleted(), time.monotonic()
    time.sleep(args.window)
    d1, t1 = consumer.deleted(), time.monotonic()
    result = consumer.stop()
    row["baseline"] = {"rate": (d1 - d0) / (t1 - t0), "errors": result.errors, **producer.stop()}
    delete_queue(setup_ep, url)
    # Source.
    url = new_queue(setup_ep, "steady-src")
    producer = Producer(setup_ep, url, args.depth, args.body_bytes)
    time.sleep(1.0)
    run = spark_runs.source_steady(
        spark, wd, consumer_ep, url, receivers, args.moto_batch, args.warmup, args.window
    )
    row["source"] = {**spark_runs.run_dict(run), **producer.stop()}
    delete_queue(setup_ep, url)
    row["ratio"] = row["source"]["rate"] / row["baseline"]["rate"] if row["baseline"]["rate"] else 0
    return row


def drain_point(
    spark: Any, wd: Any, eps: Endpoints, proxied: bool, receivers: int, args: argparse.Namespace
) -> dict[str, Any]:
    from bench import spark_runs

    consumer_ep, setup_ep = eps.get("localstack", proxied)
    n = args.drain_per_receiver * receivers
    row: dict[str, Any] = {
        "server": "localstack",
        "proxied": proxied,
        "receivers": receivers,
        "messages": n,
    }
    url = new_queue(setup_ep, "drain-base")
    fill_s = load.fill(setup_ep, url, n, args.body_bytes)
    consumer = load.BaselineConsumer(consumer_ep, url, receivers)
    pids = eps.pids("localstack")
    sampler = CpuSampler(*pids)
    started = time.monotonic()
    consumer.start()
    deadline = started + max(120.0, n / 20)
    while consumer.deleted() < n and time.monotonic() < deadline:
        time.sleep(0.05)
    result = consumer.stop()
    cpu = sampler.stop(result.deleted)
    last = max((t for t, _ in result.events), default=started)
    row["baseline"] = {
        "rate": result.deleted / (last - started) if last > started else 0.0,
        "rows": result.deleted,
        "seconds": last - started,
        "fill_seconds": fill_s,
        "errors": result.errors,
        "cpu_ms_per_message": cpu,
    }
    delete_queue(setup_ep, url)
    url = new_queue(setup_ep, "drain-src")
    load.fill(setup_ep, url, n, args.body_bytes)
    sampler = CpuSampler(*pids)
    run = spark_runs.source_drain(
        spark, wd, consumer_ep, url, receivers, args.drain_batch, n, max(180.0, n / 20)
    )
    row["source"] = {**spark_runs.run_dict(run), "cpu_ms_per_message": sampler.stop(run.rows)}
    delete_queue(setup_ep, url)
    row["ratio"] = row["source"]["rate"] / row["baseline"]["rate"] if row["baseline"]["rate"] else 0
    return row


def overhead_section(spark: Any, wd: Any, eps: Endpoints, args: argparse.Namespace) -> dict:
    from bench import spark_runs

    url = new_queue(eps.moto.value, "overhead")
    producer = Producer(eps.moto.value, url, args.depth, args.body_bytes)
    try:
        return spark_runs.batch_overhead(
            spark, wd, eps.moto.value, url, rows=10, seconds=8.0 if args.quick else 25.0
        )
    finally:
        producer.stop()
        delete_queue(eps.moto.value, url)


# (label, messages per send call) of the latency section's producers.
LATENCY_PRODUCERS = (("one SendMessage each", 1), ("SendMessageBatch of 10", 10))
LATENCY_RATES = (20.0, 200.0)


def latency_section(spark: Any, wd: Any, eps: Endpoints, args: argparse.Namespace) -> dict:
    """End-to-end latency with the default options, for each producer at each rate, on each
    server (moto; LocalStack when it runs), beside a one-thread boto3 consumer on the same load.
    The 1-minute load average is taken at the start and the end of each run."""
    from bench import spark_runs

    seconds = args.latency_seconds
    servers = [s for s in args.latency_servers.split(",") if s]
    if eps.localstack is None and "localstack" in servers:
        servers.remove("localstack")
    out: dict[str, Any] = {
        "seconds": seconds,
        "baseline_seconds": min(seconds, 30.0),
        "options": "defaults",
        "cores": os.cpu_count(),
        "runs": [],
    }
    for server in servers:
        endpoint, _ = eps.get(server, False)
        for rate in LATENCY_RATES:
            for producer, batch in LATENCY_PRODUCERS:
                row = {"server": server, "rate": rate, "producer": producer}
                url = new_queue(endpoint, "lat-base")
                out["runs"].append(
                    {
                        **row,
                        "consumer": "baseline (1 thread)",
                        **spark_runs.baseline_latency(
                            endpoint, url, rate, out["baseline_seconds"], batch=batch
                        ),
                    }
                )
                delete_queue(endpoint, url)
                url = new_queue(endpoint, "lat-src")
                result = spark_runs.latency(spark, wd, endpoint, url, rate, seconds, {}, batch)
                out["runs"].append({**row, "consumer": "source, default options", **result})
                delete_queue(endpoint, url)
                logger.info(
                    "   %s %.0f msg/s %s: p50 %.0f ms p99 %.0f ms (load %s)",
                    server,
                    rate,
                    producer,
                    result["p50_ms"],
                    result["p99_ms"],
                    result["load_average_1m"],
                )
    return out


def memory_section(spark: Any, wd: Any, eps: Endpoints, args: argparse.Namespace) -> dict:
    """Peak RSS against batch size: one receiver takes the whole batch, 1 KiB bodies."""
    from bench import spark_runs

    if eps.localstack is not None:
        server, endpoint = "localstack", eps.localstack.endpoint
        sizes = [500, 2000, 8000] if not args.quick else [200, 400]
    else:
        server, endpoint = "moto", eps.moto.value
        sizes = [250, 500, 1000] if not args.quick else [100, 200]
    out: dict[str, Any] = {"server": server, "body_bytes": 1024, "points": []}
    for size in sizes:
        url = new_queue(endpoint, "mem")
        load.fill(endpoint, url, size, 1024)
        sampler = spark_runs.MemorySampler(spark)
        sampler.start()
        run = spark_runs.source_drain(
            spark, wd, endpoint, url, 1, size, size, max(180.0, size / 20), waitTimeSeconds=0
        )
        peak = sampler.stop()
        out["points"].append(
            {
                "batch_size": size,
                "rows": run.rows,
                "rate": run.rate,
                "batch_ms": run.median_batch_ms,
                "peak_rss": peak,
                "rss_at_start": sampler.start_rss,
            }
        )
        delete_queue(endpoint, url)
    return out


SINK_IN_FLIGHT = 4


def sink_section(spark: Any, eps: Endpoints, args: argparse.Namespace) -> dict:
    """The SQS sink (``df.write.format("sqs")``) against a plain boto3 ``SendMessageBatch``
    loop at equal concurrency (``bench/sink.py``), on LocalStack through the delay proxy (moto
    when LocalStack is unavailable: moto slows down as the queue fills)."""
    from bench import sink

    server = "localstack" if eps.localstack is not None else "moto"
    via, direct = eps.get(server, True)
    # moto scans every stored message on each send: keep its queues small.
    messages = args.sink_messages if server == "localstack" else min(args.sink_messages, 4000)
    result = sink.compare(
        spark,
        direct,
        via,
        messages=messages,
        partitions=args.sink_partitions,
        in_flight=SINK_IN_FLIGHT,
        repeats=args.sink_repeats,
        body_bytes=args.body_bytes,
        server_pids=eps.pids(server),
    )
    return {
        "server": server,
        "proxied": True,
        "delayMs": args.delay_ms,
        **result,
    }


def hotpath_section(eps: Endpoints, args: argparse.Namespace, out_dir: Path) -> dict:
    """The hot path (bench.hotpath) of the base commit and of this tree, in the same run."""
    base_ref = args.base_ref or _merge_base()
    result: dict[str, Any] = {"base_ref": base_ref, "runs": []}
    trees = {"after": ROOT}
    tmp = Path(tempfile.mkdtemp(prefix="bench-base-"))
    if base_ref:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", base_ref, "spark_sqs"], capture_output=True
        )
        if archive.returncode == 0:
            subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
            trees = {"before": tmp, "after": ROOT}
        else:
            result["error"] = archive.stderr.decode()[:300]
    server = "localstack" if eps.localstack is not None else "moto"
    messages = 1000 if args.quick else (8000 if server == "localstack" else 2000)
    configs = [("direct, 1 receiver", False, 1), ("delay proxy, 4 receivers", True, 4)]
    for label, proxied, receivers in configs:
        endpoint, _ = eps.get(server, proxied)
        for version, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT)])}
            tag = f"{version}-{'proxy' if proxied else 'direct'}-{receivers}"
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.hotpath",
                    "--endpoint",
                    endpoint,
                    "--out",
                    str(out_dir / "profiles"),
                    "--messages",
                    str(messages),
                    "--receivers",
                    str(receivers),
                    "--per-batch",
                    "500",
                    "--label",
                    tag,
                ],
                env=env,
                capture_output=True,
                text=True,
                cwd=str(tree),
            )
            if proc.returncode != 0:
                result["runs"].append({"config": label, "version": version, "error": proc.stderr})
                continue
            data = json.loads((out_dir / "profiles" / f"hotpath-{tag}.json").read_text())
            result["runs"].append({"config": label, "version": version, "server": server, **data})
    shutil.rmtree(tmp, ignore_errors=True)
    return result


def _merge_base() -> str | None:
    for ref in ("main", "origin/main"):
        proc = subprocess.run(
            ["git", "-C", str(ROOT), "merge-base", "HEAD", ref], capture_output=True, text=True
        )
        if proc.returncode == 0:
            base = proc.stdout.strip()
            head = subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
            ).stdout.strip()
            # On main itself the merge base is HEAD: there is no "before" to compare with.
            return None if base == head else base[:12]
    return None


def warm_up(spark: Any, wd: Any, eps: Endpoints, cores: int) -> None:
    """Start the Python workers before anything is measured."""
    from bench import spark_runs

    url = new_queue(eps.moto.value, "warmup")
    load.fill(eps.moto.value, url, 20 * cores, 100)
    spark_runs.source_drain(spark, wd, eps.moto.value, url, cores, 20, 20 * cores, 120)
    delete_queue(eps.moto.value, url)


# -- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("botocore", "urllib3", "py4j", "spark_sqs", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    from bench import report

    if args.report_only:
        report.write(json.loads((out_dir / "results.json").read_text()), out_dir)
        return 0
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", load.REGION)
    # Spark's Python workers must import this tree's spark_sqs and bench.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p
    )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    skip = set(filter(None, args.skip.split(",")))
    only = tuple(filter(None, args.only.split(",")))
    receivers = [int(r) for r in args.receivers.split(",")]
    began = time.time()
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(began)),
        "quick": args.quick,
        "machine": machine(),
        "versions": versions(),
        "parameters": {
            k: v for k, v in vars(args).items() if k not in ("out", "report_only", "skip", "only")
        },
        "errors": [],
    }
    work = Path(tempfile.mkdtemp(prefix="spark-sqs-bench-"))
    logger.info("starting moto, the delay proxies and LocalStack ...")
    eps = Endpoints(args.delay_ms / 1000.0, work)
    results["versions"]["localstack"] = (
        eps.localstack_version or f"unavailable: {eps.localstack_error}"
    )
    spark = wd = None

    def section(name: str, fn: Any, *a: Any) -> Any:
        if name in skip or (only and not name.startswith(only)):
            return None
        logger.info("== %s", name)
        t = time.monotonic()
        try:
            value = fn(*a)
        except Exception as exc:  # noqa: BLE001 - one failed section must not lose the rest
            logger.error("section %s failed: %s", name, exc)
            results["errors"].append({"section": name, "error": traceback.format_exc()[-2000:]})
            value = None
        results.setdefault("section_seconds", {})[name] = round(time.monotonic() - t, 1)
        _save(results, out_dir)
        return value

    try:
        results["hotpath"] = section("hotpath", hotpath_section, eps, args, out_dir)
        from bench import spark_runs

        cpu_receivers = [int(r) for r in args.cpu_receivers.split(",") if r]
        spark = spark_runs.session(max([args.cores, *cpu_receivers]))
        wd = spark_runs.Workdir()
        section("warmup", warm_up, spark, wd, eps, args.cores)
        # (results key, section prefix, measurement, does its server run?)
        kinds = [
            ("steady", "moto-steady", steady_point, True),
            ("drain", "localstack-drain", drain_point, eps.localstack is not None),
        ]
        for key, prefix, point, available in kinds:
            results[key] = []
            for proxied in (False, True) if available else ():
                for r in receivers:
                    network = "proxy" if proxied else "direct"
                    row = section(
                        f"{prefix}-{network}-{r}", point, spark, wd, eps, proxied, r, args
                    )
                    if row:
                        results[key].append(row)
                        logger.info(
                            "   baseline %.0f/s source %.0f/s ratio %.2f",
                            row["baseline"]["rate"],
                            row["source"]["rate"],
                            row["ratio"],
                        )
        from bench import per_message

        results["cost"] = []
        for load_kind in ("trickle", "steady", "drain", "trickle-trigger-5s"):
            row = section(
                f"cost-{load_kind}", per_message.cost_point, spark, wd, eps, load_kind, args
            )
            if row:
                results["cost"].append(row)
                logger.info(
                    "   $/million: source %.3f plain consumer %.3f ratio %.2f (load %s)",
                    row["source"]["usd_per_million"].get("total", 0),
                    row["baseline"]["usd_per_million"].get("total", 0),
                    row["ratio"] or 0,
                    row["load_average"][0],
                )
        results["cpu"] = []
        for r in cpu_receivers:
            row = section(f"cpu-{r}", per_message.cpu_point, spark, wd, eps, r, args)
            if row:
                results["cpu"].append(row)
        results["overhead"] = section("overhead", overhead_section, spark, wd, eps, args)
        results["latency"] = section("latency", latency_section, spark, wd, eps, args)
        results["memory"] = section("memory", memory_section, spark, wd, eps, args)
        results["sink"] = section("sink", sink_section, spark, eps, args)
        if results["sink"]:
            logger.info(
                "   sink %.0f/s baseline %.0f/s ratio %.2f",
                results["sink"]["sinkMsgPerSec"],
                results["sink"]["baselineMsgPerSec"],
                results["sink"]["ratio"],
            )
    finally:
        results["total_seconds"] = round(time.time() - began, 1)
        _save(results, out_dir)
        if spark is not None:
            spark.stop()
        if wd is not None:
            wd.cleanup()
        eps.stop()
        shutil.rmtree(work, ignore_errors=True)
    report.write(results, out_dir)
    logger.info("done in %.0f s: %s", time.time() - began, out_dir / "README.md")
    return 1 if results["errors"] else 0


def _save(results: dict[str, Any], out_dir: Path) -> None:
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, default=str))
