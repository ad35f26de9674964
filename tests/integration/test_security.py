"""No credential, session token or receipt handle leaks: a query runs with distinctive fake
credentials and every output a person or a tool could see is searched for them (DEBUG logs of the
``spark_sqs`` loggers in every process, all process output, exception texts, the checkpoint's
offsets and commits, progress reports, the journal's non-entry files, the sink). The journal,
which must hold receipt handles, is readable by its owner only. The demo's output is searched too.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import send_numbered

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("security_child.py")
ACCESS_KEY = "AKIASPARKSQSLEAKTEST"
SECRET = "sEcReT/spark-sqs+leak-test/" + uuid.uuid4().hex
TOKEN = "ToKeN//spark-sqs-session-" + uuid.uuid4().hex + "=="
# Every process that imports this (Spark's Python workers inherit PYTHONPATH) sends the
# spark_sqs loggers' records, DEBUG and up, to one file.
SITECUSTOMIZE = """
import logging, os
_path = os.environ.get("SPARK_SQS_TEST_LOG")
if _path:
    _handler = logging.FileHandler(_path)
    _handler.setFormatter(logging.Formatter("%(process)d %(levelname)s %(name)s: %(message)s"))
    _logger = logging.getLogger("spark_sqs")
    _logger.setLevel(logging.DEBUG)
    _logger.addHandler(_handler)
"""
# moto's receipt handles (185 lowercase letters), for output where we have no recording.
MOTO_HANDLE = re.compile(r"[a-z]{185}")


@pytest.fixture
def issued_handles(monkeypatch) -> list[str]:
    """Every receipt handle the test server hands out while the test runs."""
    from moto.sqs.models import SQSBackend

    handles: list[str] = []
    original = SQSBackend.receive_message

    def receive_message(self: Any, *args: Any, **kwargs: Any) -> Any:
        messages = original(self, *args, **kwargs)
        handles.extend(m.receipt_handle for m in messages)
        return messages

    monkeypatch.setattr(SQSBackend, "receive_message", receive_message)
    return handles


def files_under(root: Path, skip: re.Pattern[str] | None = None) -> dict[str, bytes]:
    return {
        str(p): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not (skip and skip.search(str(p.relative_to(root))))
    }


def assert_nothing_leaks(outputs: dict[str, bytes], handles: list[str]) -> None:
    secrets = {"secret access key": SECRET, "session token": TOKEN, "access key id": ACCESS_KEY}
    for name, data in outputs.items():
        text = data.decode("utf-8", errors="replace")
        for what, value in secrets.items():
            assert value not in text, f"{what} in {name}"
        leaked = [h for h in handles if h in text]
        assert not leaked, f"{len(leaked)} receipt handles in {name}"
        assert not MOTO_HANDLE.search(text), f"something like a receipt handle in {name}"


def run_child(tmp: Path, endpoint: str, queue_url: str, messages: int) -> dict[str, Path]:
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    paths = {
        "log": tmp / "spark_sqs-debug.log",
        "output": tmp / "child-output.txt",
        "journal": tmp / "journal",
        "checkpoint": tmp / "checkpoint",
        "out": tmp / "out",
    }
    paths["out"].mkdir()
    env = dict(
        os.environ,
        PYTHONPATH=f"{site}{os.pathsep}{REPO}",
        SPARK_SQS_TEST_LOG=str(paths["log"]),
        TEST_KEY=ACCESS_KEY,
        TEST_SECRET=SECRET,
        TEST_TOKEN=TOKEN,
    )
    command = [sys.executable, str(CHILD), "--messages", str(messages), "--endpoint", endpoint]
    command += ["--queue-url", queue_url]
    for name in ("journal", "checkpoint", "out"):
        command += [f"--{name}", str(paths[name])]
    with open(paths["output"], "wb") as output:
        code = subprocess.run(
            command, env=env, stdout=output, stderr=subprocess.STDOUT, timeout=600
        ).returncode
    assert code == 0, paths["output"].read_text()[-5000:]
    return paths


def test_no_credential_or_receipt_handle_in_any_output(
    moto_endpoint, sqs, queue_url, tmp_path, issued_handles
):
    messages = 40
    send_numbered(sqs, queue_url, messages)
    paths = run_child(tmp_path, moto_endpoint, queue_url, messages)
    out = paths["out"]

    journaled = json.loads((out / "handles.json").read_text())
    assert len(issued_handles) >= messages and set(journaled) <= set(issued_handles)

    log = paths["log"].read_text()
    # DEBUG logging really reached the source runner and the executors' workers.
    assert "received and journaled" in log and "batch 1:" in log
    assert len({line.split(" ", 1)[0] for line in log.splitlines() if line[:1].isdigit()}) >= 2

    errors = json.loads((out / "errors.json").read_text())
    assert "no-such-queue does not exist" in errors[0]
    assert all("Fix:" in e for e in errors), errors

    outputs = {
        "debug log": log.encode(),
        "process output (driver, JVM, workers)": paths["output"].read_bytes(),
        "exceptions": (out / "errors.json").read_bytes(),
        "progress reports": (out / "progress.json").read_bytes(),
        # Offsets, commits, metadata and source logs of the checkpoint.
        **files_under(paths["checkpoint"]),
        # Everything in the journal except entries (batches/), which must hold the handles.
        **files_under(paths["journal"], skip=re.compile(r"^batches/")),
        **files_under(out / "sink"),
    }
    assert any("/offsets/" in name for name in outputs) and any("/commits/" in n for n in outputs)
    # The batches' counters (in their acknowledged markers) are scanned too.
    assert any("/state/acked-" in n and b'"metrics"' in data for n, data in outputs.items())
    assert_nothing_leaks(outputs, issued_handles)

    # Private journal: files 0600 and directories 0700, entries written by executors included,
    # although the query ran with umask 022.
    modes = json.loads((out / "modes.json").read_text())
    assert any(name.endswith(".arrow") and name.startswith("batches/") for name in modes)
    journal = paths["journal"]
    for name, (mode, is_dir) in modes.items():
        assert mode == (0o700 if is_dir else 0o600), f"{name}: {oct(mode)}"
    for path in [journal, *journal.rglob("*")]:
        expected = 0o700 if path.is_dir() else 0o600
        assert stat.S_IMODE(path.stat().st_mode) == expected, str(path)


def test_demo_output_shows_no_credentials_or_receipt_handles(tmp_path):
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        AWS_ACCESS_KEY_ID=ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_SESSION_TOKEN=TOKEN,
    )
    workdir = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "devtools.demo", "--messages", "60", "--rate", "100"]
        + ["--receivers", "1", "--timeout", "300", "--workdir", str(workdir)],
        env=env,
        capture_output=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output.decode(errors="replace")[-5000:]
    assert b"EXACTLY ONCE" in output
    outputs = {
        "demo output": output,
        **files_under(workdir / "checkpoint"),
        **files_under(workdir / "journal", skip=re.compile(r"^batches/")),
    }
    assert_nothing_leaks(outputs, [])
