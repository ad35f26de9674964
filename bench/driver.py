"""``make bench-driver`` / ``python -m bench.driver``: the ceiling of one driver, without Spark.

The driver is this process. It builds ``SqsDataSource(options).streamReader(schema)`` and runs
the micro-batch loop the way Spark 4.2+ does (docs/design.md, /work/shared/PLATFORM.md), through
the reader's public methods only, so that it measures any version of the acknowledgement
protocol unchanged::

    initialOffset
    repeat: latestOffset(start, limit)   # acknowledges every batch <= start
            commit(previous end)          # late, after the next offset is logged
            partitions(start, end)        # each partition pickled as Spark's runner does
            read(partition) in worker PROCESSES (a cloudpickled copy of the reader), rows consumed

against two servers in their own processes (``bench.driver_servers``): a stub SQS with a fixed
delay per call and no cost per message, and moto's S3 as the journal store, both counting
requests by whether the driver (this process) or a worker sent them. Only this process's CPU
is the driver's CPU (``time.process_time``: every thread here, the heartbeat and the delete
pools included; the workers and servers are other processes).

Each grid point runs in a fresh driver process, so peak RSS and CPU belong to that point alone.
Results: ``bench/results/driver.json`` and ``driver.png``; ``--baseline`` also writes
``driver-baseline.json``, the figure later versions are compared with.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
REGION = "us-east-1"
QUEUE_URL_PATH = "/123456789012/bench-driver"
BUCKET = "bench-driver"

FULL_RECEIVERS = (16, 100, 500)
FULL_MESSAGES = (10_000, 60_000, 120_000)
FULL_DROPS = (0, 100_000)


@dataclass(frozen=True)
class Point:
    receivers: int
    messages: int  # per batch
    drop_ids: int  # ids seeded into the dedupe record
    journal: str = "s3"  # "s3" (moto, requests counted) or "local"

    def label(self) -> str:
        return f"R={self.receivers} M={self.messages} D={self.drop_ids} {self.journal}"


@dataclass(frozen=True)
class Settings:
    batches: int = 2  # measured batches, after the warm-up batches
    # Unmeasured batches first. One warms the caches; a second lets a pipeline whose batches
    # outlive a third of visibilityTimeout reach its steady state (from the batch after the
    # first slow one, receivers extend their own messages: executor/extension.py).
    warmup: int = 1
    delay: float = 0.005  # seconds per SQS call
    body_bytes: int = 200
    processes: int = 4  # worker processes
    threads: int = 8  # receivers run at once in each worker process
    visibility_timeout: int = 120  # heartbeat every visibility/5 (the source's default)
    # Acknowledge the last batch with one more latestOffset after the window (checks that every
    # message is deleted; costs a whole acknowledgement of wall time, so the grid skips it).
    final_ack: bool = True


# -- servers ------------------------------------------------------------------------------------


class _Server:
    """A ``bench.driver_servers`` child; this process is its parent, hence 'the driver'."""

    def __init__(self, *args: str) -> None:
        from bench.servers import Child

        self.child = Child([sys.executable, "-m", "bench.driver_servers", *args], "ENDPOINT")
        self.endpoint = self.child.value

    def call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        with urllib.request.urlopen(self.endpoint + path, data=data, timeout=30) as r:
            return json.loads(r.read() or b"{}")

    def counts(self) -> dict[str, int]:
        return self.call("/__counts")["counts"]

    def stop(self) -> None:
        self.child.stop()


@contextmanager
def servers(settings: Settings, journal: str) -> Iterator[tuple[_Server, _Server | None]]:
    sqs = _Server("sqs", "--delay", str(settings.delay), "--body-bytes", str(settings.body_bytes))
    s3 = None
    try:
        if journal == "s3":
            s3 = _Server("s3")
        yield sqs, s3
    finally:
        sqs.stop()
        if s3 is not None:
            s3.stop()


def s3_journal_location(endpoint: str, prefix: str) -> str:
    """The one place that wires the journal to the S3 endpoint. Today: pyarrow's
    ``endpoint_override``/``scheme`` parameters of ``journalLocation`` (spark_sqs.journal
    ``_open_s3``). If the journal moves to boto3 with the endpoint in an option, change this
    (and ``s3_journal_options``) only."""
    host_port = endpoint.split("://", 1)[1]
    return f"s3://{BUCKET}/{prefix}?endpoint_override={host_port}&scheme=http"


def s3_journal_options(endpoint: str) -> dict[str, str]:
    """Extra source options the S3 journal needs (none today; see ``s3_journal_location``)."""
    return {}


def _create_bucket(endpoint: str) -> None:
    import boto3

    s3 = boto3.client(
        "s3",
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    try:
        s3.create_bucket(Bucket=BUCKET)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass


def seed_drop_set(options: dict[str, str], count: int, expires_in: float = 86400.0) -> None:
    """Size the drop set: ``count`` ids in the journal's dedupe record (ids whose deletion may
    not have taken effect), which a driver reads when it starts and hands to every receiver.
    The one place that depends on the journal's layout."""
    if count <= 0:
        return
    from spark_sqs.journal import Journal
    from spark_sqs.options import SqsOptions

    parsed = SqsOptions.parse(options)
    ids = [f"seeded00-0000-4000-8000-{n:012d}" for n in range(count)]
    Journal(parsed.journal_location, parsed).dedupe.write(
        0, ids, now=time.monotonic(), window=expires_in, wall=time.time()
    )


