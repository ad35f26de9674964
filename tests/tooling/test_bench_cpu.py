"""``make bench``'s CPU per message by process: a process that exits before the run ends (Spark's
source runner stops with its query) still counts, the server and the proxy are kept apart from
the consumer's processes, and the report's table sums each side."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench.report import cpu_table
from bench.run import CPU_ROLES, CpuSampler

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")

# Burns about half a second of CPU, says so, then waits to be told to exit.
BURN = (
    "import sys, time\n"
    "end = time.process_time() + 0.5\n"
    "while time.process_time() < end: pass\n"
    "print('burnt', flush=True)\n"
    "sys.stdin.readline()\n"
)


def _idle_child() -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.readline()"], stdin=subprocess.PIPE
    )


def test_a_process_that_exits_before_the_end_still_counts_and_servers_are_kept_apart() -> None:
    server, proxy = _idle_child(), _idle_child()
    try:
        sampler = CpuSampler(server.pid, proxy.pid, interval=0.05)
        worker = subprocess.Popen(
            [sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert worker.stdout is not None and worker.stdout.readline().strip() == "burnt"
        # Once the sampler has sampled twice after the burn, it has seen it; then the process goes.
        seen = sampler.samples + 2
        deadline = time.monotonic() + 30
        while sampler.samples < seen and time.monotonic() < deadline:
            time.sleep(0.01)
        worker.communicate("\n", timeout=30)
        cpu = sampler.stop(messages=1000)
    finally:
        for child in (server, proxy):
            child.communicate(b"\n", timeout=30)
    # 0.5 s over 1,000 messages is 0.5 ms each; the child ran under this process, not the JVM.
    assert cpu["Python workers"] >= 0.4
    assert cpu["sqs server"] < 0.1 and cpu["delay proxy"] < 0.1
    assert set(cpu) == set(CPU_ROLES), "every role reported, none else"


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_plain_consumers_processes_are_counted_apart_from_sparks_workers() -> None:
    import multiprocessing

    server, proxy = _idle_child(), _idle_child()
    try:
        sampler = CpuSampler(server.pid, proxy.pid, interval=0.05)
        child = multiprocessing.get_context("spawn").Process(target=_burn, args=(0.5,))
        child.start()
        child.join(60)
        cpu = sampler.stop(messages=1000)
    finally:
        for idle in (server, proxy):
            idle.communicate(b"\n", timeout=30)
    assert child.exitcode == 0
    assert cpu["plain consumer's processes"] >= 0.4
    assert cpu["Python workers"] < 0.1


def test_the_report_sets_the_workers_beside_the_plain_consumers_processes() -> None:
    from bench.report import cpu_processes_lines

    def pair(workers: float, processes: float | None) -> dict:
        out = _pair(0.5, workers)
        if processes is not None:
            role = {"plain consumer's processes": processes}
            out["plain_processes"] = {"cpu_ms_per_message": role}
        return out

    row = {"receivers": 16, "pairs": [pair(0.33, 0.3), pair(0.4, None), pair(0.36, 0.24)]}
    lines = cpu_processes_lines([row])
    assert "| 16 | 1 | 0.300 | 0.200 | 0.330 | 1.10 |" in lines
    assert "| 16 | 3 | 0.240 | 0.200 | 0.360 | 1.50 |" in lines
    assert not any(line.startswith("| 16 | 2 ") for line in lines)
    assert lines[-1].endswith("median 1.30 of 1.10, 1.50")
    assert cpu_processes_lines([{"receivers": 4, "pairs": [pair(0.3, None)]}]) == []


def test_the_table_sums_every_process_and_the_consumer_side_apart() -> None:
    cpu = {
        "sqs server": 0.3,
        "delay proxy": 0.1,
        "bench process": 0.2,
        "JVM": 0.0,
        "source runner": 0.0,
        "Python workers": 0.0,
    }
    source = {
        **cpu,
        "bench process": 0.01,
        "JVM": 0.1,
        "source runner": 0.02,
        "Python workers": 0.4,
    }
    row = {
        "proxied": True,
        "receivers": 16,
        "baseline": {"cpu_ms_per_message": cpu},
        "source": {"cpu_ms_per_message": source},
    }
    lines = cpu_table([row])
    assert lines[2].endswith("| 0.600 | 0.200 |")  # baseline: all, all but server and proxy
    assert lines[3].endswith("| 0.930 | 0.530 |")
    assert cpu_table([{**row, "baseline": {"rate": 1.0}}]) == []


def test_the_jvms_threads_are_grouped_by_name_and_a_thread_that_ended_counts_nothing() -> None:
    from bench.per_message import _jvm_seconds, jvm_threads_cpu_per_message

    before = {
        (1, 10): ("C2 CompilerThre", 1.0),
        (1, 11): ("C1 CompilerThre", 0.5),
        (1, 12): ("Executor task l", 2.0),
        (1, 13): ("GC Thread#0", 0.1),
    }
    after = {
        (1, 10): ("C2 CompilerThre", 2.0),
        (1, 11): ("C1 CompilerThre", 1.0),
        (1, 12): ("Executor task l", 2.5),
        (1, 14): ("Executor task l", 0.25),
        (1, 15): ("GC Thread#1", 0.0),
    }
    per_message = jvm_threads_cpu_per_message(before, after, messages=1000)
    # C1 and C2 are one group; GC threads spent nothing new and the ended one is not subtracted.
    assert per_message == {"C CompilerThre": 1.5, "Executor task l": 0.75}
    assert list(per_message) == ["C CompilerThre", "Executor task l"]
    assert _jvm_seconds(before, after) == {"all": 2.25, "jit_compilers": 1.5}


def test_the_cpu_of_a_batch_is_counted_by_role() -> None:
    from bench.per_message import _role_seconds

    before = {"JVM": {5: 1.0}, "Python workers": {7: 1.0, 8: 2.0}}
    after = {"JVM": {5: 1.5}, "Python workers": {7: 1.25, 9: 0.5}, "sqs server": {3: 0.0}}
    assert _role_seconds(before, after) == {"JVM": 0.5, "Python workers": 0.75, "sqs server": 0.0}


def _pair(base_all: float, workers: float, threads: float = 0.2) -> dict:
    """A pair of windows: the plain consumer's CPU (``base_all`` in all, ``threads`` of it in
    its threads) and the source's (all in its workers)."""
    baseline = {"cpu_ms_per_message": {"sqs server": base_all - threads, "bench process": threads}}
    source = {"cpu_ms_per_message": {"Python workers": workers}}
    return {"baseline": baseline, "source": source}


