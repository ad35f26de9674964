"""What a sink has committed. Runs in: the harness (no Spark needed).

Spark's file sink writes data files first and then records them in ``_spark_metadata/<batch>``.
A query killed between the two leaves data files that were never committed; a reader that lists
the directory would count their rows twice. This reader takes the files the metadata log names,
as Spark's own reader does: the newest ``<n>.compact`` file plus every batch file after it.

The write-then-skip sink of the cluster scenarios (``chaos/child.py``) commits a batch by
renaming its attempt's folder to ``batches/<id>``; only those folders count.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq


def committed_files(sink: Path) -> list[tuple[int, Path]]:
    """``(batch id, data file)`` for every file the sink committed, in batch order. Files from
    a compacted log carry the compaction's batch id."""
    log = sink / "_spark_metadata"
    if not log.is_dir():
        return []
    batches: dict[int, Path] = {}
    compacts: dict[int, Path] = {}
    for entry in log.iterdir():
        name = entry.name
        if name.startswith(".") or name.endswith(".tmp"):
            continue
        if name.endswith(".compact"):
            compacts[int(name[: -len(".compact")])] = entry
        elif name.isdigit():
            batches[int(name)] = entry
    start = max(compacts) if compacts else -1
    logs = [(start, compacts[start])] if compacts else []
    logs += [(n, batches[n]) for n in sorted(batches) if n > start]
    files: dict[str, tuple[int, Path]] = {}
    for batch, entry in logs:
        lines = entry.read_text(encoding="utf-8").splitlines()
        for line in lines[1:]:  # the first line is the log version, e.g. "v1"
            if not line.strip():
                continue
            record = json.loads(line)
            path = Path(unquote(urlparse(record["path"]).path))
            if record.get("action", "add") == "delete":
                files.pop(str(path), None)
            else:
                files[str(path)] = (batch, path)
    return sorted(files.values())


def committed_batches(sink: Path, columns: list[str]) -> list[tuple[int, list[dict[str, Any]]]]:
    """The rows of every committed file, with its batch id, in batch order."""
    result = []
    for batch, path in committed_files(sink):
        if os.path.getsize(path) == 0:
            continue
        result.append((batch, pq.read_table(path, columns=columns).to_pylist()))
    return result


def write_then_skip_batches(
    out: Path, columns: list[str]
) -> list[tuple[int, list[dict[str, Any]]]]:
    """The rows the write-then-skip sink (``chaos/child.py``) committed: ``batches/<id>``
    folders only, never the ``attempts/`` a killed run or a skipped replay left, in batch
    order."""
    batches = out / "batches"
    if not batches.is_dir():
        return []
    result = []
    for folder in sorted((p for p in batches.iterdir() if p.name.isdigit()), key=_batch_id):
        for path in sorted(folder.glob("part-*.parquet")):
            if os.path.getsize(path) == 0:
                continue
            result.append((int(folder.name), pq.read_table(path, columns=columns).to_pylist()))
    return result


def skipped_batches(out: Path) -> int:
    """Batches the write-then-skip sink ran again and dropped (replays of committed ids)."""
    skipped = out / "skipped"
    return len(list(skipped.iterdir())) if skipped.is_dir() else 0


def _batch_id(folder: Path) -> int:
    return int(folder.name)
