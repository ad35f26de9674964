"""SQS's in-flight limit as a throughput bound, measured per acknowledgement mode through Spark.

SQS keeps about 120,000 messages in flight (received, not yet deleted) per queue. A consumer
that holds each message for ``s`` seconds from receive to delete has ``rate * s`` messages in
flight, so its rate can never exceed ``120,000 / s`` (Little's law), whatever the driver or the
cluster does. This benchmark measures ``s`` for each acknowledgement mode of the source:

- the default (``deleteOnCommit``): the receivers of batch N+1 delete batch N after Spark has
  committed N; the driver deletes the last batch when no next batch comes. ``s`` is about two
  batch durations, so it grows with ``maxMessagesPerTrigger``;
- ``deleteAfterJournal=true``: each receiver deletes what one receive call returned as soon as
  that part is journaled, inside the task.

How: moto runs as a threaded HTTP server in this process (Spark's executors are other
processes that reach it over 127.0.0.1), and moto's SQS model is patched here, server side, to
stamp each message when a receive first hands it out and when a delete removes it (a delete
with a stale handle removes nothing and is not counted). Each run pre-fills a fresh queue with
a backlog, runs ``spark.readStream.format("sqs")`` into a ``noop`` sink until every message is
deleted, and takes the batch durations from Spark's progress reports. Runs on: the driver
process of the benchmark only (not in the wheel).

``python -m bench.inflight [--sizes 250,1000] [--batches 6] [--receivers 4] [--quick]`` writes
``bench/results/inflight.json`` and ``inflight.md``. Times are reported, never asserted.
"""

from __future__ import annotations

import argparse
import bisect
import json
import logging
import math
import os
import platform
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.stats import batches_from_progress, median, percentile

logger = logging.getLogger("bench.inflight")
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

IN_FLIGHT_LIMIT = 120_000  # SQS: about this many in-flight messages per queue


# -- pure helpers (unit-tested) -----------------------------------------------------------------


def rate_bound(seconds: float, limit: int = IN_FLIGHT_LIMIT) -> float:
    """The highest steady rate (msg/s) at which ``limit`` in-flight messages suffice when each
    is held ``seconds`` from receive to delete. Infinite for no hold, NaN for no measurement."""
    if seconds != seconds:  # NaN: nothing was measured
        return float("nan")
    if seconds <= 0:
        return float("inf")
    return limit / seconds


def holds_by_phase(
    received: dict[str, float], deleted: dict[str, float], last_batch_start: float
) -> tuple[list[float], list[float]]:
    """Seconds from first receive to delete of every message stamped both ways: those received
    before ``last_batch_start`` (deleted by a next batch's receivers in the default mode), and
    those of the last batch (which no next batch follows: the driver deletes them)."""
    steady: list[float] = []
    last: list[float] = []
    for message, at in deleted.items():
        if message in received:
            first = received[message]
            (steady if first < last_batch_start else last).append(at - first)
    return steady, last


def holds_per_batch(
    received: dict[str, float], deleted: dict[str, float], starts: list[float]
) -> list[list[float]]:
    """Seconds held by the messages of each batch, a message belonging to the last batch that
    started (``starts``, ascending) at or before its first receive."""
    out: list[list[float]] = [[] for _ in starts]
    for message, at in deleted.items():
        first = received.get(message)
        if first is None:
            continue
        index = bisect.bisect_right(starts, first) - 1
        if index >= 0:
            out[index].append(at - first)
    return out


def hold_summary(holds: list[float], limit: int = IN_FLIGHT_LIMIT) -> dict[str, Any]:
    """Messages, median, p90 and max seconds held, and the rate bounds at the median and p90."""
    mid, p90 = median(holds), percentile(holds, 90)
    return {
        "messages": len(holds),
        "median_s": mid,
        "p90_s": p90,
        "max_s": max(holds) if holds else float("nan"),
        "bound_median_msg_s": rate_bound(mid, limit),
        "bound_p90_msg_s": rate_bound(p90, limit),
    }


# -- the server-side clock ----------------------------------------------------------------------


