"""``import spark_sqs`` checks PySpark's streaming Python Data Source API itself, not the version:
with the API present (the real PySpark, also when it reports 3.5 as some Databricks runtimes do)
it imports; with the classes absent (a fake ``pyspark`` package first on ``sys.path``) or no
PySpark at all, it raises an ImportError naming what is missing and the fix."""

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
    assert "Databricks Runtime 15.2+ or PySpark 4.0+" in message


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
    assert "Databricks Runtime 15.2+" in message


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
