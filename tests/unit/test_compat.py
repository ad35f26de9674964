"""The first use of the source (``from spark_sqs import SqsDataSource``) checks PySpark's
streaming Python Data Source API itself, not the version: with the API present (the real
PySpark, also when it reports 3.5 as some Databricks runtimes do) it imports; with the classes
absent (a fake ``pyspark`` package first on ``sys.path``) or no PySpark at all, it raises an
ImportError naming what is missing and the fix. ``import spark_sqs`` and the ``spark-sqs``
command need no PySpark. An ``s3://`` journal checks that botocore's S3 model has PutObject's
``IfNoneMatch`` (an older model is put first on botocore's own data path)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_sqs import _compat
from spark_sqs.errors import SqsSourceError

ROOT = Path(__file__).resolve().parents[2]

# Imports the package the way a user does and reports an ImportError on stdout.
IMPORT = """
import sys
try:
    import spark_sqs
    spark_sqs.SqsDataSource
except ImportError as exc:
    print(type(exc).__name__, isinstance(exc, ImportError))
    print(exc)
    sys.exit(3)
print("imported", spark_sqs.SqsDataSource.name())
"""


def _import_spark_sqs(
    *path: Path, python_flags: tuple[str, ...] = (), prelude: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, path), str(ROOT)])
    return subprocess.run(
        [sys.executable, *python_flags, "-c", prelude + IMPORT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _fake_pyspark(root: Path, version: str, datasource: str | None) -> Path:
    """A ``pyspark`` package reporting ``version``; ``datasource`` is the source of its
    ``pyspark/sql/datasource.py`` (None: no such module, as in open-source PySpark 3.5)."""
    package = root / "pyspark"
    (package / "sql").mkdir(parents=True)
    (package / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (package / "sql" / "__init__.py").write_text("")
    if datasource is not None:
        (package / "sql" / "datasource.py").write_text(datasource)
    return root


def test_api_present_imports_in_process() -> None:
    _compat.require_streaming_data_source_api()  # the installed PySpark has the API
    assert issubclass(_compat.StreamingApiMissingError, ImportError)
    assert issubclass(_compat.StreamingApiMissingError, SqsSourceError)


def test_api_present_but_version_says_3_5_imports() -> None:
    # Some Databricks runtimes report PySpark 3.5 and ship DataSourceStreamReader.
    prelude = (
        "import pyspark, pyspark.version\n"
        "pyspark.__version__ = pyspark.version.__version__ = '3.5.0'\n"
    )
    result = _import_spark_sqs(prelude=prelude)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "imported sqs" in result.stdout


def test_classes_absent_names_each_missing_class_and_the_fix(tmp_path: Path) -> None:
    fake = _fake_pyspark(tmp_path, "3.5.0", "class DataSource:\n    pass\n")
    result = _import_spark_sqs(fake)
    assert result.returncode == 3, result.stdout + result.stderr
    kind, message = result.stdout.split("\n", 1)
    assert kind == "StreamingApiMissingError True"
    assert "lacks DataSourceStreamReader, InputPartition." in message
    assert "PySpark 3.5.0 at " + str(fake / "pyspark" / "__init__.py") in message
    assert "pip install 'spark-sqs[spark]'" in message
    assert "Databricks Runtime 15.3+ or PySpark 4.0+" in message


def test_datasource_module_absent_names_the_module(tmp_path: Path) -> None:
    fake = _fake_pyspark(tmp_path, "3.5.1", None)
    result = _import_spark_sqs(fake)
    assert result.returncode == 3, result.stdout + result.stderr
    message = result.stdout
    assert "PySpark 3.5.1" in message
    assert "has no module 'pyspark.sql.datasource'" in message
    assert "missing: DataSource, DataSourceStreamReader, InputPartition" in message
    assert "spark-sqs[spark]" in message


def test_no_pyspark_at_all_says_so_before_any_other_import() -> None:
    # -S: no site-packages, so neither pyspark nor boto3 nor pyarrow can be found. The check
    # runs first, so the error names pyspark, not whichever dependency would be imported first.
    result = _import_spark_sqs(python_flags=("-S",))
    assert result.returncode == 3, result.stdout + result.stderr
    message = result.stdout
    assert "has no module 'pyspark'" in message
    assert sys.executable in message
    assert "pip install 'spark-sqs[spark]'" in message
    assert "Databricks Runtime 15.3+" in message


@pytest.mark.parametrize("missing", ["DataSource", "DataSourceStreamReader", "InputPartition"])
def test_each_required_class_is_checked(tmp_path: Path, missing: str) -> None:
    present = [n for n in _compat.REQUIRED if n != missing]
    fake = _fake_pyspark(tmp_path, "3.5.0", "".join(f"class {n}:\n    pass\n" for n in present))
    result = _import_spark_sqs(fake)
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"lacks {missing}." in result.stdout


def test_the_lock_files_install_pyspark_for_local_use() -> None:
    # pyproject requires PySpark only in extras; make venv, make test-oldest and CI install the
    # lock files with the package itself --no-deps, so each lock must pin its own PySpark.
    for spark in ("4.0", "4.3"):
        lines = (ROOT / "requirements" / f"lock-spark-{spark}.txt").read_text().splitlines()
        pins = [line for line in lines if line.startswith("pyspark==")]
        assert len(pins) == 1 and pins[0].startswith(f"pyspark=={spark}."), pins


# The command's help and the package without PySpark: a Python where `import pyspark` fails.
WITHOUT_PYSPARK = """
import sys
sys.modules["pyspark"] = None
import spark_sqs, spark_sqs.cli
try:
    spark_sqs.cli.main(["--help"])
