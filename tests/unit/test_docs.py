"""The documented option table is the option table the code accepts, word for word."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devtools.options_doc import main as options_doc
from spark_sqs.options import (
    MARKDOWN_BEGIN,
    MARKDOWN_END,
    OPTIONS,
    render_markdown,
    rewrite_markdown,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "options.md"


def test_docs_option_table_is_the_rendered_option_table() -> None:
    text = DOC.read_text()
    assert rewrite_markdown(text) == text, "run: python -m devtools.options_doc"


def test_rendered_table_has_one_row_per_option_with_its_default() -> None:
    rows = {}
    for line in render_markdown().splitlines():
        match = re.match(r"^\| `([A-Za-z0-9]+)` \| [^|]+ \| (`[^`]*`)? \|", line)
        if match:
            rows[match.group(1)] = (match.group(2) or "").strip("`")
    assert rows == {o.name: o.default or "" for o in OPTIONS}
    assert len(rows) == len(OPTIONS)


def test_rendered_table_shows_kinds_ranges_and_rules() -> None:
    rendered = render_markdown()
    assert "| `numPartitions` | integer 1-1000 | `4` |" in rendered
    assert "| `queuePollInterval` | seconds 0.01-3600 | `1` |" in rendered
    assert "| `poisonMessagePolicy` | `fail` or `deadLetter` | `fail` |" in rendered
    row = next(line for line in rendered.splitlines() if line.startswith("| `deadLetterQueueUrl`"))
    assert "Only with `poisonMessagePolicy=deadLetter`." in row
    # An exclusion shows on both options' rows.
    for name, other in (("queueName", "queueUrl"), ("queueUrl", "queueName")):
        row = next(line for line in rendered.splitlines() if line.startswith(f"| `{name}`"))
        assert f"Not with `{other}`" in row


def test_a_changed_table_row_is_detected_and_rewritten(tmp_path: Path) -> None:
    stale = DOC.read_text().replace(
        "| `numPartitions` | integer 1-1000 | `4` |", "| `numPartitions` | integer | `8` |"
    )
    doc = tmp_path / "options.md"
    doc.write_text(stale)
    assert options_doc(["--check", "--path", str(doc)]) == 1
    assert options_doc(["--path", str(doc)]) == 0
    assert doc.read_text() == DOC.read_text()
    assert options_doc(["--check", "--path", str(doc)]) == 0


def test_rewrite_refuses_a_file_without_markers() -> None:
    with pytest.raises(ValueError, match="markers"):
        rewrite_markdown(DOC.read_text().replace(MARKDOWN_END, ""))
    with pytest.raises(ValueError, match="markers"):
        rewrite_markdown(DOC.read_text().replace(MARKDOWN_BEGIN, ""))
