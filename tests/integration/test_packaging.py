"""The wheel holds the source and the license only: no development tools (devtools/, tests/,
bench/, chaos/), no module that imports moto or pytest, no hard PySpark requirement (clusters
bring their own), and dependency floors that are true (botocore 1.35.2 is the first with S3
PutObject IfNoneMatch). Installed into a clean virtualenv, ``import spark_sqs`` imports neither
moto nor pytest and the ``spark-sqs`` command sends to and inspects a queue; installed with its
own dependencies and no PySpark, the command still works and the source says what is
missing."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "lock-spark-4.3.txt"
TEST_ONLY = {"moto", "pytest"}

# Run in a fresh interpreter: which test-only modules does importing the package pull in?
IMPORTED_TEST_MODULES = """
import importlib, json, pkgutil, sys
import spark_sqs
modules = ["spark_sqs"] + [
    m.name for m in pkgutil.walk_packages(spark_sqs.__path__, "spark_sqs.")
]
loaded = {}
for name in modules:
    importlib.import_module(name)
    loaded[name] = sorted(m for m in sys.modules if m.split(".")[0] in ("moto", "pytest"))
print(json.dumps(loaded))
"""


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{args}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env.pop("PYTHONPATH", None)
    return env


def _is_lock_environment() -> bool:
    import pyspark

    return LOCK.exists() and f"pyspark=={pyspark.__version__}" in LOCK.read_text().splitlines()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # From a copy without build outputs: setuptools reuses a checkout's build/ directory, which
    # can hold modules that no longer exist in the source (a fresh clone has none).
    source = tmp_path_factory.mktemp("source") / "spark-sqs"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            "build", "dist", ".venv*", "*.egg-info", ".git", "__pycache__", ".pytest_cache"
        ),
    )
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        out,
        _clean_env(),
    )
    return next(out.glob("spark_sqs-*.whl"))


def _imported_modules(source: str) -> set[str]:
    """Top-level names of every module a Python file imports (absolute imports only: relative
    ones stay inside the package)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value.split(".")[0])
    return names


def test_wheel_holds_the_source_only(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        sources = {n: archive.read(n).decode() for n in names if n.endswith(".py")}
        metadata = next(archive.read(n).decode() for n in names if n.endswith("/METADATA"))
        entry_points = next(
            archive.read(n).decode() for n in names if n.endswith("/entry_points.txt")
        )

    assert "spark_sqs/source.py" in names and "spark_sqs/_compat.py" in names
    assert "spark_sqs/local_sqs.py" not in names and "spark_sqs/demo.py" not in names
    tops = {n.split("/")[0] for n in names}
    assert tops == {"spark_sqs", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    assert not any(n.startswith(("devtools/", "tests/", "bench/", "chaos/", "sim/")) for n in names)

    importing = {n: _imported_modules(s) & TEST_ONLY for n, s in sources.items()}
    assert {n: m for n, m in importing.items() if m} == {}
    # The check sees imports at all: the source imports pyspark and boto3.
    assert {"pyspark", "boto3"} <= _imported_modules(sources["spark_sqs/source.py"]) | (
        _imported_modules(sources["spark_sqs/sqs/client.py"])
    )

    # PySpark only through extras: `pip install spark-sqs` keeps a cluster's own PySpark.
    requires = [
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    pyspark = [r for r in requires if r.startswith("pyspark")]
    assert pyspark and all("extra ==" in r for r in pyspark), requires
    assert any('extra == "spark"' in r for r in pyspark), pyspark
    assert "Provides-Extra: spark" in metadata
    assert "spark-sqs = spark_sqs.cli:main" in entry_points

    # The license: its SPDX id in the metadata, its full text in the wheel.
    assert "License-Expression: Apache-2.0" in metadata
    licenses = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert len(licenses) == 1, names
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(licenses[0]).decode()
    assert text == (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert "boto3>=1.35.2" in requires and "botocore>=1.35.2" in requires, requires


def test_import_spark_sqs_imports_neither_moto_nor_pytest() -> None:
    # In this (development) environment moto and pytest are installed: nothing may pull them in.
    out = _run([sys.executable, "-c", IMPORTED_TEST_MODULES], ROOT, _clean_env(), timeout=120)
    loaded = json.loads(out)
    assert "spark_sqs.cli" in loaded and "spark_sqs._compat" in loaded
    assert {name: mods for name, mods in loaded.items() if mods} == {}


# Once is enough: run it in the environment of the lock file the clean venv is built from.
@pytest.mark.skipif(not _is_lock_environment(), reason="runs with the 4.3 lock's PySpark only")
def test_wheel_in_a_clean_venv_imports_no_test_tools_and_its_command_works(
    wheel: Path, tmp_path: Path, moto_endpoint: str, queue_url: str
) -> None:
    env = _clean_env()
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    python = venv / "bin" / "python"
    # The lock holds moto and pytest too: the check below means something only if they are there.
    _run([str(python), "-m", "pip", "install", "-q", "-r", str(LOCK)], tmp_path, env)
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], tmp_path, env)

    where = _run([str(python), "-c", "import spark_sqs; print(spark_sqs.__file__)"], tmp_path, env)
    assert where.startswith(str(venv)), where
    loaded = json.loads(_run([str(python), "-c", IMPORTED_TEST_MODULES], tmp_path, env))
    assert "spark_sqs.cli" in loaded
    assert {name: mods for name, mods in loaded.items() if mods} == {}
    no_devtools = subprocess.run(
        [str(python), "-c", "import devtools"], cwd=tmp_path, env=env, capture_output=True
    )
    assert no_devtools.returncode != 0

    command = str(venv / "bin" / "spark-sqs")
    endpoint = ["--queue-url", queue_url, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    aws = dict(env, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    assert "sent 25 messages" in _run([command, "send", *endpoint, "--count", "25"], tmp_path, aws)
    report = json.loads(_run([command, "inspect", *endpoint], tmp_path, aws))
    assert report["visible"] == 25
    demo = subprocess.run([command, "demo"], cwd=tmp_path, env=aws, capture_output=True, text=True)
    assert demo.returncode == 2 and "invalid choice: 'demo'" in demo.stderr


WITHOUT_PYSPARK = """
import importlib.util, sys
assert importlib.util.find_spec("pyspark") is None, "pyspark is installed"
import botocore, spark_sqs
print("botocore", botocore.__version__)
try:
    from spark_sqs import SqsDataSource
except ImportError as exc:
    print("source:", exc)
"""


@pytest.mark.skipif(not _is_lock_environment(), reason="runs with the 4.3 lock's PySpark only")
def test_wheel_with_its_own_dependencies_and_no_pyspark_runs_the_command(
    wheel: Path, tmp_path: Path, moto_endpoint: str, queue_url: str
) -> None:
    env = _clean_env()
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    python = venv / "bin" / "python"
    # pip resolves the wheel's own requirements: boto3, botocore, pyarrow; no PySpark.
    _run([str(python), "-m", "pip", "install", "-q", str(wheel)], tmp_path, env)
    out = _run([str(python), "-c", WITHOUT_PYSPARK], tmp_path, env)
    assert "source: spark-sqs needs PySpark" in out and "spark-sqs[spark]" in out, out

    command = str(venv / "bin" / "spark-sqs")
    endpoint = ["--queue-url", queue_url, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    aws = dict(env, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    assert "sent 3 messages" in _run([command, "send", *endpoint, "--count", "3"], tmp_path, aws)
    assert json.loads(_run([command, "inspect", *endpoint], tmp_path, aws))["visible"] == 3
