"""Turns ``results.json`` into ``bench/results/README.md`` (Markdown tables) and PNG plots.

Every number in the report is read from the results of the run; nothing is typed in here.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.stats import median


def _f(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def _mib(value: Any) -> str:
    return "-" if not value else f"{value / 2**20:,.0f}"


def throughput_table(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "| network | receivers / threads | baseline msgs/s | source msgs/s | source / baseline "
        "| source batches | median batch ms | of which addBatch (receive, journal) "
        "| latestOffset (previous batch's deletes, poll) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        durations = r["source"].get("detail", {}).get("durations", {})
        out.append(
            f"| {'delay proxy' if r['proxied'] else 'direct'} | {r['receivers']} "
            f"| {_f(r['baseline']['rate'])} | {_f(r['source']['rate'])} | {_f(r['ratio'], 2)} "
            f"| {r['source'].get('batches', '-')} | {_f(r['source'].get('median_batch_ms'))} "
            f"| {_f(durations.get('addBatch'))} | {_f(durations.get('latestOffset'))} |"
        )
    return out


CPU_COLUMNS = (
    ("sqs server", "SQS server"),
    ("delay proxy", "proxy"),
    ("bench process", "bench process (baseline threads, PySpark driver)"),
    ("JVM", "JVM"),
    ("source runner", "driver's source runner"),
    ("Python workers", "Python workers (receivers)"),
)


def cpu_table(rows: list[dict[str, Any]]) -> list[str]:
    """CPU milliseconds per message by process, for the rows that measured it."""
    measured = [r for r in rows if r["baseline"].get("cpu_ms_per_message")]
    if not measured:
        return []
    out = [
        "| network | receivers | consumer | "
        + " | ".join(title for _, title in CPU_COLUMNS)
        + " | all | all, except SQS server and proxy |",
        "| --- | ---: | --- |" + " ---: |" * (len(CPU_COLUMNS) + 2),
    ]
    for r in measured:
        for kind in ("baseline", "source"):
            cpu = r[kind].get("cpu_ms_per_message") or {}
            client = sum(cpu.get(k, 0.0) for k, _ in CPU_COLUMNS[2:])
            out.append(
                f"| {'delay proxy' if r['proxied'] else 'direct'} | {r['receivers']} | {kind} | "
                + " | ".join(_f(cpu.get(k), 3) for k, _ in CPU_COLUMNS)
                + f" | {_f(sum(cpu.values()), 3)} | {_f(client, 3)} |"
            )
    return out


# Targets for cost per message against the plain consumer, by load (none for a steady rate).
COST_TARGETS = {"trickle": 3.0, "drain": 1.2}
COST_LOADS = {
    "trickle": "trickle: 20 msg/s, one `SendMessage` each",
    "steady": "steady: 200 msg/s, `SendMessageBatch` of 10",
    "drain": "backlog drain",
    "trickle-trigger-5s": 'trickle, `trigger(processingTime="5 seconds")`',
}


def _verdict(ratio: float | None, target: float | None) -> str:
    if ratio is None or target is None:
        return "-"
    return f"<= {target:g}: " + ("met" if ratio <= target else "**not met**")


def cost_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Cost per million messages and requests per 1,000 messages by kind, each load's source
    beside the plain consumer measured in the same run."""
    if not rows:
        return []
    out = [
        "| load | consumer | messages counted | batches (msgs each) | SQS $/M | S3 $/M | KMS $/M "
        "| total $/M | source / plain | target | load average (1 min) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in rows:
        for kind, label in (("baseline", "plain consumer"), ("source", "source")):
            c = r[kind]
            usd = c.get("usd_per_million") or {}
            ratio = r.get("ratio") if kind == "source" else None
            batches = c.get("batches")
            per_batch = f"{batches} ({_f(c['messages'] / batches)})" if batches else ""
            out.append(
                f"| {COST_LOADS.get(r['load'], r['load'])} | {label} | {_f(c['messages'])} "
                f"| {per_batch} | {_f(usd.get('SQS'), 3)} | {_f(usd.get('S3'), 3)} "
                f"| {_f(usd.get('KMS'), 3)} "
                f"| **{_f(usd.get('total'), 3)}** | {_f(ratio, 2)} "
                f"| {_verdict(ratio, COST_TARGETS.get(r['load'])) if kind == 'source' else ''} "
                f"| {_f(r['load_average'][0], 2)} |"
            )
    kinds = sorted({k for r in rows for c in (r["baseline"], r["source"]) for k in c["counts"]})
    out += [
        "",
        "Requests per 1,000 messages, by kind (SQS by action, S3 by price class: PUT, COPY, "
        "POST and LIST are the dear class, GET and HEAD the cheap one, DELETE is free):",
        "",
        "| load | consumer | " + " | ".join(kinds) + " | all |",
        "| --- | --- |" + " ---: |" * (len(kinds) + 1),
    ]
    for r in rows:
        for kind, label in (("baseline", "plain consumer"), ("source", "source")):
            per = r[kind].get("per_1000_messages") or {}
            out.append(
                f"| {r['load']} | {label} | "
                + " | ".join(_f(per.get(k), 0) if k in per else "" for k in kinds)
                + f" | {_f(sum(per.values()), 0)} |"
            )
    return out


# The CPU targets per message at 16 and 4 receivers: (receivers, what, at most). The issue that
# set them counts every process on both sides, the SQS server and the delay proxy included (its
# list: "receivers' workers, driver source process, JVM, SQS server, proxy"); the stricter ratio
# of the consumer's own processes is shown beside it, without a target.
ALL_PROCESSES = "all processes, SQS server and proxy included / plain consumer's"
OWN_PROCESSES = "source's processes / plain consumer's"
WORKERS_MS = "Python workers, ms per message"
WORKERS_THREADS = "Python workers / plain consumer's threads"
WORKERS_PROCESSES = "Python workers / the plain consumer's loop in as many processes"
# The workers' target at 16 receivers was set as 0.36 ms where the plain consumer's loop cost
# 0.22 ms in 16 threads and 0.25 in 16 processes. An absolute figure moves with the machine
# (the same loop costs 0.33-0.40 in processes on the 2-core VM of bench/results), so it is
# checked as those two ratios, measured in the same pair; the milliseconds are shown without a
# verdict.
WORKERS_MS_TARGET = 0.36
CPU_TARGETS = (
    (16, WORKERS_MS, None),
    (16, WORKERS_PROCESSES, round(WORKERS_MS_TARGET / 0.25, 2)),
    (16, WORKERS_THREADS, round(WORKERS_MS_TARGET / 0.22, 2)),
    (16, ALL_PROCESSES, 1.3),
    (16, OWN_PROCESSES, None),
    (4, WORKERS_THREADS, 1.6),
)
SOURCE_ROLES = ("bench process", "JVM", "source runner", "Python workers")
EXPLAINED = {
    ALL_PROCESSES: " (the definition the target uses: every process on both sides, the SQS "
    "server and the proxy counted for each)",
    OWN_PROCESSES: " (stricter, no target: the consumer's own processes, the SQS server and "
    "the proxy left out on both sides)",
}
EXPLAINED_AT = {
    (16, WORKERS_MS): f" (set as {WORKERS_MS_TARGET:g} ms where the plain consumer's loop cost "
    "0.25 in 16 processes and 0.22 in 16 threads; checked as those ratios, below)",
    (16, WORKERS_PROCESSES): f" (the {WORKERS_MS_TARGET:g} ms target over 0.25; needs "
    "`--cpu-plain-processes`, on by default)",
    (16, WORKERS_THREADS): f" (the {WORKERS_MS_TARGET:g} ms target over 0.22)",
}


def cpu_window_lines(rows: list[dict[str, Any]]) -> list[str]:
    """CPU per message by process over a steady window, source beside the plain consumer; then
    the SQS requests each side made in its window."""
    if not rows:
        return []
    out = [
        "| receivers | messages a batch | consumer | messages measured | msgs/s | "
        + " | ".join(title for _, title in CPU_COLUMNS)
        + " | consumer's processes | all processes | load average (1 min) |",
        "| ---: | ---: | --- | ---: | ---: |" + " ---: |" * (len(CPU_COLUMNS) + 3),
    ]
    for r in rows:
        for kind, label in (("baseline", "plain consumer"), ("source", "source")):
            c = r[kind]
            cpu = c.get("cpu_ms_per_message") or {}
            own = sum(cpu.get(k, 0.0) for k in SOURCE_ROLES)
            out.append(
                f"| {r['receivers']} | {_f(r['messages_per_batch'])} | {label} "
                f"| {_f(c['messages'])} | {_f(c['rate'])} | "
                + " | ".join(_f(cpu.get(k), 3) for k, _ in CPU_COLUMNS)
                + f" | {_f(own, 3)} | {_f(sum(cpu.values()) if cpu else None, 3)} "
                f"| {_f(r['load_average'][0], 2)} |"
            )
    lines = []
    for receivers, what, limit in CPU_TARGETS:
        values = cpu_measures(rows, receivers, what)
        if not values:
            continue
        value = median(values)
        if limit is None:
            verdict = "no target"
        else:
            verdict = f"at most {limit:g}: " + ("met" if value <= limit else "**not met**")
        each = ""
        if len(values) > 1:
            each = (
                f" (median of {len(values)} pairs: "
                + ", ".join(f"{v:.2f}" for v in values)
                + f"; spread {max(values) - min(values):.2f})"
            )
        lines.append(
            f"- {receivers} receivers, {what}"
            f"{EXPLAINED_AT.get((receivers, what), EXPLAINED.get(what, ''))}: {value:.2f}{each} "
            f"({verdict})"
        )
    return (
        out
        + ([""] + lines if lines else [])
        + cpu_pairs_lines(rows)
        + cpu_processes_lines(rows)
        + sqs_calls_lines(rows)
        + cpu_inside_lines(rows)
    )


def cpu_pairs_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Each interleaved pair of windows (plain consumer, then source) in the order they ran."""
    many = [r for r in rows if len(r.get("pairs") or []) > 1]
    if not many:
        return []
    out = [
        "",
        "Each pair in the order it ran (the plain consumer's window, then the source's; the "
        "table above shows the pair marked *, whose all-process ratio is the median), in ms of "
        "CPU a message:",
        "",
        "| receivers | pair | plain consumer: all | source: all | source / plain "
        "| Python workers | workers / plain consumer's threads | JVM (of which JIT compilers) "
        "| load average (1 min) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in many:
        for n, pair in enumerate(r["pairs"]):
            base, src = pair["baseline"], pair["source"]
            cpu = src.get("cpu_ms_per_message") or {}
            threads = src.get("jvm_threads_cpu_ms_per_message") or {}
            jit = sum(v for k, v in threads.items() if "CompilerThre" in k)
            mark = " *" if n == r.get("median_pair") else ""
            out.append(
                f"| {r['receivers']} | {n + 1}{mark} "
                f"| {_f(sum((base.get('cpu_ms_per_message') or {}).values()), 3)} "
                f"| {_f(sum(cpu.values()), 3)} "
                f"| {_f(pair_measure(base, src, ALL_PROCESSES), 2)} "
                f"| {_f(cpu.get('Python workers'), 3)} "
                f"| {_f(pair_measure(base, src, WORKERS_THREADS), 2)} "
                f"| {_f(cpu.get('JVM'), 3)} ({_f(jit, 3)}) "
                f"| {_f((pair.get('load_average') or [None])[0], 2)} |"
            )
    return out


def cpu_processes_lines(rows: list[dict[str, Any]]) -> list[str]:
    """With ``--cpu-plain-processes``: the plain consumer's loop in as many processes as
    receivers, beside the source's Python workers of the same pair."""
    measured = [r for r in rows if any("plain_processes" in p for p in r.get("pairs") or [])]
    if not measured:
        return []
    out = [
        "",
        "The plain consumer's loop in as many processes as receivers, one thread each (as Spark "
        "runs a receiver in a Python worker), run after each pair; ms of CPU a message:",
        "",
        "| receivers | pair | its processes | the same loop's threads | source's Python workers "
        "| workers / processes |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    summary = []
    for r in measured:
        ratios = []
        for n, pair in enumerate(r["pairs"]):
            if "plain_processes" not in pair:
                continue
            procs = (pair["plain_processes"].get("cpu_ms_per_message") or {}).get(
                "plain consumer's processes"
            )
            threads = (pair["baseline"].get("cpu_ms_per_message") or {}).get("bench process")
            workers = (pair["source"].get("cpu_ms_per_message") or {}).get("Python workers")
            ratio = workers / procs if workers is not None and procs else None
            if ratio is not None:
                ratios.append(ratio)
            out.append(
                f"| {r['receivers']} | {n + 1} | {_f(procs, 3)} | {_f(threads, 3)} "
                f"| {_f(workers, 3)} | {_f(ratio, 2)} |"
            )
        if ratios:
            summary.append(
                f"- {r['receivers']} receivers, Python workers / the plain consumer's processes: "
                f"median {median(ratios):.2f} of " + ", ".join(f"{v:.2f}" for v in ratios)
            )
    return out + ([""] + summary if summary else [])


def cpu_inside_lines(rows: list[dict[str, Any]]) -> list[str]:
    """What the source's window holds that is not steady work: the JVM's JIT compilers (a
    young JVM still compiles Spark's per-batch code) and the connections each batch opened."""
    out = []
    for r in rows:
        warm = r.get("jit_warmup")
        if warm:
            out.append(
                f"- {r['receivers']} receivers, before the pairs: {warm['batches']} batches of "
                f"{_f(warm['messages_per_batch'])} messages, not measured, "
                + ("until the JIT settled" if warm["settled"] else "the JIT not settled yet")
                + f" ({_f(warm['seconds'])} s; the JIT compilers' CPU seconds of the JVM's by "
                "batch: "
                + ", ".join(
                    f"{_f(b['jit_compilers'], 2)} of {_f(b['all'], 2)}"
                    for b in warm["jvm_cpu_seconds_by_batch"]
                )
                + ")"
            )
        s = r["source"]
        threads = s.get("jvm_threads_cpu_ms_per_message")
        opened = s.get("client_connections_by_batch")
        if threads is None or opened is None:
            continue
        jvm = (s.get("cpu_ms_per_message") or {}).get("JVM")
        jit = sum(v for k, v in threads.items() if "CompilerThre" in k)
        by_batch = s.get("jvm_cpu_seconds_by_batch") or []
        out.append(
            f"- {r['receivers']} receivers, the source's window: of the JVM's {_f(jvm, 3)} ms a "
            f"message, its JIT compilers {_f(jit, 3)} (by batch, seconds: "
            + ", ".join(f"{_f(b['jit_compilers'], 2)} of {_f(b['all'], 2)}" for b in by_batch)
            + "); connections opened to the proxy by batch: "
            + ", ".join(str(n) for n in opened)
        )
    return ["", *out] if out else []


def sqs_calls_lines(rows: list[dict[str, Any]]) -> list[str]:
    """SQS requests per 1,000 messages by action in each CPU window, with what they carried."""
    actions = sorted({a for r in rows for k in ("baseline", "source") for a in _calls(r, k)})
    if not actions:
        return []
    out = [
        "",
        "SQS requests per 1,000 messages in the same windows, by action (counted at the delay "
        "proxy; in brackets the messages a receive returned or the entries a batch call carried, "
        "on average, and the receives that returned nothing per 1,000 messages), and the "
        "connections opened in the window, to the proxy and from it to the SQS server:",
        "",
        "| receivers | consumer | " + " | ".join(actions) + " | all | connections opened |",
        "| ---: | --- |" + " ---: |" * (len(actions) + 2),
    ]
    for r in rows:
        for kind, label in (("baseline", "plain consumer"), ("source", "source")):
            calls = _calls(r, kind)
            if not calls:
                continue
            cells = []
            for action in actions:
                c = calls.get(action)
                if c is None:
                    cells.append("")
                    continue
                cell = f"{_f(c['per_1000_messages'], 1)} ({_f(c['items_per_request'], 2)}"
                if action == "ReceiveMessage":
                    cell += f"; empty {_f(c['empty_per_1000_messages'], 1)}"
                cells.append(cell + ")")
            total = sum(c["per_1000_messages"] for c in calls.values())
            opened = r[kind].get("connections_opened")
            conns = f"{opened.get('client', 0)}, {opened.get('upstream', 0)}" if opened else "-"
            out.append(
                f"| {r['receivers']} | {label} | "
                + " | ".join(cells)
                + f" | {_f(total, 1)} | {conns} |"
            )
    return out


def _calls(row: dict[str, Any], kind: str) -> dict[str, dict[str, float]]:
    return row[kind].get("sqs_calls") or {}


def cpu_measure(rows: list[dict[str, Any]], receivers: int, what: str) -> float | None:
    """The value a CPU target is checked against, from the row with ``receivers``: the median
    over its interleaved pairs (``cpu_measures``)."""
    values = cpu_measures(rows, receivers, what)
    return median(values) if values else None


def cpu_measures(rows: list[dict[str, Any]], receivers: int, what: str) -> list[float]:
    """``what`` in each pair of plain consumer and source of the row with ``receivers``, in
    the order they ran (one pair in results written before pairs were repeated)."""
    row = next((r for r in rows if r["receivers"] == receivers), None)
    if row is None:
        return []
    pairs = row.get("pairs") or [{"baseline": row["baseline"], "source": row["source"]}]
    values = [
        pair_measure(p["baseline"], p["source"], what, p.get("plain_processes")) for p in pairs
    ]
    return [v for v in values if v is not None]


def pair_measure(
    baseline: dict[str, Any],
    source: dict[str, Any],
    what: str,
    plain_processes: dict[str, Any] | None = None,
) -> float | None:
    """``what`` (one of ``CPU_TARGETS``' measures) of one pair of windows; ``plain_processes``
    is the window of the plain consumer's loop in processes run after it, if any."""
    src = source.get("cpu_ms_per_message") or {}
    base = baseline.get("cpu_ms_per_message") or {}
    if not src or not base:
        return None
    if what == WORKERS_MS:
        return src.get("Python workers")
    if what == WORKERS_PROCESSES:
        procs = ((plain_processes or {}).get("cpu_ms_per_message") or {}).get(
            "plain consumer's processes"
        )
        workers = src.get("Python workers")
        return workers / procs if workers is not None and procs else None
    if what == ALL_PROCESSES:
        every = sum(base.values())
        return sum(src.values()) / every if every else None
    if what == OWN_PROCESSES:
        mine = sum(base.get(k, 0.0) for k in SOURCE_ROLES)
        return sum(src.get(k, 0.0) for k in SOURCE_ROLES) / mine if mine else None
    threads = base.get("bench process", 0.0)
    return src.get("Python workers", 0.0) / threads if threads else None


def scaling_line(rows: list[dict[str, Any]], proxied: bool) -> str:
    sel = sorted((r for r in rows if r["proxied"] == proxied), key=lambda r: r["receivers"])
    if len(sel) < 2:
        return ""
    lo, hi = sel[0], sel[-1]
    factor = hi["receivers"] / lo["receivers"]

    def speedup(kind: str) -> str:
        a, b = lo[kind]["rate"], hi[kind]["rate"]
        return f"{b / a:.1f}x" if a else "-"

    return (
        f"From {lo['receivers']} to {hi['receivers']} receivers ({factor:.0f}x) "
        f"({'delay proxy' if proxied else 'direct'}): source {speedup('source')}, "
        f"baseline {speedup('baseline')}."
    )


def _pyplot() -> Any:
    """matplotlib's pyplot without a display, or None where matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(plt: Any, fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_throughput(results: dict[str, Any], path: Path) -> bool:
    plt = _pyplot()
    if plt is None:
        return False
    panels = [("moto, steady state", results.get("steady") or [])]
    if results.get("drain"):
        panels.append(("LocalStack, backlog drain", results["drain"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels, strict=True):
        for proxied, style in ((False, "-"), (True, "--")):
            sel = sorted((r for r in rows if r["proxied"] == proxied), key=lambda r: r["receivers"])
            if not sel:
                continue
            x = [r["receivers"] for r in sel]
            net = "delay proxy" if proxied else "direct"
            ax.plot(
                x,
                [r["source"]["rate"] for r in sel],
                "o" + style,
                color="C0",
                label=f"source, {net}",
            )
            ax.plot(
                x,
                [r["baseline"]["rate"] for r in sel],
                "s" + style,
                color="C1",
                label=f"boto3 baseline, {net}",
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 2, 4, 8])
        ax.set_xticklabels(["1", "2", "4", "8"])
        ax.set_xlabel("receivers (source) / threads (baseline)")
        ax.set_ylabel("messages / s")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _save(plt, fig, path)
    return True


def plot_memory(memory: dict[str, Any], path: Path) -> bool:
    plt = _pyplot()
    if plt is None:
        return False
    points = memory.get("points") or []
    if not points:
        return False
    x = [p["batch_size"] for p in points]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (
        ("worker_max", "largest Python worker (executor)"),
        ("source_runner", "driver's Python source runner"),
        ("driver_python", "PySpark driver (bench process)"),
    ):
        ax.plot(x, [p["peak_rss"].get(key, 0) / 2**20 for p in points], "o-", label=label)
    ax.set_xlabel(f"messages per micro-batch (1 receiver, {memory.get('body_bytes')} B bodies)")
    ax.set_ylabel("peak RSS, MiB")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(plt, fig, path)
    return True


def plot_hotpath(hotpath: dict[str, Any], path: Path) -> bool:
    plt = _pyplot()
    if plt is None:
        return False
    runs = [r for r in hotpath.get("runs", []) if "error" not in r]
    configs = list(dict.fromkeys(r["config"] for r in runs))
    if not configs:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.38
    for i, version in enumerate(("before", "after")):
        vals = []
        drv = []
        for c in configs:
            match = [r for r in runs if r["config"] == c and r["version"] == version]
            vals.append(match[0]["end_to_end_rate"] if match else 0)
            drv.append(match[0]["driver_ms_median"] if match else 0)
        pos = [j + (i - 0.5) * width for j in range(len(configs))]
        axes[0].bar(pos, vals, width, label=version)
        axes[1].bar(pos, drv, width, label=version)
    for ax, title in zip(
        axes, ("messages/s, driver + receivers", "driver ms per batch (median)"), strict=True
    ):
        ax.set_xticks(range(len(configs)))
        ax.set_xticklabels(configs, fontsize=8)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
        ax.legend()
    _save(plt, fig, path)
    return True


SINK_TARGET_RATIO = 0.8
SINK_HEADING = "## SQS sink against plain boto3 SendMessageBatch"


def _net_rate(sink: dict[str, Any]) -> float | None:
    """The sink's median rate without the fixed cost of a write."""
    overhead, rate = sink.get("writeOverheadSeconds"), sink.get("sinkMsgPerSec")
    if overhead is None or not rate:
        return None
    seconds = sink["messages"] / rate - overhead
    return sink["messages"] / seconds if seconds > 0 else None


def sink_lines(sink: dict[str, Any] | None) -> list[str]:
    """The sink against plain ``SendMessageBatch`` (section ``sink``, ``bench/sink.py``)."""
    if not sink:
        return []
    ratio = sink["ratio"]
    verdict = "meets" if ratio >= SINK_TARGET_RATIO else "**misses**"
    runs = sink.get("runs", {})
    return [
        SINK_HEADING,
        "",
        f"The same {sink['messages']} messages of {sink.get('bodyBytes', '?')} B into a fresh "
        f"standard queue on {sink['server']}"
        + (
            f", through the delay proxy ({_f(sink.get('delayMs'))} ms per request)"
            if sink.get("proxied")
            else ""
        )
        + f', at equal concurrency ({sink["concurrency"]}): `df.write.format("sqs")` with '
        "`maxInFlightCalls` against threads looping `SendMessageBatch` of 10; runs alternate. "
        "The sink's time is the wall time of `save()`, Spark's job overhead included. "
        "Medians of the runs.",
        "",
        f"A 10-row write takes {_f(sink.get('writeOverheadSeconds'), 2)} s here: Spark's job "
        "and the writer's set-up, paid once per write (once per micro-batch in a stream), so "
        "the ratio grows with the messages per write. "
        f"Sink msgs/s with that time taken out: {_f(_net_rate(sink))}.",
        "",
        "| baseline msgs/s | sink msgs/s | ratio | target | runs (baseline; sink) |",
        "| ---: | ---: | ---: | --- | --- |",
        f"| {_f(sink['baselineMsgPerSec'])} | {_f(sink['sinkMsgPerSec'])} | {ratio:.2f} "
        f"| >= {SINK_TARGET_RATIO}: {verdict} "
        f"| {', '.join(_f(r) for r in runs.get('baseline', []))}; "
        f"{', '.join(_f(r) for r in runs.get('sink', []))} |",
        "",
        *_sink_like_for_like(sink),
    ]


def _sink_like_for_like(sink: dict[str, Any]) -> list[str]:
    """The baseline with the sink's dedupe attribute, and CPU per message, when measured."""
    lines: list[str] = []
    attributed = sink.get("attributedBaselineMsgPerSec")
    if attributed:
        runs = sink.get("runs", {}).get("attributed", [])
        lines += [
            "Like for like: the same loop with the `spark_sqs.dedupeId` attribute the sink adds "
            f"to every message on a standard queue ran at {_f(attributed)} msgs/s "
            f"({', '.join(_f(r) for r in runs)}): ratio {sink['ratioAttributed']:.2f}. "
            "Per repeat (sink / baseline, sink / attributed baseline): "
            + ", ".join(
                f"{a:.2f} / {b:.2f}"
                for a, b in zip(
                    sink.get("pairRatios", []), sink.get("pairRatiosAttributed", []), strict=False
                )
            )
            + ".",
            "",
        ]
    cpu = sink.get("cpuMicrosPerMessage")
    if cpu:
        lines += [
            "CPU per message (us; client: the bench process with Spark's JVM and Python workers; "
            "server: SQS server and delay proxy): "
            + "; ".join(f"{kind} {v['client']:.0f} + {v['server']:.0f}" for kind, v in cpu.items())
            + ".",
            "",
        ]
    if sink.get("loadAverage"):
        lines += [f"Load average after the runs: {_f(sink['loadAverage'][0], 1)}.", ""]
    if sink.get("measured"):
        lines += [
            f"This section was measured on its own on {sink['measured']} (`{sink['by']}`), "
            "not in the run the other sections come from.",
            "",
        ]
    return lines


# The hand-kept summary at the top of README.md (one current table per benchmark, each from the
# newest run of that benchmark, several of which write their own files): kept on a rewrite.
CURRENT_BEGIN = "<!-- current results: kept as they are by bench/report.py -->"
CURRENT_END = "<!-- end of the current results -->"


def _current_results(readme: Path) -> list[str]:
    if not readme.exists():
        return []
    _, begin, rest = readme.read_text().partition(CURRENT_BEGIN)
    block, end, _ = rest.partition(CURRENT_END)
    return [CURRENT_BEGIN + block + CURRENT_END, ""] if begin and end else []


def write(results: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    kept = _current_results(out_dir / "README.md")
    m, v, p = results["machine"], results["versions"], results["parameters"]
    quick = " (QUICK MODE: smoke test, numbers not meaningful)" if results.get("quick") else ""
    lines = [
        "# Benchmarks: the SQS source against a plain boto3 consumer",
        "",
        *kept,
        "Generated by `make bench` (`python -m bench`) on "
        f"{results['started']}{quick}; "
        f"the run took {_f(results.get('total_seconds', 0) / 60, 1)} min. Raw numbers: "
        "[results.json](results.json); profiles: `profiles/`.",
        "",
        "## Machine, versions, parameters",
        "",
        f"- Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}; "
        f"load average at start {m.get('load_average_at_start')}. The machine was shared with "
        "other jobs: compare numbers **within** a table (same run, same moment), not across runs.",
        "- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        "- Parameters: " + ", ".join(f"`{k}={val}`" for k, val in p.items()),
        f"- Spark master `local[{p['cores']}]` (receivers are I/O-bound tasks); every SQS server, "
        "the delay proxies and the moto producer run in their own processes.",
        "",
        "**Baseline**: the consumer one would write by hand: N threads, each looping "
        "`ReceiveMessage` (10 messages, 1 s long poll, all attributes) then "
        "`DeleteMessageBatch`; one boto3 client per thread, nothing else per message. "
        '**Source**: `spark.readStream.format("sqs")` with `numPartitions` = N into a `noop` '
        "sink, messages/s from Spark's progress reports (first to last batch measured; query "
        "start-up excluded). The source also journals every message (Arrow IPC, fsync) before "
        "Spark sees it and deletes only after Spark's commit, which the baseline does not.",
        "",
        f"**Delay proxy**: a loopback HTTP proxy that holds every request {_f(p['delay_ms'])} ms "
        "(about what a call costs to SQS within a region), so that what is measured is how many "
        "calls a consumer keeps in flight.",
        "",
    ]
    steady = results.get("steady") or []
    drain = results.get("drain") or []
    if plot_throughput(results, out_dir / "throughput.png"):
        lines += ["![throughput](throughput.png)", ""]
    lines += [
        "## Throughput: moto in steady state",
        "",
        "moto (embedded, backend serialised by a lock, so it is one request at a time), a "
        f"producer in its own process keeping about {p['depth']} messages visible. moto's cost "
        "per call grows with the messages it stores, so no deep backlog here. Each point: "
        f"{_f(p['warmup'])} s warm-up, then {_f(p['window'])} s measured; source batches of "
        f"{p['moto_batch']} messages per receiver.",
        "",
    ]
    lines += throughput_table(steady) if steady else ["(not run)"]
    lines += [
        "",
        scaling_line(steady, False),
        scaling_line(steady, True),
        "",
        "How to read it: moto answers one request at a time, so both consumers top out at the "
        "same server limit. The source deletes only after Spark's commit and so keeps "
        "receivers x batch messages in flight, and moto's cost per call grows with every "
        "message it stores, in flight or not: at 4-8 receivers moto slows down for the source "
        "but not for the baseline, which deletes at once. Real SQS has no such cost; the "
        "LocalStack table below is the throughput comparison.",
        "",
    ]
    lines += [
        "## Throughput: LocalStack backlog drain",
        "",
    ]
    if drain:
        lines += [
            f"LocalStack {v.get('localstack')} (SQS only, no Docker), a backlog of "
            f"{p['drain_per_receiver']} messages per receiver filled before each consumer starts; "
            f"rate from the first to the last message; source batches of {p['drain_batch']} "
            "messages per receiver.",
            "",
            *throughput_table(drain),
            "",
            scaling_line(drain, False),
            scaling_line(drain, True),
            "",
            *(
                [
                    "CPU milliseconds per message, by process, over each consumer's whole run "
                    "(for the source, query start and stop included):",
                    "",
                    *cpu_table(drain),
                    "",
                ]
                if cpu_table(drain)
                else []
            ),
            "How to read it: without the proxy a call costs about a millisecond, so Spark's fixed "
            "cost per micro-batch weighs most at 1 receiver. With the proxy, one receiver has one "
            "call in flight and, unlike the baseline thread, does not wait for its deletes (the "
            "next batch's receivers delete a committed batch, in parallel batch calls, inside "
            "`addBatch`), so the source leads at low concurrency. All processes (LocalStack, the "
            "proxy, the Python workers, the JVM) share this machine's cores, so with enough "
            "consumers CPU becomes the limit for both (compare the baseline's own scaling and "
            "the CPU table); the source spends more CPU per message (Spark, the journal).",
            "",
        ]
    else:
        lines += [f"Not run: LocalStack was unavailable ({v.get('localstack')}).", ""]
    goal = [r for r in (drain or steady) if r["proxied"]]
    if goal:
        worst = min(goal, key=lambda r: r["ratio"])
        lines += [
            "**Goal** (issue #6): with the delay proxy, source at least 0.8 of the baseline at "
            "equal concurrency, and near-linear from 1 to 8 receivers. Lowest ratio with the "
            f"proxy on {'LocalStack' if drain else 'moto'}: {_f(worst['ratio'], 2)} at "
            f"{worst['receivers']} receivers.",
            "",
        ]
    cost_rows = results.get("cost") or []
    if cost_rows:
        lines += [
            "## Cost per message against the plain consumer",
            "",
            "What each consumer's requests would cost at AWS list prices (us-east-1; "
            "`bench/cost.py` has the prices and their sources), per million messages delivered. "
            "Requests are counted by kind in the delay proxies the consumer talks to (the "
            "producer's are not); the source runs with its default options and an `s3://` "
            "journal (moto's S3 behind the delay proxy), the plain consumer loops one long-polled "
            "`ReceiveMessage` (10 messages, 20 s) and one `DeleteMessageBatch`. Counted over a "
            f"steady window ({_f(p.get('cost_window'))} s at a rate; "
            f"{p.get('cost_drain_batches')} batches of {_f(p.get('cost_drain_batch'))} on the "
            "drain): query start-up and shutdown do not count. KMS is counted where the journal "
            "uses SSE-KMS without an S3 Bucket Key (not in these runs: default options).",
            "",
            *cost_lines(cost_rows),
            "",
        ]
    cpu_rows = results.get("cpu") or []
    if cpu_rows:
        lines += [
            "## CPU per message by process",
            "",
            "A steady window of a backlog drain "
            f"({cpu_rows[0]['server']}, delay proxy, local journal) at a fixed batch size: for "
            f"the source {p.get('cpu_batches')} batches after "
            + (
                f"its first {p['cpu_warmup_batches']} (the first starts the Python workers, the "
                "second is the first whose receivers delete)"
                if p.get("cpu_warmup_batches", 1) >= 2
                else "the first"
            )
            + ", for the plain consumer "
            "(as many threads as receivers, in the bench process) from a tenth to four fifths "
            "of the same backlog. "
            + (
                f"The two run interleaved, {p['cpu_repeats']} pairs at each receiver count "
                "(plain consumer, source, plain consumer, ...), and each target is judged on "
                "the median of its measure over the pairs (each pair's value and the spread "
                "beside it): the same server handling the same requests moves by a quarter "
                "between runs on a shared VM. "
                if p.get("cpu_repeats", 1) > 1
                else ""
            )
            + (
                "Before the pairs, small batches of the source, not measured, run until the "
                "JVM's JIT compilers have settled (a young JVM compiles Spark's per-batch code "
                "for minutes: a one-off, not a cost of each message of a long-running stream). "
                if p.get("cpu_jit_max_batches")
                else ""
            )
            + "Milliseconds of CPU per message, by process; the consumer's "
            "processes are all but the SQS server and the proxy, all processes include them "
            "(the definition the 1.3 times target uses).",
            "",
            *cpu_window_lines(cpu_rows),
            "",
        ]
    ov = results.get("overhead")
    if ov:
        t, s = ov["trivial"], ov["sqs"]
        keys = sorted(set(t["durations"]) | set(s["durations"]))
        lines += [
            "## Per micro-batch overhead",
            "",
            "A trivial Python source (`bench/trivial.py`: no I/O, one Arrow batch of 10 rows) and "
            "the SQS source (1 receiver, `maxMessagesPerTrigger=10`, moto direct, queue kept fed) "
            "in the same session, `noop` sink, back-to-back triggers. Median ms per batch, with "
            "Spark's breakdown (`durationMs`):",
            "",
            "| | trivial source | SQS source |",
            "| --- | ---: | ---: |",
            f"| batches measured | {t['batches']} | {s['batches']} |",
            f"| rows per batch | {_f(t['rows_per_batch'])} | {_f(s['rows_per_batch'])} |",
            f"| **triggerExecution** (median) | **{_f(t['median_ms'])}** "
            f"| **{_f(s['median_ms'])}** |",
            f"| triggerExecution p90 | {_f(t['p90_ms'])} | {_f(s['p90_ms'])} |",
        ]
        for k in keys:
            if k == "triggerExecution":
                continue
            lines.append(f"| {k} | {_f(t['durations'].get(k))} | {_f(s['durations'].get(k))} |")
        lines += [
            "",
            f"The SQS source costs {_f(s['median_ms'] - t['median_ms'])} ms per batch more than "
            "the trivial source: the receive call, the journal write (fsync), the deletes of the "
            "previous batch and the queue poll (`latestOffset`), and the journal state writes.",
            "",
        ]
    lat = results.get("latency")
    if lat and lat.get("runs"):
        lines += [
            "## End-to-end latency",
            "",
            f"A producer sends at each rate for {_f(lat['seconds'])} s (the baseline "
            f"{_f(lat['baseline_seconds'])} s), either one `SendMessage` per message or one "
            "`SendMessageBatch` of 10 every 10 messages' time, with the send time in each body; "
            "servers direct (no delay proxy). The source runs with the default options "
            "(`numPartitions` 4, `waitTimeSeconds` 1, `maxMessagesPerTrigger` 10000) into a "
            "`foreachBatch` sink that takes the time when it sees each row; the baseline (one "
            "thread of receive-then-delete, 1 s long polls) takes it on receive. First tenth "
            "dropped as warm-up. Load: the 1-minute load average at the start and the end of "
            f"each run, on {lat.get('cores')} cores. Receive stops: why the receivers of the "
            "acknowledged batches stopped (each batch's `receiveStops` metric), summed.",
            "",
            "| server | msg/s | producer | consumer | measured of sent | p50 ms | p99 ms | max ms "
            "| micro-batches (median rows) | receive stops | load |",
            "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
        ]
        for row in lat["runs"]:
            if "p50_ms" not in row:
                continue
            batches = (
                f"{row['batches']} ({_f(row['median_batch_rows'])})" if "batches" in row else ""
            )
            stops = ", ".join(f"{k} {v}" for k, v in (row.get("receive_stops") or {}).items())
            load_avg = " -> ".join(f"{v:.1f}" for v in row.get("load_average_1m", []))
            lines.append(
                f"| {row['server']} | {_f(row['rate'])} | {row['producer']} | {row['consumer']} "
                f"| {row['measured']} of {row['sent']} | {_f(row['p50_ms'])} "
                f"| {_f(row['p99_ms'])} | {_f(row['max_ms'])} | {batches} | {stops} "
                f"| {load_avg} |"
            )
        lines += [
            "",
            "What ends a batch: a receiver stops once it has caught up with the queue, whatever "
            "each call returns: an empty receive, three short receives in a row, a long poll "
            "that had to wait (over 0.25 s: the queue had nothing visible when asked, although "
            "a producer's batch of 10 that arrived meanwhile comes back whole), or its part of "
            "the messages the driver saw visible when it planned the batch, plus one call's "
            "worth asked for without waiting. Its share of `maxMessagesPerTrigger` and a "
            "quarter of `visibilityTimeout` stay the outer limits.",
            "",
        ]
    mem = results.get("memory")
    if mem and mem.get("points"):
        lines += [
            "## Peak memory against batch size",
            "",
            f"One receiver takes the whole batch ({mem['server']}, {mem['body_bytes']} B bodies, "
            "a backlog of exactly one batch, `waitTimeSeconds=0`; batch ms and msgs/s are that "
            "one batch's, so they also show what a larger batch buys). Peak RSS sampled every "
            "100 ms with psutil; Python "
            "workers are reused across queries, so each row's peak includes earlier runs' "
            "high-water marks (rows run in increasing batch size).",
            "",
            "| messages per batch | batch ms | msgs/s | largest Python worker MiB "
            "| driver source runner MiB | PySpark driver MiB | JVM MiB |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for pt in mem["points"]:
            pk = pt["peak_rss"]
            lines.append(
                f"| {pt['batch_size']} | {_f(pt.get('batch_ms'))} | {_f(pt.get('rate'))} "
                f"| {_mib(pk.get('worker_max'))} "
                f"| {_mib(pk.get('source_runner'))} | {_mib(pk.get('driver_python'))} "
                f"| {_mib(pk.get('jvm'))} |"
            )
        lines.append("")
        if plot_memory(mem, out_dir / "memory.png"):
            lines += ["![memory](memory.png)", ""]
    lines += sink_lines(results.get("sink"))
    hp = results.get("hotpath")
    if hp and hp.get("runs"):
        lines += [
            "## Hot path: before and after",
            "",
            "`bench/hotpath.py` calls the reader as Spark does (`latestOffset` -> `partitions` -> "
            "`read` of each partition on a pickled copy, receivers on threads), without Spark, "
            f"against {hp['runs'][0].get('server', '?')}; 500 messages per receiver per batch. "
            f"*Before* is the branch's base commit `{hp.get('base_ref')}`, *after* this tree, "
            "both measured in this run. Driver ms: `latestOffset` + `partitions` per batch, "
            "which is where the previous batch's deletes run. The harness runs its receivers as "
            "threads of one process (one GIL), so its msgs/s columns swing with the machine's "
            "load; driver ms is what the driver-side change targets.",
            "",
            "| config | version | messages | msgs/s (all) | receiver msgs/s | driver ms/batch "
            "(median) |",
            "| --- | --- | ---: | ---: | ---: | ---: |",
        ]
        for r in hp["runs"]:
            if "error" in r:
                lines.append(f"| {r['config']} | {r['version']} | failed | | | |")
                continue
            lines.append(
                f"| {r['config']} | {r['version']} | {r['messages']} | {_f(r['end_to_end_rate'])} "
                f"| {_f(r['receiver_rate'])} | {_f(r['driver_ms_median'])} |"
            )
        lines.append("")
        after = [r for r in hp["runs"] if r.get("version") == "after" and "error" not in r]
        if after:
            b = after[0]["profile_seconds_by_bucket"]
            total = sum(b.values()) or 1
            lines += [
                f"Where the profiled thread's time goes ({after[0]['config']}, after; cProfile "
                "`tottime` by module):",
                "",
                "| where | share |",
                "| --- | ---: |",
                *[f"| {k} | {100 * s / total:.0f}% |" for k, s in b.items()],
                "",
            ]
        if plot_hotpath(hp, out_dir / "hotpath.png"):
            lines += ["![hot path](hotpath.png)", ""]
    if results.get("errors"):
        lines += ["## Errors in this run", ""]
        for e in results["errors"]:
            last = e["error"].strip().splitlines()[-1] if e["error"].strip() else ""
            lines.append(f"- `{e['section']}`: {last}")
        lines.append("")
    secs = results.get("section_seconds") or {}
    if secs:
        lines += [
            "Section durations (s): " + ", ".join(f"{k} {val}" for k, val in secs.items()),
            "",
        ]
    path = out_dir / "README.md"
    path.write_text("\n".join(lines))
    return path
