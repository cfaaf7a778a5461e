"""No import cycles among the project's modules (plugins/): every import counts, at the top of
a module or inside a function (a deferred import hides a cycle, it does not remove it);
only imports for annotations (`if TYPE_CHECKING:`) do not. Importing a.b.c imports the
packages a and a.b first, so a module depends on the packages around what it imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support import ROOT

pytestmark = pytest.mark.serverless
PLUGINS = ROOT / "plugins"


def modules() -> dict[str, Path]:
    found = {}
    for path in PLUGINS.rglob("*.py"):
        parts = list(path.relative_to(PLUGINS).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _annotation_only(tree: ast.Module) -> set[int]:
    """ids of the import statements under `if TYPE_CHECKING:`."""
    return {id(node) for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for stmt in block.body for node in ast.walk(stmt)}


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports, with the packages they lie in."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skip = _annotation_only(tree)
    wanted: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            wanted.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            wanted.add(base)
            wanted.update(f"{base}.{alias.name}" for alias in node.names)  # a submodule imported by name
    found = set()
    for module in wanted:
        pieces = module.split(".")
        found.update(".".join(pieces[:i]) for i in range(1, len(pieces) + 1))
    # A module's own packages are imported before it: no edge back to them.
    return {m for m in found if m in known and m != name and not name.startswith(m + ".")}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    order, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        order[v] = low[v] = len(order)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in order:
            visit(v)
    return found


def test_the_finder_sees_a_deferred_import_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import b\ndef f():\n    import c\n")
    assert len(_annotation_only(tree)) == 2  # the import statement and its alias


def test_no_module_of_the_project_imports_itself_in_a_circle():
    known = modules()
    assert {"twophase.spec", "twophase.connections", "twophase.participants.kinds"} <= set(known)
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert "twophase.participants.kinds" in graph["twophase.spec"], "the finder lost the imports"
    found = cycles(graph)
    assert found == [], "import cycles: " + "; ".join(
        " <-> ".join(f"{m} (imports {sorted(graph[m] & set(c))})" for m in c) for c in found)