def test_the_targets_are_judged_on_the_median_of_the_interleaved_pairs() -> None:
    from bench.report import ALL_PROCESSES, WORKERS_THREADS, cpu_measure, cpu_measures

    pairs = [_pair(0.5, 0.75), _pair(0.5, 0.6), _pair(0.4, 0.8)]
    row = {"receivers": 16, **pairs[0], "pairs": pairs}
    # Each pair's ratio in the order they ran; the median, not the pair the row shows.
    assert cpu_measures([row], 16, ALL_PROCESSES) == [1.5, 1.2, 2.0]
    assert cpu_measure([row], 16, ALL_PROCESSES) == 1.5
    assert cpu_measure([row], 16, WORKERS_THREADS) == 3.75
    # Results written before pairs were repeated: the row's one pair.
    assert cpu_measures([{"receivers": 16, **pairs[2]}], 16, ALL_PROCESSES) == [2.0]
    assert cpu_measure([row], 4, ALL_PROCESSES) is None


def test_the_pair_shown_is_the_one_whose_ratio_is_the_median() -> None:
    from bench.per_message import all_processes_ratio, median_pair

    assert median_pair([1.5, 1.2, 2.0]) == 0
    assert median_pair([1.3, 1.2]) == 1  # the lower middle one of an even number
    assert median_pair([None, 1.4, 1.1, 1.2]) == 3  # a pair without a ratio counts last
    assert median_pair([None]) == 0
    pair = _pair(0.5, 0.75)
    assert all_processes_ratio(pair["baseline"], pair["source"]) == 1.5
    assert all_processes_ratio({}, pair["source"]) is None


def test_the_jit_has_settled_after_two_batches_in_a_row_with_a_small_share() -> None:
    from bench.per_message import jit_settled

    def batch(jit: float) -> dict[str, float]:
        return {"all": 1.0, "jit_compilers": jit}

    assert not jit_settled([], 0.2)
    assert not jit_settled([batch(0.1)], 0.2)
    assert not jit_settled([batch(0.1), batch(0.5), batch(0.1)], 0.2)
    assert jit_settled([batch(0.6), batch(0.2), batch(0.1)], 0.2)