# -- workers (Spark's executors) ----------------------------------------------------------------

_READER: Any = None


def _init_worker(reader_bytes: bytes) -> None:
    global _READER
    from pyspark.serializers import CloudPickleSerializer

    _READER = CloudPickleSerializer().loads(reader_bytes)


def _warm(_: int) -> int:
    import spark_sqs.executor.receiver  # noqa: F401 - imports before the clock runs

    return os.getpid()


def _read_one(spool: str, span: tuple[int, int]) -> int:
    from pyspark.serializers import CPickleSerializer

    with open(spool, "rb") as f:
        f.seek(span[0])
        partition = CPickleSerializer().loads(f.read(span[1]))
    rows = 0
    for item in _READER.read(partition):
        rows += getattr(item, "num_rows", 1)
    return rows


def _run_chunk(spool: str, spans: list[tuple[int, int]], threads: int) -> list[int]:
    with ThreadPoolExecutor(max(1, min(threads, len(spans)))) as pool:
        return list(pool.map(lambda s: _read_one(spool, s), spans))


# -- the driver loop ----------------------------------------------------------------------------


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    keys = set(after) | set(before)
    out = {k: after.get(k, 0) - before.get(k, 0) for k in keys}
    return {k: v for k, v in sorted(out.items()) if v}


def _sum(counts: dict[str, int], who: str, kinds: tuple[str, ...] | None = None) -> int:
    total = 0
    for key, value in counts.items():
        parts = key.split(":")
        if len(parts) != 2 or parts[0] != who:
            continue
        if kinds is None or parts[1] in kinds:
            total += value
    return total


