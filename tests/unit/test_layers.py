"""Import rules between the server's layers (checked on the source, not at run time)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ctxwarden

PACKAGE = Path(ctxwarden.__file__).parent


def _imports(layer: str) -> list[tuple[str, str]]:
    """(module file, imported ctxwarden module) for every import in ``layer``."""
    out = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            out += [(path.name, n) for n in names if n.startswith(("ctxwarden.", "sqlalchemy"))]
    return out


@pytest.mark.parametrize(
    ("layer", "allowed", "forbidden"),
    [
        ("core", ("ctxwarden.core",), ()),
        ("observability", (), ("ctxwarden.service",)),
        ("api", (), ("ctxwarden.observability", "ctxwarden.store", "sqlalchemy")),
        # The web console sits beside api: over the service layer, never the store.
        ("console", (), ("ctxwarden.observability", "ctxwarden.store", "sqlalchemy")),
        ("service", (), ("ctxwarden.api", "sqlalchemy")),
        ("store", (), ("ctxwarden.api", "ctxwarden.service", "ctxwarden.observability")),
    ],
)
def test_layer_imports(layer: str, allowed: tuple[str, ...], forbidden: tuple[str, ...]) -> None:
    bad = [
        (f, m)
        for f, m in _imports(layer)
        if (allowed and not m.startswith(allowed)) or (forbidden and m.startswith(forbidden))
    ]
    assert not bad, f"{layer} imports {bad}"


def _module_graph() -> dict[str, set[str]]:
    """Module -> the ctxwarden modules it imports at import time (not TYPE_CHECKING)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        deps: set[str] = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[name] = {d for d in deps if d.startswith("ctxwarden.") and d != name}
    return graph


def test_no_import_cycles() -> None:
    graph = _module_graph()
    known = set(graph)

    def resolve(module: str) -> str:
        while module not in known and "." in module:
            module = module.rsplit(".", 1)[0]
        return module

    edges = {m: {resolve(d) for d in deps} - {m} for m, deps in graph.items()}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 1:
                cycle = [*path[path.index(d) :], d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        path.pop()
        state[m] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)
