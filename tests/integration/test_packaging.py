"""The wheel builds, installs into a clean virtualenv, and its `spark-sqs demo` passes."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "lock-spark-4.3.txt"


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{args}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def _is_lock_environment() -> bool:
    import pyspark

    return LOCK.exists() and f"pyspark=={pyspark.__version__}" in LOCK.read_text().splitlines()


# Once is enough: run it in the environment of the lock file the clean venv is built from.
@pytest.mark.skipif(not _is_lock_environment(), reason="runs with the 4.3 lock's PySpark only")
def test_wheel_installs_in_a_clean_venv_and_runs_the_demo(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env.pop("PYTHONPATH", None)
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        tmp_path,
        env,
    )
    wheel = next(tmp_path.glob("spark_sqs-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "spark_sqs/source.py" in names
    # Tests and the simulator (sim/, docs/simulation.md) never ship.
    assert not any(n.startswith(("tests/", "sim/")) for n in names)

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", "-r", str(LOCK)], tmp_path, env)
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], tmp_path, env)

    out = _run(
        [
            str(venv / "bin" / "spark-sqs"),
            "demo",
            "--messages",
            "100",
            "--rate",
            "100",
            "--workdir",
            str(tmp_path / "demo"),
        ],
        tmp_path,
        env,
    )
    assert "EXACTLY ONCE" in out, out[-2000:]
