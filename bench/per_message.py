"""``make bench``'s cost and CPU per message, each beside the plain consumer in the same run.

Runs on: the benchmark process (development tool; not in the wheel).

**Cost** (``cost_point``): the requests a consumer sends, counted by kind in the counting delay
proxies it talks to (``bench.proxy``: SQS by action, S3 by price class), priced at list prices
(``bench.cost``), per message delivered. The producer talks to the servers directly, so none
of its requests count. Three loads:

- ``trickle``: 20 msg/s, one ``SendMessage`` per message, moto;
- ``steady``: 200 msg/s in ``SendMessageBatch`` calls of 10, moto;
- ``trickle-trigger-5s``: the trickle with ``trigger(processingTime="5 seconds")``, the one
  setting that is not the default: how a trigger interval moves the cost;
- ``drain``: a backlog filled before the consumer starts (LocalStack when it runs).

The source runs with its default options and an ``s3://`` journal on moto's S3 behind the
delay proxy; the plain consumer loops one long-polled ``ReceiveMessage`` (10 messages, 20 s)
and one ``DeleteMessageBatch`` of what it got. Both are counted over a steady window: the
source's from the end of one micro-batch to the end of a later one (its start-up and shutdown
do not count; the messages are those of the batches in between), the consumer's over the same
number of seconds.

**CPU** (``cpu_point``): CPU seconds by process (``bench.run.CpuSampler``) over a steady window
of a backlog drain on LocalStack through the delay proxy at a fixed batch size (``receivers``
x ``per_receiver`` messages a batch; local journal), against the plain consumer with as many
threads on the same backlog. Over the same windows the SQS proxy counts the SQS requests by
action, with the messages or entries they carried (``sqs_calls``): what the SQS server's CPU
was spent on.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.request
import uuid
from typing import Any

from bench import cost, load
from bench.stats import Batch, batches_from_progress

logger = logging.getLogger("bench")

JOURNAL_BUCKET = "bench-journal"
BASELINE_WAIT_SECONDS = 20
# (name, msg/s, messages per send call, trigger interval in s: 0 is Spark's default, back to
# back); the drain has no producer. The last shows what a trigger interval does to a trickle.
LOADS = (
    ("trickle", 20.0, 1, 0),
    ("steady", 200.0, 10, 0),
    ("trickle-trigger-5s", 20.0, 1, 5),
)


# -- the counting proxies -----------------------------------------------------------------------


def proxy_counts(port: int | str, reset: bool = False) -> dict[str, Any]:
    """The counts of the proxy on ``port`` (``bench.proxy``'s control requests)."""
    path = "reset" if reset else "counts"
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/__bench/{path}", method="POST" if reset else "GET"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


class Counters:
    """The counting proxies one consumer talks to, read together."""

    def __init__(self, *ports: int | str) -> None:
        self.ports = tuple(dict.fromkeys(ports))

    def reset(self) -> None:
        for port in self.ports:
            proxy_counts(port, reset=True)

    def read(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {
            "counts": {},
            "units": {},
            "objects": {},
            "sqs_items": {},
            "sqs_empty": {},
            "connections": {},
        }
        for port in self.ports:
            data = proxy_counts(port)
            for field, merged in out.items():
                for kind, n in data.get(field, {}).items():
                    merged[kind] = merged.get(kind, 0) + n
        return out


def summarise(counted: dict[str, dict[str, int]], messages: int, seconds: float) -> dict[str, Any]:
    """Requests per 1,000 messages by kind and cost per million messages by service."""
    billed = cost.billed(counted["counts"], counted["units"])
    return {
        "messages": messages,
        "seconds": round(seconds, 1),
        "counts": dict(sorted(counted["counts"].items())),
        # S3 requests by journal object (``bench.cost.s3_key_pattern``), most first.
        "s3_objects": dict(sorted(counted.get("objects", {}).items(), key=lambda kv: -kv[1])),
        "per_1000_messages": {
            k: round(v, 1) for k, v in cost.per_thousand(billed, messages).items()
        },
        "usd_per_million": {
            k: round(v, 4) for k, v in cost.cost_per_million(billed, messages).items()
        },
    }


def journal_bucket(s3_endpoint: str) -> None:
    import boto3

    s3 = boto3.client(
        "s3",
        region_name=load.REGION,
        endpoint_url=s3_endpoint,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    try:
        s3.create_bucket(Bucket=JOURNAL_BUCKET)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass


def journal_location(proxy_port: int | str) -> str:
    return (
        f"s3://{JOURNAL_BUCKET}/{uuid.uuid4().hex[:12]}"
        f"?endpoint_override=127.0.0.1:{proxy_port}&scheme=http"
    )


# -- windows over a running query ---------------------------------------------------------------


def _batches(query: Any) -> list[Batch]:
    return [b for b in batches_from_progress(query.recentProgress) if b.rows > 0]


def next_batch(query: Any, after: int, timeout: float, poll: float = 0.2) -> Batch:
    """The first batch with rows and an id above ``after``, once Spark reports it complete."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        done = [b for b in _batches(query) if b.batch_id > after]
        if done:
            return done[0]
        time.sleep(poll)
    raise RuntimeError(f"no batch after {after} within {timeout:.0f} s")


def rows_between(batches: list[Batch], first: int, last: int) -> int:
    """Rows of the batches with ids in (``first``, ``last``]."""
    return sum(b.rows for b in batches if first < b.batch_id <= last)


# -- cost ----------------------------------------------------------------------------------------


def _source_cost_window(
    query: Any,
    counters: Counters,
    warmup: float,
    window: float,
    batches_wanted: int | None = None,
) -> dict[str, Any]:
    first = next_batch(query, -1, 240)
    time.sleep(warmup)
    start = next_batch(query, first.batch_id, 120)
    counters.reset()
    began = time.monotonic()
    if batches_wanted is None:
        time.sleep(window)
        end = next_batch(query, start.batch_id, 120)
        while end.end < start.end + window:  # several batches may have completed
            end = next_batch(query, end.batch_id, 120)
    else:
        end = start
        for _ in range(batches_wanted):
            end = next_batch(query, end.batch_id, 300)
    counted = counters.read()
    seconds = time.monotonic() - began
    batches = _batches(query)
    messages = rows_between(batches, start.batch_id, end.batch_id)
    out = summarise(counted, messages, seconds)
    out["batches"] = sum(1 for b in batches if start.batch_id < b.batch_id <= end.batch_id)
    return out


def _baseline_cost_window(
    consumer: load.BaselineConsumer,
    counters: Counters,
    warmup: float,
    window: float,
    backlog: int | None = None,
) -> dict[str, Any]:
    """``window`` seconds after ``warmup``; on a ``backlog``, from a tenth of it to four fifths
    (or ``window`` seconds, whichever comes first), so the queue never runs dry inside."""
    consumer.start()
    if backlog:
        _wait(lambda: consumer.deleted() >= backlog // 10, 300)
    else:
        time.sleep(warmup)
    counters.reset()
    d0, began = consumer.deleted(), time.monotonic()
    if backlog:
        deadline = began + window
        while consumer.deleted() < backlog * 4 // 5 and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        time.sleep(window)
    counted = counters.read()
    d1, seconds = consumer.deleted(), time.monotonic() - began
    consumer.stop()
    return summarise(counted, d1 - d0, seconds)


def cost_point(
    spark: Any,
    wd: Any,
    eps: Any,
    kind: str,
    args: Any,
) -> dict[str, Any]:
    """The source's and the plain consumer's requests and cost per message under one load."""
    from bench import run, spark_runs

    moto_proxy = eps.moto_proxy.value
    journal_bucket(eps.moto.value)
    load_before = os.getloadavg()
    if kind == "drain":
        server = "localstack" if eps.localstack is not None else "moto"
    else:
        server = "moto"
    consumer_ep, setup_ep = eps.get(server, True)
    sqs_proxy = consumer_ep.rsplit(":", 1)[1]
    counters = Counters(sqs_proxy, moto_proxy)
    row: dict[str, Any] = {"load": kind, "server": server, "journal": "s3:// (moto)"}
    warmup, window = args.cost_warmup, args.cost_window
    if kind == "drain":
        # Default options plan batches of maxMessagesPerTrigger (10,000); the window is
        # ``drain_batches`` full batches after the first.
        per_batch = args.cost_drain_batch
        if server == "moto":
            # moto's cost per call grows with the messages it stores: keep its backlog small.
            per_batch = min(per_batch, 1000)
        options = {} if per_batch == 10000 else {"maxMessagesPerTrigger": per_batch}
        backlog = per_batch * (args.cost_drain_batches + 2)
        row.update(messages_queued=backlog, options=options or "defaults")
        url = run.new_queue(setup_ep, "cost-drain-base")
        load.fill(setup_ep, url, backlog, args.body_bytes)
        consumer = load.BaselineConsumer(consumer_ep, url, 4, BASELINE_WAIT_SECONDS)
        row["baseline"] = _baseline_cost_window(consumer, counters, 0.0, window, backlog)
        run.delete_queue(setup_ep, url)
        url = run.new_queue(setup_ep, "cost-drain-src")
        load.fill(setup_ep, url, backlog, args.body_bytes)
        df = spark_runs.source_stream(
            spark, consumer_ep, url, journal_location(moto_proxy), **options
        )
        query = spark_runs._start_noop(df, wd.fresh("cost-drain") / "checkpoint")
        try:
            row["source"] = _source_cost_window(
                query, counters, 0.0, 0.0, batches_wanted=args.cost_drain_batches
            )
        finally:
            spark_runs._stop(query)
        run.delete_queue(setup_ep, url)
    else:
        rate, per_call, trigger = next((r, b, t) for name, r, b, t in LOADS if name == kind)
        row.update(
            rate=rate,
            messages_per_send=per_call,
            options="defaults",
            trigger_seconds=trigger,
        )
        url = run.new_queue(setup_ep, f"cost-{kind}-base")
        producer = spark_runs.PacedProducer(setup_ep, url, rate, args.body_bytes, per_call)
        producer.start()
        consumer = load.BaselineConsumer(consumer_ep, url, 1, BASELINE_WAIT_SECONDS)
        row["baseline"] = _baseline_cost_window(consumer, counters, warmup, window)
        producer.stop()
        run.delete_queue(setup_ep, url)
        url = run.new_queue(setup_ep, f"cost-{kind}-src")
        df = spark_runs.source_stream(spark, consumer_ep, url, journal_location(moto_proxy))
        query = (
            df.writeStream.format("noop")
            .option("checkpointLocation", str(wd.fresh(f"cost-{kind}") / "checkpoint"))
            .trigger(processingTime=f"{trigger} seconds")
            .start()
        )
        producer = spark_runs.PacedProducer(setup_ep, url, rate, args.body_bytes, per_call)
        producer.start()
        try:
            row["source"] = _source_cost_window(query, counters, warmup, window)
        finally:
            producer.stop()
            spark_runs._stop(query)
        run.delete_queue(setup_ep, url)
    base = row["baseline"]["usd_per_million"].get("total")
    src = row["source"]["usd_per_million"].get("total")
    row["ratio"] = src / base if base and src is not None else None
    row["load_average"] = [round(x, 2) for x in load_before]
    row["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return row


# -- CPU -----------------------------------------------------------------------------------------


def cpu_point(spark: Any, wd: Any, eps: Any, receivers: int, args: Any) -> dict[str, Any]:
    """CPU milliseconds per message by process over steady windows at a fixed batch size: the
    JIT warm-up (``jit_warmup``), then ``cpu_repeats`` pairs of the plain consumer and the
    source, interleaved (B, S, B, S, ...), so that what drifts in the machine over the minutes
    of a run falls on both sides. ``pairs`` holds each pair; ``baseline`` and ``source`` are
    those of the pair whose all-process ratio is the median (the report judges the targets on
    the median of each measure over the pairs)."""
    server = "localstack" if eps.localstack is not None else "moto"
    per_receiver = args.cpu_batch
    window_batches = args.cpu_batches
    warmup = max(1, getattr(args, "cpu_warmup_batches", 2))
    repeats = max(1, getattr(args, "cpu_repeats", 1))
    backlog = receivers * per_receiver * (warmup + window_batches + 1)
    row: dict[str, Any] = {
        "server": server,
        "proxied": True,
        "receivers": receivers,
        "messages_per_batch": receivers * per_receiver,
        "messages_queued": backlog,
        "journal": "local",
        "warmup_batches": warmup,
        "repeats": repeats,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    if getattr(args, "cpu_jit_max_batches", 0) > 0:
        row["jit_warmup"] = jit_warmup(spark, wd, eps, receivers, args)
    pairs: list[dict[str, Any]] = []
    for n in range(repeats):
        load_before = [round(x, 2) for x in os.getloadavg()]
        base = _cpu_baseline(eps, receivers, backlog, args)
        source = _cpu_source(spark, wd, eps, receivers, backlog, warmup, args)
        pairs.append({"baseline": base, "source": source, "load_average": load_before})
        if getattr(args, "cpu_plain_processes", False):
            pairs[-1]["plain_processes"] = _cpu_baseline(
                eps, receivers, backlog, args, processes=True
            )
        logger.info(
            "   pair %d of %d: all processes source / plain %.2f, workers %.3f ms a message",
            n + 1,
            repeats,
            all_processes_ratio(base, source) or 0.0,
            (source.get("cpu_ms_per_message") or {}).get("Python workers", 0.0),
        )
    row["pairs"] = pairs
    chosen = median_pair([all_processes_ratio(p["baseline"], p["source"]) for p in pairs])
    row["median_pair"] = chosen
    row["baseline"], row["source"] = pairs[chosen]["baseline"], pairs[chosen]["source"]
    row["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return row


def all_processes_ratio(baseline: dict[str, Any], source: dict[str, Any]) -> float | None:
    """Every process's CPU per message, the source's over the plain consumer's."""
    base = sum((baseline.get("cpu_ms_per_message") or {}).values())
    src = sum((source.get("cpu_ms_per_message") or {}).values())
    return src / base if base and src else None


def median_pair(ratios: list[float | None]) -> int:
    """The index of the pair whose ratio is the median (the lower middle one of an even
    number; pairs without a ratio count last)."""
    order = sorted(range(len(ratios)), key=lambda i: (ratios[i] is None, ratios[i] or 0.0, i))
    measured = [i for i in order if ratios[i] is not None]
    if not measured:
        return 0
    return measured[(len(measured) - 1) // 2]


def _cpu_baseline(
    eps: Any, receivers: int, backlog: int, args: Any, processes: bool = False
) -> dict[str, Any]:
    """The plain consumer's CPU by process from a tenth of ``backlog`` to four fifths of it:
    ``receivers`` threads of the bench process, or with ``processes`` as many processes."""
    from bench import run

    server = "localstack" if eps.localstack is not None else "moto"
    consumer_ep, setup_ep = eps.get(server, True)
    counters = Counters(consumer_ep.rsplit(":", 1)[1])
    url = run.new_queue(setup_ep, "cpu-base")
    load.fill(setup_ep, url, backlog, args.body_bytes)
    consumer: Any = (
        load.ProcessConsumer(consumer_ep, url, receivers)
        if processes
        else load.BaselineConsumer(consumer_ep, url, receivers)
    )
    consumer.start()
    _wait(lambda: consumer.deleted() >= backlog // 10, 300)
    counters.reset()
    sampler = run.CpuSampler(*eps.pids(server))
    d0, t0 = consumer.deleted(), time.monotonic()
    _wait(lambda: consumer.deleted() >= backlog * 4 // 5, 600)
    d1 = consumer.deleted()
    cpu = sampler.stop(d1 - d0)
    counted = counters.read()
    seconds = time.monotonic() - t0
    consumer.stop()
    run.delete_queue(setup_ep, url)
    return {
        "messages": d1 - d0,
        "seconds": round(seconds, 1),
        "rate": (d1 - d0) / seconds if seconds else 0.0,
        "cpu_ms_per_message": cpu,
        "sqs_calls": sqs_calls(counted, d1 - d0),
        "connections_opened": counted["connections"],
    }


def _backlog_stream(
    spark: Any,
    wd: Any,
    endpoints: tuple[str, str],
    names: tuple[str, str],
    receivers: int,
    per_receiver: int,
    messages: int,
    args: Any,
) -> tuple[Any, Any, str]:
    """A new queue (``names``: the queue's and the work directory's) holding ``messages``, and
    the source's stream over it at ``per_receiver`` messages a receiver a batch (``endpoints``:
    the consumer's and the setup's): (the stream, its work directory, the queue's URL)."""
    from bench import run, spark_runs

    consumer_ep, setup_ep = endpoints
    url = run.new_queue(setup_ep, names[0])
    load.fill(setup_ep, url, messages, args.body_bytes)
    base = wd.fresh(names[1])
    df = spark_runs.source_stream(
        spark,
        consumer_ep,
        url,
        base / "journal",
        numPartitions=receivers,
        maxMessagesPerTrigger=receivers * per_receiver,
    )
    return df, base, url


def _cpu_source(
    spark: Any, wd: Any, eps: Any, receivers: int, backlog: int, warmup: int, args: Any
) -> dict[str, Any]:
    """The source's CPU by process from the end of its first ``warmup`` batches to the end of
    ``cpu_batches`` more. The default warm-up is two: the first batch starts the workers, the
    second is the first whose receivers delete (a worker's delete threads open their
    connections then), as the plain consumer's threads have theirs open before its window."""
    from bench import run, spark_runs

    server = "localstack" if eps.localstack is not None else "moto"
    consumer_ep, setup_ep = eps.get(server, True)
    pids = eps.pids(server)
    counters = Counters(consumer_ep.rsplit(":", 1)[1])
    window_batches = args.cpu_batches
    df, base, url = _backlog_stream(
        spark,
        wd,
        (consumer_ep, setup_ep),
        ("cpu-src", "cpu"),
        receivers,
        args.cpu_batch,
        backlog,
        args,
    )
    query = spark_runs._start_noop(df, base / "checkpoint")
    try:
        start = next_batch(query, -1, 300)
        for _ in range(warmup - 1):
            start = next_batch(query, start.batch_id, 300)
        counters.reset()
        sampler = run.CpuSampler(*pids)
        jvm_before = jvm_threads_cpu()
        t0 = time.monotonic()
        end = start
        # Connections opened to the proxy in each batch of the window: a one-off (a worker's
        # first deletes) or a cost of every batch. Each read is a connection of its own.
        opened: list[int] = []
        # The JVM's CPU seconds in each batch, and its JIT compilers' part: warm-up or not.
        jvm_by_batch: list[dict[str, float]] = []
        previous = jvm_before
        # Every process's CPU seconds in each batch, by role.
        roles_by_batch: list[dict[str, float]] = []
        roles_before = run.cpu_snapshot(*pids)
        for n in range(window_batches):
            end = next_batch(query, end.batch_id, 300)
            total = counters.read()["connections"].get("client", 0)
            opened.append(total - (n + 1) - sum(opened))
            now = jvm_threads_cpu()
            jvm_by_batch.append(_jvm_seconds(previous, now))
            previous = now
            roles_now = run.cpu_snapshot(*pids)
            roles_by_batch.append(_role_seconds(roles_before, roles_now))
            roles_before = roles_now
        seconds = time.monotonic() - t0
        messages = rows_between(_batches(query), start.batch_id, end.batch_id)
        cpu = sampler.stop(messages)
        jvm = jvm_threads_cpu_per_message(jvm_before, jvm_threads_cpu(), messages)
        counted = counters.read()
        # The per-batch reads' own connections, as the baseline's count holds only its one read.
        if "client" in counted["connections"]:
            counted["connections"]["client"] -= window_batches
    finally:
        spark_runs._stop(query)
    run.delete_queue(setup_ep, url)
    return {
        "messages": messages,
        "seconds": round(seconds, 1),
        "rate": messages / seconds if seconds else 0.0,
        "batches": window_batches,
        "cpu_ms_per_message": cpu,
        "sqs_calls": sqs_calls(counted, messages),
        "connections_opened": counted["connections"],
        "client_connections_by_batch": opened,
        "jvm_threads_cpu_ms_per_message": jvm,
        "jvm_cpu_seconds_by_batch": jvm_by_batch,
        "cpu_seconds_by_batch": roles_by_batch,
    }


def jit_warmup(spark: Any, wd: Any, eps: Any, receivers: int, args: Any) -> dict[str, Any]:
    """Small batches of the source, not measured, until the JVM's JIT compilers have settled.

    A young JVM compiles Spark's per-batch code paths for minutes: they run a few times a
    batch, so it takes many batches to reach the JIT's thresholds, whatever their size. That
    is a one-off of a JVM's first minutes, not a cost of each message of a long-running
    stream, so the windows start after it: batches of ``cpu_jit_batch`` messages a receiver
    until the compilers spent at most ``cpu_jit_settled`` of the JVM's CPU in each of the
    last ``JIT_SETTLED_BATCHES`` batches, or ``cpu_jit_max_batches`` batches. What is left of
    the JIT's work shows in the windows' JIT line."""
    from bench import run, spark_runs

    server = "localstack" if eps.localstack is not None else "moto"
    consumer_ep, setup_ep = eps.get(server, True)
    per_receiver = args.cpu_jit_batch
    most = args.cpu_jit_max_batches
    df, base, url = _backlog_stream(
        spark,
        wd,
        (consumer_ep, setup_ep),
        ("cpu-jit", "cpu-jit"),
        receivers,
        per_receiver,
        receivers * per_receiver * (most + 1),
        args,
    )
    t0 = time.monotonic()
    by_batch: list[dict[str, float]] = []
    query = spark_runs._start_noop(df, base / "checkpoint")
    try:
        end = next_batch(query, -1, 300)
        previous = jvm_threads_cpu()
        while len(by_batch) < most and not jit_settled(by_batch, args.cpu_jit_settled):
            end = next_batch(query, end.batch_id, 300)
            now = jvm_threads_cpu()
            by_batch.append(_jvm_seconds(previous, now))
            previous = now
    finally:
        spark_runs._stop(query)
    run.delete_queue(setup_ep, url)
    return {
        "messages_per_batch": receivers * per_receiver,
        "batches": len(by_batch) + 1,
        "settled": jit_settled(by_batch, args.cpu_jit_settled),
        "seconds": round(time.monotonic() - t0, 1),
        "jvm_cpu_seconds_by_batch": by_batch,
    }


# Batches in a row whose JIT share must be low for the JIT to count as settled.
JIT_SETTLED_BATCHES = 2


def jit_settled(by_batch: list[dict[str, float]], share: float) -> bool:
    """Whether the JIT compilers spent at most ``share`` of the JVM's CPU in each of the last
    ``JIT_SETTLED_BATCHES`` batches (``_jvm_seconds`` of each)."""
    last = by_batch[-JIT_SETTLED_BATCHES:]
    return len(last) == JIT_SETTLED_BATCHES and all(
        b["jit_compilers"] <= share * b["all"] for b in last
    )


def jvm_threads_cpu() -> dict[tuple[int, int], tuple[str, float]]:
    """CPU seconds of each thread of this process's JVM children (Spark's), by (process id,
    thread id), with the thread's name (``/proc/<pid>/task/<tid>/comm``, 15 characters)."""
    from bench.run import _cmdline
    from bench.sink import _TICK, tree_cpu_seconds

    out: dict[tuple[int, int], tuple[str, float]] = {}
    for pid in tree_cpu_seconds(os.getpid()):
        if "java" not in _cmdline(pid).split(" ", 1)[0]:
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[(pid, int(tid))] = (name, (int(fields[11]) + int(fields[12])) / _TICK)
    return out


def _role_seconds(
    before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]
) -> dict[str, float]:
    """CPU seconds by role between two ``run.cpu_snapshot`` snapshots."""
    from bench.sink import cpu_spent

    return {role: round(cpu_spent(before.get(role, {}), pids), 3) for role, pids in after.items()}


def _jvm_seconds(
    before: dict[tuple[int, int], tuple[str, float]],
    after: dict[tuple[int, int], tuple[str, float]],
) -> dict[str, float]:
    """The JVM's CPU seconds between two snapshots: in all threads, and in its JIT compilers."""
    spent = {k: sec - before.get(k, (name, 0.0))[1] for k, (name, sec) in after.items()}
    return {
        "all": round(sum(v for v in spent.values() if v > 0), 3),
        "jit_compilers": round(
            sum(v for k, v in spent.items() if v > 0 and "CompilerThre" in after[k][0]), 3
        ),
    }


def jvm_threads_cpu_per_message(
    before: dict[tuple[int, int], tuple[str, float]],
    after: dict[tuple[int, int], tuple[str, float]],
    messages: int,
) -> dict[str, float]:
    """Milliseconds of the JVM's CPU per message between two ``jvm_threads_cpu`` snapshots, by
    thread name with its digits dropped ("GC Thread#"), largest first. A thread that ended in
    between counts for nothing, so the sum can fall short of the JVM's row."""
    by_name: dict[str, float] = {}
    for key, (name, seconds) in after.items():
        spent = seconds - before.get(key, (name, 0.0))[1]
        if spent > 0:
            group = "".join(c for c in name if not c.isdigit())
            by_name[group] = by_name.get(group, 0.0) + spent
    if not messages:
        return {}
    return {
        name: round(1000 * seconds / messages, 4)
        for name, seconds in sorted(by_name.items(), key=lambda kv: -kv[1])
        if 1000 * seconds / messages >= 0.0005
    }


def sqs_calls(counted: dict[str, dict[str, int]], messages: int) -> dict[str, dict[str, float]]:
    """SQS requests by action over a window: per 1,000 messages, the messages or entries each
    carried on average, and how many carried none (an empty receive), per 1,000 messages."""
    out: dict[str, dict[str, float]] = {}
    for kind, n in sorted(counted["counts"].items()):
        if not kind.startswith("SQS ") or not n:
            continue
        items = counted.get("sqs_items", {}).get(kind, 0)
        empty = counted.get("sqs_empty", {}).get(kind, 0)
        out[kind[len("SQS ") :]] = {
            "requests": n,
            "per_1000_messages": round(1000 * n / messages, 1) if messages else 0.0,
            "items_per_request": round(items / n, 2),
            "empty_per_1000_messages": round(1000 * empty / messages, 1) if messages else 0.0,
        }
    return out


def _wait(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.05)
