"""``python -m bench.sink``: the SQS sink against a plain boto3 ``SendMessageBatch`` loop.

Both send the same number of messages (same body size) into a fresh standard queue on the same
moto server, through the delay proxy (20 ms per request by default, as within an AWS region),
at equal concurrency: the baseline runs ``partitions x in-flight`` threads, each looping
``SendMessageBatch`` of 10; the sink runs ``df.write.format("sqs")`` over ``partitions``
partitions with ``maxInFlightCalls=in-flight``. Runs alternate and repeat; the report is the
median throughput of each and their ratio (target: at least 0.8). The sink's time is the
wall time of ``save()``, Spark's job overhead included.

moto scans every stored message on each send, so each run starts from an empty queue and the
message count is kept small: read the ratio, not the absolute rates (2 shared cores).

``--server localstack`` measures on LocalStack (``.venv-localstack``) as ``make bench`` does,
and ``--results bench/results`` stores the result as that run's ``sink`` section. Each repeat
also runs the baseline with the sink's ``spark_sqs.dedupeId`` attribute on every message (like
for like on a standard queue), and takes client and server CPU per message from /proc.

``compare`` is the measurement itself; ``make bench`` (``bench/run.py``, section ``sink``) runs
it against LocalStack as well.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench import load, servers
from spark_sqs.sink.rows import DEDUPE_ATTRIBUTE

logger = logging.getLogger("bench.sink")


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.sink", description=__doc__)
    p.add_argument("--messages", type=int, default=4000, help="messages per run")
    p.add_argument("--partitions", type=int, default=2, help="sink tasks")
    p.add_argument("--in-flight", type=int, default=4, help="calls in flight per task")
    p.add_argument("--delay-ms", type=float, default=20.0, help="delay proxy: ms per request")
    p.add_argument("--repeats", type=int, default=3, help="runs of each")
    p.add_argument("--body-bytes", type=int, default=200, help="message body size")
    p.add_argument("--cores", type=int, default=2, help="Spark master local[N]")
    p.add_argument(
        "--server",
        choices=("moto", "localstack"),
        default="moto",
        help="the SQS server: moto, or LocalStack as `make bench` uses (.venv-localstack)",
    )
    p.add_argument(
        "--results",
        default=None,
        metavar="DIR",
        help="store the result as section 'sink' of DIR/results.json (as `make bench` does, "
        "the other sections kept) and regenerate DIR/README.md",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra sink option for the sink's runs (repeatable)",
    )
    return p.parse_args(argv)


def _new_queue(endpoint: str) -> str:
    return load.client(endpoint).create_queue(QueueName=f"sink-bench-{uuid.uuid4().hex[:10]}")[
        "QueueUrl"
    ]


def _count(endpoint: str, url: str, expected: int, timeout: float = 30.0) -> int:
    """Messages in the queue, polled until ``expected`` (a server's count may lag a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        attrs = load.client(endpoint).get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        count = int(attrs["ApproximateNumberOfMessages"])
        if count >= expected or time.monotonic() >= deadline:
            return count
        time.sleep(0.2)


def _attribute(n: int) -> dict[str, dict[str, str]]:
    """The attribute the sink adds on standard queues: its name, a 64-hex-digit id."""
    digest = hashlib.sha256(str(n).encode()).hexdigest()
    return {DEDUPE_ATTRIBUTE: {"DataType": "String", "StringValue": digest}}


def baseline(
    endpoint: str,
    url: str,
    messages: int,
    threads: int,
    body_bytes: int,
    *,
    attribute: bool = False,
) -> float:
    """Seconds for ``threads`` threads to send ``messages`` with SendMessageBatch of 10; with
    ``attribute``, each message carries the sink's ``spark_sqs.dedupeId`` attribute (the
    like-for-like baseline for a standard queue)."""
    sqs = load.client(endpoint, pool=threads + 2)
    # Bodies made before the clock starts, as the sink's DataFrame is cached before its run.
    bodies = [load.body(n, body_bytes) for n in range(messages)]
    attributes = [_attribute(n) for n in range(messages)] if attribute else None
    chunks = list(range(0, messages, 10))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not chunks:
                    return
                start = chunks.pop()
            count = min(10, messages - start)
            entries: list[dict[str, Any]] = [
                {"Id": str(i), "MessageBody": bodies[start + i]} for i in range(count)
            ]
            if attributes is not None:
                for i, entry in enumerate(entries):
                    entry["MessageAttributes"] = attributes[start + i]
            while entries:
                response = sqs.send_message_batch(QueueUrl=url, Entries=entries)
                failed = {f["Id"] for f in response.get("Failed", [])}
                entries = [e for e in entries if e["Id"] in failed]

    started = time.perf_counter()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - started


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of a process and each of its descendants, by process id,
    from /proc (empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(name)] = fields
            children.setdefault(int(fields[1]), []).append(int(name))
    out: dict[int, float] = {}
    todo = [pid]
    while todo:
        current = todo.pop()
        if current in stats:
            out[current] = (int(stats[current][11]) + int(stats[current][12])) / _TICK
        todo.extend(children.get(current, []))
    return out


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two ``tree_cpu_seconds`` snapshots. Processes that exited in
    between (Spark retires idle Python workers) count for nothing rather than negatively."""
    return sum(max(0.0, seconds - before.get(pid, 0.0)) for pid, seconds in after.items())


# The plain loop, the same loop with the sink's dedupe attribute on every message, the sink.
KINDS = ["baseline", "attributed", "sink"]


def sink(
    spark: Any,
    df: Any,
    endpoint: str,
    url: str,
    in_flight: int,
    options: dict[str, str] | None = None,
) -> float:
    started = time.perf_counter()
    (
        df.write.format("sqs")
        .mode("append")
        .option("queueUrl", url)
        .option("endpointUrl", endpoint)
        .option("maxInFlightCalls", in_flight)
        .options(**(options or {}))
        .save()
    )
    return time.perf_counter() - started


def compare(
    spark: Any,
    direct: str,
    via: str,
    *,
    messages: int,
    partitions: int,
    in_flight: int,
    repeats: int,
    body_bytes: int,
    options: dict[str, str] | None = None,
    server_pids: tuple[int, ...] = (),
) -> dict[str, Any]:
    """The sink and the baseline, alternating, ``repeats`` times each; queues are created and
    counted on ``direct``, messages sent through ``via`` (the delay proxy). Raises if a run
    delivers fewer messages than it sent.

    CPU per message: the client side is this process and its descendants (Spark's JVM and
    Python workers) less ``server_pids`` and theirs (the SQS server and the proxy, children of
    this process when they were started here); the server side is those. Less noisy than the
    rates on a shared machine: it is what each kind costs, not what it got."""

    def cpu() -> tuple[dict[int, float], dict[int, float]]:
        server_side: dict[int, float] = {}
        for pid in server_pids:
            server_side.update(tree_cpu_seconds(pid))
        everything = tree_cpu_seconds(os.getpid())
        client = {pid: t for pid, t in everything.items() if pid not in server_side}
        return client, server_side

    bodies = [(load.body(n, body_bytes),) for n in range(messages)]
    df = spark.createDataFrame(bodies, "body string").repartition(partitions).cache()
    df.count()
    try:
        # One untimed write of the whole DataFrame first: Python workers and clients start
        # once, and the JVM compiles the write's hot paths (a fresh JVM's first large write
        # spent about twice the CPU per message of later ones, and ran at half their rate).
        warm = _new_queue(direct)
        sink(spark, df, via, warm, in_flight, options)
        load.client(direct).delete_queue(QueueUrl=warm)
        warm = _new_queue(direct)
        # What a write costs beyond its sends (Spark's job, the writer's create and commit in
        # Python workers): a 10-row write, best of two. It is a fixed cost per write (per
        # micro-batch in a stream), which is why the ratio grows with the messages per run.
        overhead = min(sink(spark, df.limit(10), via, warm, in_flight) for _ in range(2))
        load.client(direct).delete_queue(QueueUrl=warm)
        threads = partitions * in_flight
        runs: dict[str, list[float]] = {kind: [] for kind in KINDS}
        client_us: dict[str, list[float]] = {kind: [] for kind in KINDS}
        server_us: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for repeat in range(repeats):
            # Alternate, and rotate the order so that no kind always runs first.
            for kind in KINDS[repeat % 3 :] + KINDS[: repeat % 3]:
                url = _new_queue(direct)
                client_before, server_before = cpu()
                if kind != "sink":
                    seconds = baseline(
                        via, url, messages, threads, body_bytes, attribute=kind == "attributed"
                    )
                else:
                    seconds = sink(spark, df, via, url, in_flight, options)
                client_after, server_after = cpu()
                client_us[kind].append(1e6 * cpu_spent(client_before, client_after) / messages)
                server_us[kind].append(1e6 * cpu_spent(server_before, server_after) / messages)
                arrived = _count(direct, url, messages)
                if arrived != messages:
                    raise RuntimeError(f"{kind}: {arrived} of {messages} messages arrived")
                rate = messages / seconds
                runs[kind].append(rate)
                logger.info(
                    "run %d %s: %.0f msg/s (%.2f s), CPU us/msg client %.0f server %.0f, load %.1f",
                    repeat,
                    kind,
                    rate,
                    seconds,
                    client_us[kind][-1],
                    server_us[kind][-1],
                    os.getloadavg()[0],
                )
                load.client(direct).delete_queue(QueueUrl=url)
    finally:
        df.unpersist()
    result: dict[str, Any] = {
        "messages": messages,
        "concurrency": f"{partitions} tasks x {in_flight} calls = {threads} threads",
        "partitions": partitions,
        "inFlight": in_flight,
        "bodyBytes": body_bytes,
        "baselineMsgPerSec": round(statistics.median(runs["baseline"]), 1),
        "attributedBaselineMsgPerSec": round(statistics.median(runs["attributed"]), 1),
        "sinkMsgPerSec": round(statistics.median(runs["sink"]), 1),
        "runs": {k: [round(r, 1) for r in v] for k, v in runs.items()},
        "writeOverheadSeconds": round(overhead, 2),
        "sinkOptions": dict(options or {}),
        "loadAverage": os.getloadavg(),
        "cpuMicrosPerMessage": {
            kind: {
                "client": round(statistics.median(client_us[kind]), 1),
                "server": round(statistics.median(server_us[kind]), 1),
            }
            for kind in KINDS
        }
        if server_pids
        else None,
    }
    result["ratio"] = round(result["sinkMsgPerSec"] / result["baselineMsgPerSec"], 3)
    result["ratioAttributed"] = round(
        result["sinkMsgPerSec"] / result["attributedBaselineMsgPerSec"], 3
    )
    # Per repeat, each sink run against the baselines of the same repeat (same moment).
    result["pairRatios"] = [
        round(s / b, 3) for s, b in zip(runs["sink"], runs["baseline"], strict=True)
    ]
    result["pairRatiosAttributed"] = [
        round(s / b, 3) for s, b in zip(runs["sink"], runs["attributed"], strict=True)
    ]
    return result


def _store(result: dict[str, Any], out_dir: Path) -> None:
    """Section ``sink`` of ``results.json``, and that section of ``README.md`` replaced (or
    inserted before the hot path's), the rest of both kept as the last ``make bench`` wrote
    them (regenerating the whole README would redraw its plots)."""
    from bench import report

    path = out_dir / "results.json"
    results = json.loads(path.read_text())
    results["sink"] = {
        **result,
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "by": "python -m bench.sink",
    }
    path.write_text(json.dumps(results, indent=2, default=str))
    readme = out_dir / "README.md"
    text = readme.read_text()
    section = "\n".join(report.sink_lines(results["sink"]))
    start = text.find(report.SINK_HEADING)
    if start < 0:
        start = end = text.find("## Hot path") if "## Hot path" in text else len(text)
    else:
        following = text.find("\n## ", start + 1)
        end = following + 1 if following >= 0 else len(text)
    readme.write_text(text[:start] + section + "\n" + text[end:])


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # The sink's tasks run in Spark's Python workers, which inherit this environment.
    for key, value in (
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
        ("AWS_DEFAULT_REGION", load.REGION),
    ):
        os.environ.setdefault(key, value)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("spark_sqs").setLevel(logging.WARNING)
    options = dict(o.split("=", 1) for o in args.option)
    work = Path(tempfile.mkdtemp(prefix="spark-sqs-sink-bench-"))
    if args.server == "localstack":
        python = servers.ensure_localstack_venv(work / "localstack-install.log")
        server: Any = servers.LocalStack(python, work / "localstack.log")
        direct = server.endpoint
    else:
        server = servers.start_moto()
        direct = server.value
    proxy = servers.start_proxy(direct, args.delay_ms / 1000.0)
    via = f"http://127.0.0.1:{proxy.value}"
    try:
        from pyspark.sql import SparkSession

        from spark_sqs import SqsDataSource

        spark = (
            SparkSession.builder.master(f"local[{args.cores}]")
            .appName("spark-sqs-sink-bench")
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(SqsDataSource)
        result = compare(
            spark,
            direct,
            via,
            messages=args.messages,
            partitions=args.partitions,
            in_flight=args.in_flight,
            repeats=args.repeats,
            body_bytes=args.body_bytes,
            options=options,
            server_pids=(server.pid, proxy.pid),
        )
        result["server"] = args.server
        result["proxied"] = True
        result["delayMs"] = args.delay_ms
        if args.results:
            _store(result, Path(args.results))
        print(json.dumps(result, indent=2))  # noqa: T201 - the bench's report
        return 0
    finally:
        proxy.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
