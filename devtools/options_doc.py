"""Rewrite docs/options.md's option table from ``spark_sqs.options.OPTIONS``. Runs on: a
workstation or CI, from a checkout of the repository.

    python -m devtools.options_doc          # rewrite the table between the markers
    python -m devtools.options_doc --check  # exit 1 if the file differs from the table

tests/unit/test_docs.py fails while the file and the table differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spark_sqs.options import rewrite_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "options.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report a difference")
    parser.add_argument("--path", type=Path, default=DOC)
    args = parser.parse_args(argv)
    text = args.path.read_text()
    rendered = rewrite_markdown(text)
    if rendered == text:
        return 0
    if args.check:
        sys.stderr.write(f"{args.path} differs from OPTIONS: run python -m devtools.options_doc\n")
        return 1
    args.path.write_text(rendered)
    sys.stdout.write(f"rewrote the option table of {args.path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
