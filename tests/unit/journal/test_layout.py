"""The journal's key layout is documented once, completely: every key a record kind of
``spark_sqs/journal/`` lists in its docstring (``Keys::``) is in docs/design.md's layout, and
every key there is some module's."""

from __future__ import annotations

import importlib
import pkgutil
import re

import spark_sqs.journal
from tests import REPO

DESIGN = REPO / "docs" / "design.md"
PREFIX = "<journalLocation>/"
# spark_sqs/acknowledgement/reports.py (AckReports) describes its keys in prose.
PROSE = {"acks/<N>/<receiver>.json", "acks/<N>/<receiver>.s-<summary>.json"}


def module_keys() -> dict[str, set[str]]:
    """Per module of the journal package, the keys its docstring's ``Keys::`` block lists."""
    out: dict[str, set[str]] = {}
    for info in pkgutil.iter_modules(spark_sqs.journal.__path__):
        module = importlib.import_module(f"spark_sqs.journal.{info.name}")
        doc = module.__doc__ or ""
        if "Keys::" not in doc:
            continue
        block = doc.split("Keys::", 1)[1].split("\n\n", 2)[1]
        out[info.name] = {
            line.split()[0] for line in block.splitlines() if re.match(r"^ {4}\S", line)
        }
    return out


def design_keys() -> set[str]:
    text = DESIGN.read_text()
    section = text.split("## The journal\n", 1)[1].split("```\n", 2)[1]
    return {
        line[len(PREFIX) :].split()[0] for line in section.splitlines() if line.startswith(PREFIX)
    }


def test_every_record_module_names_its_keys() -> None:
    found = module_keys()
    for kind in (
        "aliases", "batches", "dedupe", "drops", "entries", "lease", "meta", "metrics",
        "plans", "poison", "state", "window",
    ):  # fmt: skip
        assert found.get(kind), f"journal/{kind}.py's docstring lists no keys (Keys::)"


def test_the_design_layout_lists_every_key_of_every_module_and_no_other() -> None:
    documented = design_keys()
    listed = {key: name for name, keys in module_keys().items() for key in keys}
    missing = {k: m for k, m in listed.items() if k not in documented}
    assert not missing, f"keys missing from docs/design.md's journal layout: {missing}"
    unowned = documented - set(listed) - PROSE
    assert not unowned, f"keys in docs/design.md no module of spark_sqs/journal lists: {unowned}"