class _Clock:
    """Driver CPU and wall time of one named phase, accumulated."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        c, w = time.process_time(), time.perf_counter()
        try:
            yield
        finally:
            self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - c
            self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - w


def _rss_bytes() -> int:
    """This process's resident set size now; the stdlib only, since CI runs this as a test."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        # No /proc (macOS): the peak is the closest the stdlib offers; ru_maxrss is in bytes there.
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run_point(point: Point, settings: Settings) -> dict[str, Any]:
    """One grid point, with this process as the driver. Returns its figures."""
    from pyspark.serializers import CloudPickleSerializer, CPickleSerializer

    from spark_sqs import SqsDataSource

    total_batches = settings.batches + settings.warmup
    with (
        servers(settings, point.journal) as (sqs, s3),
        tempfile.TemporaryDirectory(prefix="bench-driver-") as tmp,
    ):
        sqs.call("/__reset", {"backlog": point.messages * total_batches})
        options = {
            "queueUrl": sqs.endpoint + QUEUE_URL_PATH,
            "endpointUrl": sqs.endpoint,
            "region": REGION,
            "awsAccessKeyId": "bench",
            "awsSecretAccessKey": "bench",
            "numPartitions": str(point.receivers),
            "maxMessagesPerTrigger": str(point.messages),
            # Room for the committed batch (deleted by the next batch's receivers) and the
            # next one; a batch of 120,000 fills SQS's in-flight limit alone, so every other
            # batch only acknowledges the one before it.
            "maxInFlightMessages": str(min(120_000, max(60_000, 2 * point.messages))),
            "visibilityTimeout": str(settings.visibility_timeout),
        }
        if s3 is not None:
            _create_bucket(s3.endpoint)
            options["journalLocation"] = s3_journal_location(s3.endpoint, uuid.uuid4().hex[:8])
            options.update(s3_journal_options(s3.endpoint))
        else:
            options["journalLocation"] = os.path.join(tmp, "journal")
        seed_drop_set(options, point.drop_ids)

        ctx = multiprocessing.get_context("spawn")
        clock = _Clock()
        source = SqsDataSource(options)
        reader = source.streamReader(source.schema())
        # Spark ships the reader to executors as a cloudpickle; read() runs on that copy.
        reader_bytes = CloudPickleSerializer().dumps(reader)
        pickler = CPickleSerializer()
        spool = os.path.join(tmp, "partitions.bin")
        pool = ctx.Pool(settings.processes, initializer=_init_worker, initargs=(reader_bytes,))
        try:
            pool.map(_warm, range(settings.processes))

            def counts() -> dict[str, dict[str, int]]:
                out = {"sqs": sqs.counts()}
                if s3 is not None:
                    out["s3"] = s3.counts()
                return out

            with clock.phase("start"):
                limit = (
                    reader.getDefaultReadLimit() if hasattr(reader, "getDefaultReadLimit") else None
                )
                start = reader.initialOffset()
            batches: list[dict[str, Any]] = []
            prev_end = None
            measure_from: dict[str, Any] = {}
            for index in range(total_batches):
                if index == settings.warmup:
                    measure_from = {
                        "cpu": time.process_time(),
                        "wall": time.perf_counter(),
                        "clock_cpu": dict(clock.cpu),
                        "clock_wall": dict(clock.wall),
                    }
                record: dict[str, Any] = {"index": index, "phases": {}}
                before = counts()
                with clock.phase("latestOffset"):
                    end = reader.latestOffset(start, limit)
                if end == start:
                    raise RuntimeError(f"{point.label()}: no batch started at {index}")
                if prev_end is not None:
                    with clock.phase("commit"):
                        reader.commit(prev_end)
                after_offsets = counts()
                with clock.phase("partitions"):
                    parts = reader.partitions(start, end)
                sizes: list[int] = []
                spans: list[tuple[int, int]] = []
                with clock.phase("pickle"), open(spool, "wb") as f:
                    # As python_streaming_source_runner: every partition pickled before a task
                    # runs (spooled to disk here, as the JVM holds them there).
                    for partition in parts:
                        data = pickler.dumps(partition)
                        spans.append((f.tell(), len(data)))
                        sizes.append(len(data))
                        f.write(data)
                rss_planned = _rss_bytes()
                after_plan = counts()
                chunk = max(1, settings.threads)
                chunks = [spans[i : i + chunk] for i in range(0, len(spans), chunk)]
                with clock.phase("read (workers; driver: heartbeat)"):
                    rows = sum(
                        sum(r)
                        for r in pool.starmap(
                            _run_chunk, [(spool, c, settings.threads) for c in chunks]
                        )
                    )
                after_read = counts()
                record.update(
                    rows=rows,
                    partitions=len(parts),
                    pickled_bytes=sizes,
                    rss_after_plan=rss_planned,
                    requests={
                        "latestOffset+commit": _nested_delta(after_offsets, before),
                        "partitions": _nested_delta(after_plan, after_offsets),
                        "read": _nested_delta(after_read, after_plan),
                    },
                )
                batches.append(record)
                prev_end, start = end, end
            measured_cpu = time.process_time() - measure_from["cpu"]
            measured_wall = time.perf_counter() - measure_from["wall"]
            phase_cpu = _dict_delta(clock.cpu, measure_from["clock_cpu"])
            phase_wall = _dict_delta(clock.wall, measure_from["clock_wall"])
            # Acknowledge the last batch (not measured), as the next run's first latestOffset
            # or the next trigger would.
            final_requests: dict[str, Any] = {}
            final = None
            if settings.final_ack:
                before_final = counts()
                with clock.phase("final latestOffset"):
                    final = reader.latestOffset(start, limit)
                final_requests = _nested_delta(counts(), before_final)
            reader.stop()
            totals = counts()
            handed_out = sqs.call("/__counts")["handedOut"]
        finally:
            pool.terminate()
            pool.join()
    return _summarise(
        point,
        settings,
        batches,
        measured_cpu=measured_cpu,
        measured_wall=measured_wall,
        phase_cpu=phase_cpu,
        phase_wall=phase_wall,
        final_requests=final_requests,
        final_offset_moved=None if final is None else final != start,
        totals=totals,
        handed_out=handed_out,
        peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    )


def _dict_delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 4) for k, v in after.items()}