class InFlightClock:
    """Patches moto's SQS model in this process: the wall time each message was first handed
    out by a receive, how often it was, and when a delete removed it. Keyed by MessageId."""

    def __init__(self) -> None:
        self.received: dict[str, float] = {}
        self.receives: dict[str, int] = {}
        self.deleted: dict[str, float] = {}
        self._guard = threading.Lock()

    def __enter__(self) -> InFlightClock:
        from moto.sqs.models import Message, Queue

        clock = self
        self._mark_received = mark_received = Message.mark_received
        self._delete_message = delete_message = Queue.delete_message

        def stamped_mark_received(message: Any, *args: Any, **kwargs: Any) -> None:
            mark_received(message, *args, **kwargs)
            now = time.time()
            with clock._guard:
                clock.received.setdefault(message.id, now)
                clock.receives[message.id] = clock.receives.get(message.id, 0) + 1

        def stamped_delete_message(queue: Any, receipt_handle: str) -> None:
            found = [m for m in queue._messages if m.receipt_handle == receipt_handle]
            delete_message(queue, receipt_handle)
            now = time.time()
            for message in found:
                if message in queue._messages:
                    continue  # a stale handle (devtools.local_sqs): nothing was deleted
                with clock._guard:
                    clock.deleted.setdefault(message.id, now)

        Message.mark_received = stamped_mark_received
        Queue.delete_message = stamped_delete_message
        return self

    def __exit__(self, *exc: object) -> None:
        from moto.sqs.models import Message, Queue

        Message.mark_received = self._mark_received
        Queue.delete_message = self._delete_message

    def deleted_of(self, ids: Iterable[str]) -> int:
        with self._guard:
            return sum(1 for m in ids if m in self.deleted)

    def snapshot(self, ids: Iterable[str]) -> tuple[dict[str, float], dict[str, float], int]:
        """Receive and delete stamps of ``ids``, and how many receives beyond the first."""
        wanted = set(ids)
        with self._guard:
            received = {m: t for m, t in self.received.items() if m in wanted}
            deleted = {m: t for m, t in self.deleted.items() if m in wanted}
            again = sum(n - 1 for m, n in self.receives.items() if m in wanted)
        return received, deleted, again


# -- runs ---------------------------------------------------------------------------------------


@dataclass
class Mode:
    name: str
    per_trigger: int
    options: dict[str, Any] = field(default_factory=dict)


def modes(sizes: Iterable[int]) -> list[Mode]:
    """Each acknowledgement mode at each ``maxMessagesPerTrigger``."""
    sizes = list(sizes)
    return [Mode(f"default, {n}/batch", n) for n in sizes] + [
        Mode(f"deleteAfterJournal, {n}/batch", n, {"deleteAfterJournal": "true"}) for n in sizes
    ]


def _fill(endpoint: str, queue_url: str, count: int) -> list[str]:
    """Send ``count`` messages (200-byte bodies) in batches of 10; their MessageIds."""
    from concurrent.futures import ThreadPoolExecutor

    from bench import load

    sqs = load.client(endpoint, pool=4)

    def send(start: int) -> list[str]:
        n = min(10, count - start)
        entries = [{"Id": str(i), "MessageBody": load.body(start + i, 200)} for i in range(n)]
        response = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
        if response.get("Failed"):
            raise RuntimeError(f"SendMessageBatch failed: {response['Failed'][:1]}")
        return [s["MessageId"] for s in response["Successful"]]

    with ThreadPoolExecutor(4) as pool:
        return [m for ids in pool.map(send, range(0, count, 10)) for m in ids]


