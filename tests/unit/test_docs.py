"""The documented option table is the option table the code accepts."""

from __future__ import annotations

import re
from pathlib import Path

from spark_sqs.options import OPTIONS

DOC = Path(__file__).resolve().parents[2] / "docs" / "options.md"


def _documented() -> dict[str, str]:
    rows = {}
    for line in DOC.read_text().splitlines():
        match = re.match(r"^\| `([A-Za-z0-9]+)` \| (`[^`]*`)? \|", line)
        if match:
            rows[match.group(1)] = (match.group(2) or "").strip("`")
    return rows


def test_every_accepted_option_is_documented_with_its_default() -> None:
    documented = _documented()
    accepted = {o.name: o.default or "" for o in OPTIONS}
    assert documented == accepted
