"""bench/report.py keeps the hand-kept "current results" block of README.md when it rewrites
the generated report."""

from __future__ import annotations

from pathlib import Path

from bench.report import CURRENT_BEGIN, CURRENT_END, _current_results


def test_the_current_results_block_is_kept(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    assert _current_results(readme) == []
    readme.write_text(f"# T\n\n{CURRENT_BEGIN}\n| a |\n{CURRENT_END}\n\nold report\n")
    assert _current_results(readme) == [f"{CURRENT_BEGIN}\n| a |\n{CURRENT_END}", ""]
    readme.write_text("# T\n\nno block\n")
    assert _current_results(readme) == []


def test_the_committed_readme_has_the_block() -> None:
    readme = Path(__file__).resolve().parents[2] / "bench" / "results" / "README.md"
    assert _current_results(readme), "bench/results/README.md lost its current results"