def _nested_delta(
    after: dict[str, dict[str, int]], before: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    return {name: _delta(after[name], before.get(name, {})) for name in after}


def _summarise(
    point: Point, settings: Settings, batches: list[dict[str, Any]], **m: Any
) -> dict[str, Any]:
    measured = batches[settings.warmup :]
    n = len(measured)
    # The measured window holds B batch cycles (latestOffset, commit, partitions, read): one
    # batch's messages acknowledged per cycle. Counted as the B batches before the last, which
    # the window's latestOffset calls acknowledge when the driver deletes (with executor-side
    # acknowledgement they settle the batches before those: as many messages, steady state).
    # Counting every batch before the last overstated it with more than one warm-up batch.
    window = batches[max(0, settings.warmup - 1) : settings.warmup + n - 1]
    acknowledged = sum(b["rows"] for b in window)
    entries_acked = sum(b["partitions"] for b in window)

    def per_batch(service: str, who: str, kinds: tuple[str, ...] | None = None) -> float:
        total = 0
        for b in measured:
            for phase in b["requests"].values():
                total += _sum(phase.get(service, {}), who, kinds)
        return total / n if n else 0.0

    def in_phase(phase: str, service: str, who: str, kinds: tuple[str, ...]) -> int:
        return sum(_sum(b["requests"][phase].get(service, {}), who, kinds) for b in measured)

    sizes = [s for b in measured for s in b["pickled_bytes"]]
    cpu = m["measured_cpu"]
    cpu_per_10k = cpu / acknowledged * 10_000 if acknowledged else None
    reads = ("GET", "HEAD")
    journal = point.journal == "s3"
    # A second projection, paced by batches: the driver's CPU in the calls Spark makes once per
    # batch (latestOffset, commit, partitions, pickling) costs per batch; its CPU while the
    # workers read (the heartbeat, lease renewals) costs per second of wall time, a fraction
    # of a core whatever the rate. The bench's workers share 2 cores, so its batches last
    # minutes and that per-second work is charged to few messages by the first projection;
    # at the ceiling a batch lasts M / rate seconds. Ceiling = M * (1 - H) / C_batch.
    read_phase = "read (workers; driver: heartbeat)"
    batch_cpu = sum(v for k, v in m["phase_cpu"].items() if k != read_phase) / n if n else 0.0
    read_wall = m["phase_wall"].get(read_phase, 0.0)
    background = m["phase_cpu"].get(read_phase, 0.0) / read_wall if read_wall else 0.0
    # M: messages acknowledged per measured batch, not the point's batch size: when a batch
    # fills maxInFlightMessages, the next one only acknowledges it (no messages of its own).
    per_batch_msgs = acknowledged / n if n else 0.0
    paced = (
        round(per_batch_msgs * (1.0 - background) / batch_cpu)
        if batch_cpu > 0 and background < 1.0 and per_batch_msgs
        else None
    )
    result: dict[str, Any] = {
        "point": asdict(point),
        "settings": asdict(settings),
        "measured_batches": n,
        "acknowledged_messages": acknowledged,
        "rows_read": sum(b["rows"] for b in batches),
        "messages_handed_out": m["handed_out"],
        "driver_cpu_seconds": round(cpu, 4),
        "driver_wall_seconds": round(m["measured_wall"], 4),
        "driver_cpu_per_10k_messages": None if cpu_per_10k is None else round(cpu_per_10k, 5),
        "projected_ceiling_msgs_per_s": round(10_000 / cpu_per_10k) if cpu_per_10k else None,
        "driver_cpu_per_batch_outside_read": round(batch_cpu, 4),
        "driver_background_cpu_per_wall_s": round(background, 5),
        "projected_ceiling_batch_paced_msgs_per_s": paced,
        "driver_cpu_by_phase": m["phase_cpu"],
        "wall_by_phase": m["phase_wall"],
        "sqs_calls_per_batch": {
            "driver": per_batch("sqs", "driver"),
            "workers": per_batch("sqs", "worker"),
        },
        "sqs_calls_per_batch_by_op": _ops_per_batch(measured, "sqs"),
        "pickled_bytes_per_partition": {
            "mean": round(sum(sizes) / len(sizes)) if sizes else 0,
            "max": max(sizes, default=0),
        },
        "pickled_bytes_per_batch": round(sum(sizes) / n) if n else 0,
        "driver_rss_peak_bytes": m["peak_rss"],
        "driver_rss_after_plan_bytes": max(b["rss_after_plan"] for b in batches),
        "final_requests": m["final_requests"],
        "final_offset_moved": m["final_offset_moved"],
        "totals": m["totals"],
        "batches": batches,
    }
    if journal:
        result["journal_requests_per_batch"] = {
            "driver": per_batch("s3", "driver"),
            "workers": per_batch("s3", "worker"),
        }
        result["journal_requests_per_batch_by_kind"] = _ops_per_batch(measured, "s3")
        driver_reads = sum(
            in_phase(p, "s3", "driver", reads)
            for p in ("latestOffset+commit", "partitions", "read")
        )
        ack_reads = in_phase("latestOffset+commit", "s3", "driver", reads)
        result["journal_reads_per_entry"] = {
            # Driver GET+HEAD per journal entry acknowledged in the window (heartbeat included).
            "driver_total": round(driver_reads / entries_acked, 3) if entries_acked else None,
            # Only during latestOffset+commit, where today's acknowledgement reads every entry.
            "driver_acknowledgement": round(ack_reads / entries_acked, 3)
            if entries_acked
            else None,
        }
    return result


def _ops_per_batch(measured: list[dict[str, Any]], service: str) -> dict[str, float]:
    total: dict[str, int] = {}
    for b in measured:
        for phase in b["requests"].values():
            for key, value in phase.get(service, {}).items():
                total[key] = total.get(key, 0) + value
    n = len(measured) or 1
    return {k: round(v / n, 2) for k, v in sorted(total.items())}


# -- the grid -----------------------------------------------------------------------------------


def grid(quick: bool, journals: tuple[str, ...]) -> list[Point]:
    if quick:
        points = [
            Point(16, 2_000, 0),
            Point(16, 2_000, 20_000),
            Point(50, 5_000, 0),
            Point(16, 2_000, 0, "local"),
        ]
        return [p for p in points if p.journal in journals]
    return [
        Point(r, m, d, j)
        for j in journals
        for d in FULL_DROPS
        for r in FULL_RECEIVERS
        for m in FULL_MESSAGES
    ]


def _run_in_child(point: Point, settings: Settings, timeout: float) -> dict[str, Any]:
    """One point in a fresh driver process (clean peak RSS, no state of earlier points)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [
        sys.executable,
        "-m",
        "bench.driver",
        "--one",
        json.dumps({"point": asdict(point), "settings": asdict(settings)}),
        "--one-out",
        out,
    ]
    began = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, timeout=timeout, capture_output=True, text=True)
        if proc.returncode != 0:
            return {"point": asdict(point), "error": proc.stderr[-2000:]}
        result = json.loads(Path(out).read_text())
    except subprocess.TimeoutExpired:
        return {"point": asdict(point), "error": f"timed out after {timeout:.0f}s"}
    finally:
        Path(out).unlink(missing_ok=True)
    result["point_seconds"] = round(time.perf_counter() - began, 1)
    return result


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"


def summary_lines(results: list[dict[str, Any]], baseline: dict[str, Any] | None) -> list[str]:
    base = {}
    if baseline:
        for r in baseline.get("points", []):
            if "error" not in r:
                base[json.dumps(r["point"], sort_keys=True)] = r
    lines = [
        "receivers  msgs/batch  drop-set  journal | driver CPU s/10k  ceiling msg/s | "
        "SQS calls/batch (driver, workers) | journal req/batch (driver, workers) | "
        "driver reads/entry | pickled B/partition | driver RSS MiB | "
        "CPU s/batch (no read), heartbeat CPU/s, paced ceiling msg/s"
        + (" | CPU vs baseline" if base else "")
    ]
    for r in results:
        p = r["point"]
        head = f"{p['receivers']:>9}  {p['messages']:>10}  {p['drop_ids']:>8}  {p['journal']:>7}"
        if "error" in r:
            lines.append(f"{head} | FAILED: {r['error'].strip().splitlines()[-1][:120]}")
            continue
        sqs = r["sqs_calls_per_batch"]
        jr = r.get("journal_requests_per_batch") or {}
        rpe = (r.get("journal_reads_per_entry") or {}).get("driver_total")
        line = (
            f"{head} | {r['driver_cpu_per_10k_messages']:>16.3f}  "
            f"{r['projected_ceiling_msgs_per_s'] or 0:>13,} | "
            f"{sqs['driver']:>9.0f}, {sqs['workers']:>9.0f} | "
            f"{jr.get('driver', 0):>9.0f}, {jr.get('workers', 0):>9.0f} | "
            f"{rpe if rpe is not None else '-':>6} | "
            f"{r['pickled_bytes_per_partition']['mean']:>12,} | "
            f"{r['driver_rss_peak_bytes'] / 2**20:>8,.0f}"
        )
        if r.get("projected_ceiling_batch_paced_msgs_per_s"):
            line += (
                f" | {r['driver_cpu_per_batch_outside_read']:>6.3f}, "
                f"{r['driver_background_cpu_per_wall_s']:.4f}, "
                f"{r['projected_ceiling_batch_paced_msgs_per_s']:>10,}"
            )
        if r.get("measured_at_commit"):
            line += f" | measured at {r['measured_at_commit']}"
        b = base.get(json.dumps(p, sort_keys=True))
        if b and b.get("driver_cpu_per_10k_messages"):
            ratio = b["driver_cpu_per_10k_messages"] / r["driver_cpu_per_10k_messages"]
            line += f" | {ratio:.1f}x lower"
        lines.append(line)
    grown = [
        r
        for r in results
        if "error" not in r
        and r["point"]["drop_ids"] == 0
        and r["pickled_bytes_per_partition"]["mean"] > 10_000
    ]
    if grown:
        lines.append(
            "Partitions of "
            + ", ".join(f"R={r['point']['receivers']} M={r['point']['messages']}" for r in grown)
            + " carry ids although none were seeded: the source recorded acknowledgements as "
            "uncertain (an acknowledgement of 100-160 s reached handles near expiry: one more "
            "dedupe-record PUT) and drops those ids in later batches."
        )
    lines.append("")
    lines.append("Projected ceiling of one driver (10,000 / driver CPU s per 10k msgs):")
    ok = [r for r in results if "error" not in r and r.get("driver_cpu_per_10k_messages")]
    lines += _ceilings_by_receivers(ok, "projected_ceiling_msgs_per_s", with_journal=True)
    paced = [r for r in ok if r.get("projected_ceiling_batch_paced_msgs_per_s")]
    if paced:
        lines.append("")
        lines.append(
            "Paced by batches (M x (1 - heartbeat CPU per wall second) / driver CPU per batch "
            "outside the read phase; M the messages acknowledged per measured batch):"
        )
        lines += _ceilings_by_receivers(
            paced, "projected_ceiling_batch_paced_msgs_per_s", with_journal=False
        )
    return lines


def _ceilings_by_receivers(
    rows: list[dict[str, Any]], key: str, *, with_journal: bool
) -> list[str]:
    """One line per receiver count: the ceiling ``key`` of each of its points."""
    lines = []
    for receivers in sorted({r["point"]["receivers"] for r in rows}):
        parts = ", ".join(
            f"{r[key]:,} msg/s (M={r['point']['messages']:,}, drop {r['point']['drop_ids']:,}"
            + (f", {r['point']['journal']})" if with_journal else ")")
            for r in rows
            if r["point"]["receivers"] == receivers
        )
        lines.append(f"  {receivers} receivers: {parts}")
    return lines


def window_projection(results: list[dict[str, Any]], rate: float, window: float) -> dict[str, Any]:
    """The drop set a duplicate window holds at ``rate`` msg/s (too big to run): its pickled
    size per partition and per batch, extrapolated linearly from the measured drop-set sizes."""
    ids = int(rate * window)
    out: dict[str, Any] = {"rate_msgs_per_s": rate, "window_s": window, "ids": ids, "points": []}
    ok = [r for r in results if "error" not in r]
    by_key: dict[tuple[int, int, str], dict[int, dict[str, Any]]] = {}
    for r in ok:
        p = r["point"]
        by_key.setdefault((p["receivers"], p["messages"], p["journal"]), {})[p["drop_ids"]] = r
    for (receivers, messages, journal), by_drop in sorted(by_key.items()):
        if len(by_drop) < 2:
            continue
        lo, hi = min(by_drop), max(by_drop)
        a, b = by_drop[lo], by_drop[hi]
        bytes_per_id = (
            b["pickled_bytes_per_partition"]["mean"] - a["pickled_bytes_per_partition"]["mean"]
        ) / (hi - lo)
        # From the phases whose work grows with the drop set (building it in partitions(),
        # pickling it into every partition): whole-batch CPU differences are too noisy.

        def drop_cpu(r: dict[str, Any]) -> float:
            phases = r["driver_cpu_by_phase"]
            return (phases.get("partitions", 0.0) + phases.get("pickle", 0.0)) / r[
                "measured_batches"
            ]

        cpu_per_id = (drop_cpu(b) - drop_cpu(a)) / (hi - lo)
        per_partition = a["pickled_bytes_per_partition"]["mean"] + bytes_per_id * (ids - lo)
        out["points"].append(
            {
                "receivers": receivers,
                "messages": messages,
                "journal": journal,
                "pickled_bytes_per_id": round(bytes_per_id, 2),
                "pickled_bytes_per_partition": round(per_partition),
                "pickled_bytes_per_batch": round(per_partition * receivers),
                "driver_cpu_seconds_per_batch_from_drop_set": round(cpu_per_id * ids, 1),
            }
        )
    return out


def plot(results: list[dict[str, Any]], path: Path) -> bool:
    from bench.report import _pyplot, _save

    plt = _pyplot()
    ok = [r for r in results if "error" not in r and r.get("driver_cpu_per_10k_messages")]
    if plt is None or not ok:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    series: dict[tuple[int, int, str], list[dict[str, Any]]] = {}
    for r in ok:
        p = r["point"]
        series.setdefault((p["messages"], p["drop_ids"], p["journal"]), []).append(r)
    for (messages, drop, journal), rows in sorted(series.items()):
        rows.sort(key=lambda r: r["point"]["receivers"])
        ax1.plot(
            [r["point"]["receivers"] for r in rows],
            [r["driver_cpu_per_10k_messages"] for r in rows],
            marker="o",
            linestyle="-" if drop == 0 else "--",
            label=f"{messages:,}/batch, drop {drop:,}, {journal}",
        )
    ax1.set_xscale("log")
    ticks = sorted({r["point"]["receivers"] for r in ok})
    ax1.set_xticks(ticks, [str(t) for t in ticks])
    ax1.minorticks_off()
    ax1.set_ylim(bottom=0)
    ax1.set_xlabel("receivers per batch")
    ax1.set_ylabel("driver CPU s per 10,000 acknowledged msgs")
    ax1.set_title("Driver CPU (ceiling = 10,000 / y msg/s)")
    ax1.legend(fontsize=7)
    by_drop: dict[tuple[int, int, str], list[dict[str, Any]]] = {}
    for r in ok:
        p = r["point"]
        by_drop.setdefault((p["receivers"], p["messages"], p["journal"]), []).append(r)
    for (receivers, messages, journal), rows in sorted(by_drop.items()):
        rows.sort(key=lambda r: r["point"]["drop_ids"])
        ax2.plot(
            [r["point"]["drop_ids"] for r in rows],
            [r["pickled_bytes_per_partition"]["mean"] for r in rows],
            marker="o",
            label=f"{receivers} receivers, {messages:,}/batch, {journal}",
        )
    ax2.set_xlabel("drop-set size (ids)")
    ax2.set_ylabel("pickled bytes per partition")
    ax2.set_title("Partition size vs drop set")
    ax2.legend(fontsize=7)
    _save(plt, fig, path)
    return True


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.driver", description=__doc__)
    p.add_argument("--quick", action="store_true", help="a few small points (under 3 minutes)")
    p.add_argument("--out", default=str(RESULTS), help="results directory")
    p.add_argument("--baseline", action="store_true", help="also write driver-baseline.json")
    p.add_argument(
        "--append", action="store_true", help="keep the points already in the results file"
    )
    p.add_argument("--journals", default="s3", help="comma list: s3, local")
    p.add_argument("--receivers", default=None, help="override the grid's receivers (comma list)")
    p.add_argument("--messages", default=None, help="override messages per batch (comma list)")
    p.add_argument("--drops", default=None, help="override drop-set sizes (comma list)")
    p.add_argument("--batches", type=int, default=Settings.batches, help="measured batches")
    p.add_argument("--warmup", type=int, default=Settings.warmup, help="unmeasured batches first")
    p.add_argument(
        "--final-ack", action="store_true", help="acknowledge the last batch too (slower)"
    )
    p.add_argument(
        "--points",
        default=None,
        help="explicit points instead of the grid: R/M/D[/journal] separated by commas",
    )
    p.add_argument("--delay-ms", type=float, default=5.0, help="stub SQS: ms per call")
    p.add_argument(
        "--visibility-timeout",
        type=int,
        default=Settings.visibility_timeout,
        help="the source's visibilityTimeout: above the emulated batches' duration to measure "
        "the driver's cost per batch without the slow-batch extensions this machine forces",
    )
    p.add_argument("--processes", type=int, default=Settings.processes)
    p.add_argument("--threads", type=int, default=Settings.threads)
    p.add_argument("--point-timeout", type=float, default=900.0)
    p.add_argument("--rate", type=float, default=50_000.0, help="msg/s for the window projection")
    p.add_argument("--window", type=float, default=300.0, help="duplicate window, seconds")
    p.add_argument(
        "--report-only", default=None, help="print and plot a results JSON again, run nothing"
    )
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    p.add_argument("--one-out", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.report_only:
        source = Path(args.report_only)
        doc = json.loads(source.read_text())
        doc["source_file"] = source.name
        doc["window_projection"] = window_projection(doc["points"], args.rate, args.window)
        baseline_file = source.parent / "driver-baseline.json"
        compare = None
        if source.name != baseline_file.name and baseline_file.exists():
            compare = json.loads(baseline_file.read_text())
        report(doc, compare, source.parent)
        return 0
    if args.one:
        spec = json.loads(args.one)
        result = run_point(Point(**spec["point"]), Settings(**spec["settings"]))
        Path(args.one_out).write_text(json.dumps(result))
        return 0
    journals = tuple(j.strip() for j in args.journals.split(",") if j.strip())
    points = grid(args.quick, journals)

    def override(values: str | None) -> list[int] | None:
        return [int(v) for v in values.split(",")] if values else None

    rs, ms, ds = override(args.receivers), override(args.messages), override(args.drops)
    if rs or ms or ds:
        points = [
            Point(r, m, d, j)
            for j in journals
            for d in (ds or FULL_DROPS)
            for r in (rs or FULL_RECEIVERS)
            for m in (ms or FULL_MESSAGES)
        ]
    if args.points:
        points = []
        for spec in args.points.split(","):
            fields = spec.strip().split("/")
            journal = fields[3] if len(fields) > 3 else journals[0]
            points.append(Point(int(fields[0]), int(fields[1]), int(fields[2]), journal))
    settings = Settings(
        final_ack=args.final_ack,
        batches=args.batches,
        warmup=args.warmup,
        delay=args.delay_ms / 1000.0,
        visibility_timeout=args.visibility_timeout,
        processes=args.processes,
        threads=args.threads,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    baseline_path = out / "driver-baseline.json"
    baseline = json.loads(baseline_path.read_text()) if baseline_path.exists() else None
    began = time.perf_counter()
    results: list[dict[str, Any]] = []
    target = baseline_path if args.baseline else out / "driver.json"
    if args.append and target.exists():
        # Continue a run cut short: keep its measured points, run only the missing ones.
        results = [r for r in json.loads(target.read_text())["points"] if "error" not in r]
        done = {json.dumps(r["point"], sort_keys=True) for r in results}
        points = [p for p in points if json.dumps(asdict(p), sort_keys=True) not in done]

    def document() -> dict[str, Any]:
        return {
            "generated_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "spark_sqs_commit": _commit(),
            "machine": {
                "cpu_count": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
                "load_average_at_end": os.getloadavg(),
            },
            "quick": args.quick,
            "settings": asdict(settings),
            "run_seconds": round(time.perf_counter() - began, 1),
            "window_projection": window_projection(results, args.rate, args.window),
            "points": results,
            "source_file": "driver-baseline.json" if args.baseline else "driver.json",
        }

    for point in points:
        print(f"[bench-driver] {point.label()} ...", flush=True)
        result = _run_in_child(point, settings, args.point_timeout)
        if "error" in result:
            print(f"[bench-driver]   FAILED: {result['error'][-500:]}", flush=True)
        else:
            print(
                f"[bench-driver]   driver CPU {result['driver_cpu_per_10k_messages']:.3f} s/10k "
                f"msgs, {result['point_seconds']}s",
                flush=True,
            )
        results.append(result)
        # Written after every point: a run cut short still leaves what it measured.
        doc = document()
        (out / "driver.json").write_text(json.dumps(doc, indent=1))
        if args.baseline:
            baseline_path.write_text(json.dumps(doc, indent=1))
    doc = document()
    report(doc, None if args.baseline else baseline, out)
    return 0 if all("error" not in r for r in results) else 1


_METHOD = """\
Generated by `make bench-driver` (`python -m bench.driver`) from `{name}`; spark_sqs commit
{commit}, {generated_at}. See `bench/driver.py` for the method: the reader's driver calls
(`latestOffset(start, limit)` acknowledging, `commit` late, `partitions`, each partition pickled
as Spark's runner does) in one process, `read` in {processes} worker processes, against a stub
SQS ({delay_ms:g} ms per call, no cost per message) and moto's S3 as the journal, both counting
requests by sender. Driver CPU = the driver process's CPU over {batches} measured batch(es)
after {warmup} warm-up batch(es), every thread included (the delete pool, the heartbeat every
visibilityTimeout/5 = {visibility:g}/5 = {heartbeat:g} s, the S3 client's threads); per 10,000
messages acknowledged in that window. Ceiling = 10,000 / that figure. Paced ceiling = M x (1 -
H) / C: M the messages acknowledged per measured batch (half a full batch when every other batch
only acknowledges, at 120,000 a batch), C the driver's CPU per batch in the calls Spark makes
once a batch (latestOffset, commit, partitions, pickling), H its CPU per wall second while the
workers read (the heartbeat, lease renewals: a share of a core whatever the rate, which the
first figure charges to the few batches these minutes-long batches make). The machine ({cpus}
cores) was shared (load average {load}): CPU seconds are less sensitive to that than wall time,
but compare figures measured in the same conditions.
"""


def report(doc: dict[str, Any], baseline: dict[str, Any] | None, out: Path) -> list[str]:
    """Print the summary and write ``<name>.png`` and ``<name>.md`` next to ``<name>.json``."""
    results = doc["points"]
    stem = Path(doc.get("source_file", "driver.json")).stem
    plot(results, out / f"{stem}.png")
    lines = summary_lines(results, baseline)
    proj = doc["window_projection"]
    lines.append("")
    lines.append(
        f"A drop set of {proj['ids']:,} ids (what {proj['window_s']:.0f} s at "
        f"{proj['rate_msgs_per_s']:,.0f} msg/s holds; the duplicate window itself is no drop "
        "set: executors keep it, see window.md), not run, extrapolated from the measured ones:"
    )
    for p in proj["points"]:
        lines.append(
            f"  {p['receivers']} receivers, {p['messages']:,}/batch: "
            f"{p['pickled_bytes_per_partition'] / 2**20:,.0f} MiB per partition, "
            f"{p['pickled_bytes_per_batch'] / 2**30:,.1f} GiB per batch, "
            f"+{p['driver_cpu_seconds_per_batch_from_drop_set']:,.1f} driver CPU s per batch "
            "(planning and pickling)"
        )
    print("\n".join(lines))
    settings = doc["settings"]
    method = _METHOD.format(
        name=doc.get("source_file", "driver.json"),
        commit=doc["spark_sqs_commit"],
        generated_at=doc["generated_at"],
        processes=settings["processes"],
        delay_ms=settings["delay"] * 1000,
        batches=settings["batches"],
        visibility=settings["visibility_timeout"],
        heartbeat=settings["visibility_timeout"] / 5,
        warmup=settings.get("warmup", 1),
        cpus=doc["machine"]["cpu_count"],
        load=", ".join(f"{x:.1f}" for x in doc["machine"]["load_average_at_end"]),
    )
    notes = "".join(f"\n{n}\n" for n in doc.get("notes", ()))
    md = out / f"{stem}.md"
    md.write_text(
        "# Driver ceiling without Spark (issue 14)\n\n"
        + method
        + notes
        + f"\n![driver]({stem}.png)\n\n```\n"
        + "\n".join(lines)
        + "\n```\n"
    )
    print(f"\nwrote {out / f'{stem}.png'} and {md}")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
