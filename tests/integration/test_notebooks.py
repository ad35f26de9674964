"""The local quickstart notebook runs as written (its code cells, in order, in a fresh process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart_local.ipynb"


def test_quickstart_notebook_runs(tmp_path: Path) -> None:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=600,
        # Where Jupyter starts the kernel: the notebook's own folder.
        cwd=NOTEBOOK.parent,
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "50 orders written" in result.stdout
    assert "left in the queue: 0 0" in result.stdout
    assert "50 orders read back from the second queue" in result.stdout
