"""The docs say what the code does: the documented option table is the option table the code
accepts, word for word, and every test the docs cite exists."""

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
from tests import REPO

DOC = REPO / "docs" / "options.md"


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


# -- tests the docs cite -------------------------------------------------------------------------

TESTS = REPO / "tests"
# `tests/unit/x/test_y.py`, `tests/unit/x/test_y.py::test_z`, or the short forms of the crash
# tables, `x/test_y::test_z…` and `test_y` (a file) or `test_z` (a test), where … stands for
# words left out.
CITATION = re.compile(r"(?<![\w/.-])((?:tests/)?(?:\w+/)*test_\w+(?:\.py)?)(?:::([\w…]+))?")


def _test_names(path: Path) -> set[str]:
    return set(re.findall(r"^\s*def (test_\w+)\(", path.read_text(), re.MULTILINE))


def cited_tests(text: str) -> list[tuple[str, str | None]]:
    """The tests that ``text`` cites in code spans: (file or test, name pattern or None)."""
    spans = re.findall(r"`([^`\n]+)`", text)
    return [(m.group(1), m.group(2)) for span in spans for m in CITATION.finditer(span)]


def unresolved(citations: list[tuple[str, str | None]]) -> list[str]:
    files = sorted(TESTS.rglob("test_*.py"))
    every_name = set().union(*(_test_names(f) for f in files))
    missing = []
    for cited, name in citations:
        stem = cited.removesuffix(".py")
        if stem.startswith("tests/"):
            candidates = [f for f in files if f == REPO / f"{stem}.py"]
        else:
            candidates = [f for f in files if f.with_suffix("").as_posix().endswith(f"/{stem}")]
        if name is None:
            # A bare `test_x`: a test file or a test function of that name.
            if not candidates and stem not in every_name:
                missing.append(cited)
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in name.split("…")))
        if not any(pattern.fullmatch(t) for f in candidates for t in _test_names(f)):
            missing.append(f"{cited}::{name}")
    return missing


def test_every_test_the_docs_cite_exists() -> None:
    texts = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    missing = {
        doc.name: found for doc in texts if (found := unresolved(cited_tests(doc.read_text())))
    }
    assert missing == {}


def test_a_citation_of_a_moved_or_renamed_test_is_caught() -> None:
    assert unresolved(cited_tests("`tests/unit/test_receiver.py`")) == [
        "tests/unit/test_receiver.py"
    ]
    assert unresolved(cited_tests("`executor/test_receiver::test_no_such…`")) == [
        "executor/test_receiver::test_no_such…"
    ]
    assert unresolved(cited_tests("`test_scale_out::test_a…`, `test_nothing_like_it`")) == [
        "test_scale_out::test_a…",
        "test_nothing_like_it",
    ]
    found = "`executor/test_receiver::…replay_yields_identical…`, `tests/unit/test_docs.py`"
    assert unresolved(cited_tests(found)) == []
