"""The imports between spark_sqs's modules form no cycle.

Every module of spark_sqs/ is parsed with ``ast`` (nothing is imported), and every import of a
spark_sqs module counts: at the top, inside functions, under ``TYPE_CHECKING``. A cycle held
apart only by imports deferred into functions is still a cycle of dependencies; it is what the
test is for. Importing ``a.b.c`` also runs the packages ``a.b`` and ``a`` (their
``__init__``), so those are edges too, except a module's own enclosing packages, which Python
has already imported when the module runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "spark_sqs"


def modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's ``__init__``)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def _enclosing(name: str) -> list[str]:
    """The packages that enclose ``name``: ``a.b.c`` -> ``a``, ``a.b``."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _imported(tree: ast.AST, name: str, is_package: bool, known: Iterable[str]) -> set[str]:
    """The modules of ``known`` that the module ``name`` imports, anywhere in it."""
    known = set(known)
    here = name.split(".") if is_package else name.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            submodules = {f"{module}.{a.name}" for a in node.names} & known
            targets.update(submodules)
            if len(submodules) < len(node.names):
                targets.add(module)  # names defined in the module itself
    edges = set()
    for target in targets & known:
        for module in (target, *_enclosing(target)):
            if module in known and module != name and module not in _enclosing(name):
                edges.add(module)
    return edges


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    found = modules(root, package)
    return {
        name: _imported(ast.parse(path.read_text(), str(path)), name, is_package, found)
        for name, (path, is_package) in found.items()
    }


def cycles(graph: Mapping[str, set[str]]) -> set[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[tuple[str, ...]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.add(tuple(sorted(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def describe(component: tuple[str, ...], graph: Mapping[str, set[str]]) -> str:
    members = set(component)
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & members))}" for m in component)


def test_spark_sqs_modules_import_each_other_without_cycles() -> None:
    graph = import_graph()
    assert "spark_sqs.options" in graph and "spark_sqs.journal.stores" in graph
    found = sorted(cycles(graph))
    assert not found, "import cycles: " + " | ".join(describe(c, graph) for c in found)


def test_the_connection_and_the_option_engine_import_no_consumer() -> None:
    # The options are read everywhere: what they are built from must not reach back into the
    # journal, the driver or the clients.
    graph = import_graph()
    reach = {"spark_sqs.option_table", "spark_sqs.connection"}
    todo = list(reach)
    while todo:
        for other in graph[todo.pop()]:
            if other not in reach:
                reach.add(other)
                todo.append(other)
    assert reach == {"spark_sqs.option_table", "spark_sqs.connection", "spark_sqs.errors"}


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # A deferred import inside a function closes a cycle.
        (
            {
                "__init__.py": "",
                "a.py": "from .b import x\n",
                "b.py": "def f():\n    from .a import y\n",
            },
            {("pkg.a", "pkg.b")},
        ),
        # So does one under TYPE_CHECKING, and importing a submodule runs its package.
        (
            {
                "__init__.py": "",
                "a.py": "from .sub.c import x\n",
                "sub/__init__.py": "from .d import z\n",
                "sub/c.py": "",
                "sub/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from ..a import q\n",
            },
            {("pkg.a", "pkg.sub", "pkg.sub.d")},
        ),
        # A package importing its own submodules, which import siblings, is no cycle.
        (
            {
                "__init__.py": "from .a import x\n",
                "a.py": "from . import b\nfrom .b import y\n",
                "b.py": "import os\n",
            },
            set(),
        ),
    ],
    ids=["deferred", "type-checking-and-package", "own-package"],
)
def test_cycles_are_found_wherever_the_import_is(
    tmp_path: Path, files: dict[str, str], expected: set[tuple[str, ...]]
) -> None:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert cycles(import_graph(tmp_path, "pkg")) == expected