def run_mode(
    spark: Any,
    endpoint: str,
    clock: InFlightClock,
    workdir: Path,
    mode: Mode,
    backlog: int,
    receivers: int,
    timeout: float,
) -> dict[str, Any]:
    from bench import load
    from bench.spark_runs import source_stream

    sqs = load.client(endpoint)
    url = sqs.create_queue(QueueName=f"inflight-{uuid.uuid4().hex[:10]}")["QueueUrl"]
    ids = _fill(endpoint, url, backlog)
    base = workdir / uuid.uuid4().hex[:8]
    df = source_stream(
        spark,
        endpoint,
        url,
        base / "journal",
        numPartitions=receivers,
        maxMessagesPerTrigger=mode.per_trigger,
        **mode.options,
    )
    started = time.monotonic()
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(base / "checkpoint"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        # Every message deleted (in the default mode the last batch too, which the driver
        # deletes once the query idles) and every message's batch reported: with
        # deleteAfterJournal the deletes come before the batch ends.
        while True:
            deleted = clock.deleted_of(ids)
            rows = sum(b.rows for b in batches_from_progress(list(query.recentProgress)))
            if deleted >= len(ids) and rows >= len(ids):
                break
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            if time.monotonic() - started > timeout:
                logger.warning(
                    "%s: after %.0f s, %d of %d deleted, %d delivered",
                    mode.name,
                    timeout,
                    deleted,
                    len(ids),
                    rows,
                )
                break
            time.sleep(0.5)
        progress = list(query.recentProgress)
    finally:
        query.stop()
    try:
        sqs.delete_queue(QueueUrl=url)
    except Exception:  # noqa: BLE001 - the queue dies with the server anyway
        pass
    received, deleted, again = clock.snapshot(ids)
    full = [b for b in batches_from_progress(progress) if b.rows > 0]
    durations = [b.durations_ms.get("triggerExecution", 0) / 1000.0 for b in full]
    steady, last = holds_by_phase(received, deleted, full[-1].start if full else math.inf)
    summary = hold_summary(steady)
    batch_s = median(durations)
    summary.update(
        {
            "mode": mode.name,
            "maxMessagesPerTrigger": mode.per_trigger,
            "options": mode.options,
            "sent": len(ids),
            "deleted": len(deleted),
            "redelivered": again,
            "batches": len(full),
            "batch_rows": [b.rows for b in full],
            "median_batch_s": batch_s,
            "median_hold_in_batches": summary["median_s"] / batch_s if durations else None,
            "per_batch": [
                {"rows": b.rows, "seconds": d, "median_hold_s": median(h)}
                for b, d, h in zip(
                    full,
                    durations,
                    holds_per_batch(received, deleted, [b.start for b in full]),
                    strict=True,
                )
            ],
            "last_batch": hold_summary(last),
            "all": hold_summary(steady + last),
        }
    )
    logger.info("%s: %s", mode.name, json.dumps(summary))
    return summary


# -- report -------------------------------------------------------------------------------------


def _f(value: Any, digits: int = 2) -> str:
    if value is None or value != value:
        return "n/a"
    if value == float("inf"):
        return "unbounded"
    return f"{value:,.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    p = result["parameters"]
    lines = [
        "# The in-flight limit per acknowledgement mode",
        "",
        f"`make bench-inflight` (`python -m bench.inflight`), {result['when']}, "
        f"{result['machine']}. SQS keeps about {IN_FLIGHT_LIMIT:,} messages in flight per "
        "queue, so a consumer that holds each message `s` seconds from receive to delete cannot "
        f"exceed {IN_FLIGHT_LIMIT:,} / `s` msg/s, whatever the driver or the cluster does.",
        "",
        f"How it was measured: each row is a fresh standard queue pre-filled with "
        f"{p['batches']} batches' worth of messages (`maxMessagesPerTrigger` x {p['batches']}), "
        f'drained by `spark.readStream.format("sqs")` (`local[{p["cores"]}]`, '
        f"`numPartitions={p['receivers']}`, other options at their defaults) into a `noop` sink "
        "until every message was deleted. moto runs as an HTTP server in the benchmark's "
        "process; its SQS model is patched there to stamp when a receive first hands out each "
        "message and when a delete removes it, and the seconds held are the difference. The "
        "steady columns leave out the last batch, which no next batch follows (the driver "
        "deletes it once the query idles; a running query always has a next batch): it is "
        "shown separately. Batch seconds are Spark's `triggerExecution` of the batches with rows.",
        "",
        "| mode | messages | median s | p90 s | max s | median batch s | median / batch | "
        "bound at median (msg/s) | bound at p90 (msg/s) | last batch: median s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result["runs"]:
        lines.append(
            f"| {r['mode']} | {r['messages']:,} | {_f(r['median_s'])} | {_f(r['p90_s'])} | "
            f"{_f(r['max_s'])} | {_f(r['median_batch_s'])} | "
            f"{_f(r['median_hold_in_batches'], 2)} | {_f(r['bound_median_msg_s'], 0)} | "
            f"{_f(r['bound_p90_msg_s'], 0)} | {_f(r['last_batch']['median_s'])} |"
        )
    lines += ["", "Per batch, in order: batch seconds / median seconds its messages were held.", ""]
    for r in result["runs"]:
        pairs = ", ".join(
            f"{_f(b['seconds'], 1)}/{_f(b['median_hold_s'], 2)}" for b in r.get("per_batch", [])
        )
        lines.append(f"- {r['mode']}: {pairs}")
    lines += [
        "",
        "How to read it. Default mode: the receivers of batch N+1 delete batch N's messages "
        "first thing in their tasks, once Spark has committed N, so a message is held from its "
        "receive in N's task to the start of N+1's tasks: at most one batch interval, less for "
        "messages received late in the task. About two batch durations pass between a batch's "
        "first receive and the end of the batch that deletes it; the hold itself is one interval. "
        "It grows with `maxMessagesPerTrigger` and with whatever slows a batch (the sink, the "
        "cluster, the planning), so the bound falls as batches grow. `deleteAfterJournal=true`: "
        "a receiver deletes each receive call's messages as soon as that part is journaled, so "
        "the hold is one receive call plus one journal write, independent of the batch: the "
        "mode for rates above the default mode's bound. moto serves one request at a time and "
        "this machine was shared, so absolute seconds are higher than on AWS; the hold as a "
        "fraction of the batch duration is what carries over: bound = 120,000 / (fraction x "
        "your batch seconds).",
        "",
    ]
    return "\n".join(lines)


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.inflight", description=__doc__)
    p.add_argument("--out", default=str(RESULTS), help="results directory")
    p.add_argument(
        "--sizes", type=_sizes, default=[250, 1000], help="maxMessagesPerTrigger values, a,b"
    )
    p.add_argument("--batches", type=int, default=6, help="backlog per run, in batches")
    p.add_argument("--receivers", type=int, default=4, help="numPartitions")
    p.add_argument("--cores", type=int, default=4, help="Spark master local[N]")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per run at most")
    p.add_argument("--quick", action="store_true", help="smoke test: --sizes 100,200 --batches 3")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.batches = [100, 200], 3
    return args


def main(argv: list[str] | None = None) -> int:
    import shutil
    import tempfile

    args = _args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for key, value in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(key, value)
    # Executors are Python workers the JVM starts: they inherit this environment.
    os.environ["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = os.environ.get("PYSPARK_DRIVER_PYTHON") or sys.executable

    from bench.spark_runs import session
    from devtools.local_sqs import MotoServer

    server = MotoServer()
    spark = session(args.cores)
    workdir = Path(tempfile.mkdtemp(prefix="spark-sqs-inflight-"))
    runs = []
    started = time.monotonic()
    try:
        with InFlightClock() as clock:
            # The session's first query starts the JVM's code paths and the Python workers:
            # a small drain first, not reported, so the first measured mode does not pay it.
            warm_up = Mode("warm-up", 100)
            for mode in [warm_up, *modes(args.sizes)]:
                backlog = 200 if mode is warm_up else mode.per_trigger * args.batches
                # A shared machine can fail a query for Spark's own reasons (a Python worker
                # that does not connect back in time): one more try on a fresh queue.
                for attempt in (1, 2):
                    try:
                        run = run_mode(
                            spark,
                            server.endpoint,
                            clock,
                            workdir,
                            mode,
                            backlog,
                            args.receivers,
                            args.timeout,
                        )
                    except RuntimeError:
                        if attempt == 2:
                            raise
                        logger.warning("%s failed; once more", mode.name, exc_info=True)
                        continue
                    if mode is not warm_up:
                        run["attempt"] = attempt
                        runs.append(run)
                    break
    finally:
        spark.stop()
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "when": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": f"{os.cpu_count()} cores, {platform.platform(terse=True)}, moto",
        "limit": IN_FLIGHT_LIMIT,
        "parameters": {
            "sizes": args.sizes,
            "batches": args.batches,
            "receivers": args.receivers,
            "cores": args.cores,
            "quick": args.quick,
            "load_average": os.getloadavg()[0],
            "seconds": round(time.monotonic() - started),
        },
        "runs": runs,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "inflight.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out / "inflight.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