except SystemExit as done:
    print("help exit", done.code)
try:
    from spark_sqs import SqsDataSource
except ImportError as exc:
    print("source:", exc)
"""


def test_the_command_and_the_package_work_without_pyspark() -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_PYSPARK],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "usage: spark-sqs" in result.stdout and "help exit 0" in result.stdout
    assert "source: spark-sqs needs PySpark" in result.stdout


# botocore reads models from AWS_DATA_PATH before its own: an S3 model whose PutObject lacks
# IfNoneMatch is what botocore before 1.35.2 has.
OLD_S3_MODEL = """
import gzip, json, os, pathlib, botocore
source = pathlib.Path(botocore.__file__).parent / "data/s3/2006-03-01/service-2.json.gz"
model = json.loads(gzip.decompress(source.read_bytes()))
del model["shapes"]["PutObjectRequest"]["members"]["IfNoneMatch"]
target = pathlib.Path(os.environ["AWS_DATA_PATH"]) / "s3/2006-03-01"
target.mkdir(parents=True)
(target / "service-2.json").write_text(json.dumps(model))
"""

CHECK_S3_JOURNAL = """
from spark_sqs.options import SqsOptions
try:
    SqsOptions.parse({"queueUrl": "https://sqs.us-east-1.amazonaws.com/1/q",
                      "journalLocation": "s3://bucket/j"}, env={})
    print("accepted")
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_an_s3_journal_with_a_botocore_without_if_none_match_names_the_version(
    tmp_path: Path,
) -> None:
    env = dict(os.environ, AWS_DATA_PATH=str(tmp_path / "models"))
    run = {"cwd": ROOT, "env": env, "capture_output": True, "text": True, "timeout": 120}
    made = subprocess.run([sys.executable, "-c", OLD_S3_MODEL], **run)
    assert made.returncode == 0, made.stderr
    result = subprocess.run([sys.executable, "-c", CHECK_S3_JOURNAL], **run)
    import botocore

    assert result.stdout.startswith("OldBotocoreError"), result.stdout + result.stderr
    assert f"botocore {botocore.__version__}" in result.stdout
    assert "from 1.35.2" in result.stdout and "botocore>=1.35.2" in result.stdout
    # The real model has it: the same journal is accepted.
    env.pop("AWS_DATA_PATH")
    assert subprocess.run([sys.executable, "-c", CHECK_S3_JOURNAL], **run).stdout == "accepted\n"
