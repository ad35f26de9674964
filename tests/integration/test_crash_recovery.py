"""The query process is killed with SIGKILL at several points and restarted from its checkpoint
after the visibility timeout: every message reaches the sink exactly once, the queue empties."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from devtools.local_sqs import RECEIVE_GATE
from spark_sqs.client import queue_counts
from tests.helpers import send_numbered, wait_until

pytestmark = pytest.mark.integration

VISIBILITY = 5
CHILD = Path(__file__).with_name("crash_child.py")


class Child:
    def __init__(self, tmp: Path, endpoint: str, queue_url: str, run: int) -> None:
        self.control = tmp / f"control-{run}"
        self.control.mkdir()
        self.log = tmp / f"child-{run}.log"
        self._args = [
            sys.executable,
            str(CHILD),
            "--endpoint",
            endpoint,
            "--queue-url",
            queue_url,
            "--journal",
            str(tmp / "journal"),
            "--checkpoint",
            str(tmp / "checkpoint"),
            "--out",
            str(tmp / "out"),
            "--control",
            str(self.control),
            "--visibility",
            str(VISIBILITY),
        ]
        self.process: subprocess.Popen[bytes] | None = None
        self.killed_at = 0.0

    def hold(self, point: str) -> None:
        (self.control / f"hold-{point}").write_text("")

    def start(self) -> None:
        repo = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=repo)
        with open(self.log, "wb") as log:
            # Its own session, so the whole tree (Python driver, JVM, Python workers) can be
            # killed at once, as a crashing driver node would be.
            self.process = subprocess.Popen(
                self._args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def wait_for(self, marker: str, timeout: float) -> None:
        def there() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"child exited early:\n{self.log.read_text()[-3000:]}")
            return (self.control / marker).exists()

        wait_until(there, timeout, f"the child to reach '{marker}'")

    def kill(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        self.killed_at = time.monotonic()

    def stop(self) -> None:
        assert self.process is not None
        (self.control / "stop").write_text("")
        try:
            self.process.wait(120)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)


def _sink_numbers(out: Path) -> list[int]:
    if not out.exists():
        return []
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    return sorted(json.loads(b)["n"] for b in table.column("body").to_pylist())


def _after_visibility_timeout(child: Child) -> None:
    wait_until(
        lambda: time.monotonic() > child.killed_at + VISIBILITY + 1,
        VISIBILITY + 10,
        "the visibility timeout to pass",
    )


def test_sigkill_at_each_point_then_restart_delivers_each_message_once(
    moto_endpoint: str, sqs: Any, queue_url: str, tmp_path: Path
) -> None:
    total = 100
    send_numbered(sqs, queue_url, total)
    out = tmp_path / "out"
    run = 0

    # 1. Killed while receiving: the first receives succeed, the next one hangs in SQS.
    run += 1
    child = Child(tmp_path, moto_endpoint, queue_url, run)
    RECEIVE_GATE.hold_after(2)
    try:
        child.start()
        assert RECEIVE_GATE.blocked.wait(240), "no receiver reached the held receive"
        child.kill()
    finally:
        RECEIVE_GATE.release()
    _after_visibility_timeout(child)

    # 2. Killed after the batch was journaled, before the sink wrote anything.
    # 3. Killed after the sink wrote the batch, before Spark committed and the source deleted.
    for point in ("before-sink", "after-sink"):
        run += 1
        child = Child(tmp_path, moto_endpoint, queue_url, run)
        child.hold(point)
        child.start()
        child.wait_for(f"at-{point}", 240)
        child.kill()
        assert list((tmp_path / "journal" / "batches").glob("*/*.arrow")), "nothing journaled"
        _after_visibility_timeout(child)

    # Restart and let it finish.
    run += 1
    child = Child(tmp_path, moto_endpoint, queue_url, run)
    child.start()
    try:
        wait_until(lambda: len(_sink_numbers(out)) >= total, 300, "all messages in the sink")
        wait_until(lambda: queue_counts(sqs, queue_url) == (0, 0), 120, "an empty queue")
    finally:
        child.stop()

    numbers = _sink_numbers(out)
    assert numbers == list(range(total)), (
        f"lost {sorted(set(range(total)) - set(numbers))}, "
        f"duplicated {sorted({n for n in numbers if numbers.count(n) > 1})}"
    )
