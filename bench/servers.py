"""The SQS endpoints under test, each in its own process: moto (embedded, locked, sped up, from
``devtools.local_sqs``), LocalStack (its own Python 3.13 virtualenv) and the delay proxy.

Own processes, so that the consumers being measured (a boto3 baseline in the bench process,
Spark's Python workers) never share a GIL with the server answering them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCALSTACK_VENV = ROOT / ".venv-localstack"
LOCALSTACK_REQUIREMENTS = ROOT / "requirements" / "localstack.txt"
LOCALSTACK_PYTHONS = ("python3.13",)


class Child:
    """A child process that prints ``<KEY> <value>`` once ready and exits when stdin closes."""

    def __init__(self, args: list[str], key: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith(key + " "):
            self.stop()
            raise RuntimeError(f"{args[:3]} did not start (said {line!r})")
        self.value = line.split(" ", 1)[1]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_moto() -> Child:
    """moto's SQS as ``devtools.local_sqs.MotoServer`` (serialised backend, strict handles)."""
    return Child([sys.executable, "-m", "bench.servers", "moto"], "ENDPOINT")


def start_proxy(upstream: str, delay: float) -> Child:
    return Child(
        [sys.executable, "-m", "bench.proxy", "--upstream", upstream, "--delay", str(delay)],
        "PORT",
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _find_python313() -> str | None:
    for name in LOCALSTACK_PYTHONS:
        found = shutil.which(name)
        if found:
            try:
                subprocess.run([found, "--version"], check=True, capture_output=True, timeout=30)
                return found
            except (subprocess.SubprocessError, OSError):
                pass
    pyenv = shutil.which("pyenv")
    if pyenv:
        try:
            root = subprocess.run(
                [pyenv, "root"], check=True, capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (subprocess.SubprocessError, OSError):
            return None
        for candidate in sorted(Path(root, "versions").glob("3.13*/bin/python3.13"), reverse=True):
            return str(candidate)
    return None


def ensure_localstack_venv(log: Path) -> Path:
    """Create ``.venv-localstack`` from the pinned requirements once; returns its python.

    Raises RuntimeError with the reason when it cannot.
    """
    python = LOCALSTACK_VENV / "bin" / "python"
    stamp = LOCALSTACK_VENV / ".bench-requirements"
    wanted = LOCALSTACK_REQUIREMENTS.read_text()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    base = _find_python313()
    if base is None:
        raise RuntimeError("LocalStack needs Python 3.13 (python3.13 not found on PATH or pyenv)")
    with open(log, "w") as out:
        steps = [
            [base, "-m", "venv", str(LOCALSTACK_VENV)],
            [str(python), "-m", "pip", "install", "-r", str(LOCALSTACK_REQUIREMENTS)],
        ]
        for step in steps:
            if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                raise RuntimeError(f"installing LocalStack failed (log: {log})")
    stamp.write_text(wanted)
    return python


class LocalStack:
    """LocalStack with SQS only, on a free loopback port, without Docker."""

    def __init__(self, python: Path, log: Path, timeout: float = 120.0) -> None:
        port = _free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        env = {
            **os.environ,
            "SERVICES": "sqs",
            "GATEWAY_LISTEN": f"127.0.0.1:{port}",
            # No DNS server, no usage events, a throwaway state directory.
            "DNS_ADDRESS": "0",
            "DISABLE_EVENTS": "1",
            "SKIP_SSL_CERT_DOWNLOAD": "1",
            "FILESYSTEM_ROOT": str(log.parent / "localstack-fs"),
        }
        self._log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(python), "-m", "localstack.runtime.main"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"LocalStack exited with {self.proc.returncode} (log: {log})")
            try:
                with urllib.request.urlopen(self.endpoint + "/_localstack/health", timeout=2) as r:
                    health = r.read()
                if b'"sqs": "available"' in health or b'"sqs": "running"' in health:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"LocalStack did not become healthy in {timeout:.0f}s")
            time.sleep(1)
        self.version = localstack_version(python)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def localstack_version(python: Path) -> str:
    out = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('localstack-core'))"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() or "unknown"


def _serve_moto() -> int:
    import logging

    from devtools.local_sqs import MotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = MotoServer()
    print(f"ENDPOINT {server.endpoint}", flush=True)
    try:
        sys.stdin.read()
    finally:
        server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["moto"]:
        return _serve_moto()
    raise SystemExit("usage: python -m bench.servers moto")


if __name__ == "__main__":
    raise SystemExit(main())
