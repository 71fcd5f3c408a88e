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
        # The shell: cli parses and dispatches; commands, config and app never reach back
        # up to it, and util sits below everything.
        ("util", ("ctxwarden.util",), ("sqlalchemy",)),
        ("config", (), ("ctxwarden.cli", "ctxwarden.commands", "ctxwarden.app")),
        ("commands", (), ("ctxwarden.cli",)),
        ("app", (), ("ctxwarden.cli", "ctxwarden.commands")),
    ],
)
def test_layer_imports(layer: str, allowed: tuple[str, ...], forbidden: tuple[str, ...]) -> None:
    bad = [
        (f, m)
        for f, m in _imports(layer)
        if (allowed and not m.startswith(allowed)) or (forbidden and m.startswith(forbidden))
    ]
    assert not bad, f"{layer} imports {bad}"


def test_package_root_holds_few_modules() -> None:
    """The root holds the package's face; everything else sits in a folder that says
    what it is (docs/architecture.md, "The package root")."""
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert "__init__.py" in root and len(root) <= 6, root


def _deps(source: str, everywhere: bool) -> set[str]:
    """The ctxwarden modules a module's source imports: at import time, or with
    ``everywhere`` also under ``if TYPE_CHECKING:`` and inside functions.
    ``from ctxwarden.util import ids`` names ``ctxwarden.util.ids``;
    ``from ctxwarden.config import Settings`` names ``ctxwarden.config.Settings``
    (resolved to ``ctxwarden.config`` by the graph)."""
    tree = ast.parse(source)
    nodes = ast.walk(tree) if everywhere else iter(tree.body)
    deps: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            deps.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            deps.update(a.name for a in node.names)
    return {d for d in deps if d.startswith("ctxwarden.")}


def _module_graph(everywhere: bool = False) -> dict[str, set[str]]:
    """Module -> the ctxwarden modules it imports (see ``_deps``)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        graph[name] = _deps(path.read_text(encoding="utf-8"), everywhere)
    known = set(graph)

    def resolve(module: str) -> str:
        while module not in known and "." in module:
            module = module.rsplit(".", 1)[0]
        return module

    return {m: {resolve(d) for d in deps} - {m} for m, deps in graph.items()}


def _first_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (module names, the first repeated at the end), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 1:
                return [*path[path.index(d) :], d]
            if d not in state and (cycle := visit(d)):
                return cycle
        path.pop()
        state[m] = 2
        return None

    for module in sorted(edges):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def _cycles(edges: dict[str, set[str]]) -> list[str]:
    """Every cycle, one line each: find one, drop its closing edge, look again."""
    edges = {m: set(deps) for m, deps in edges.items()}
    found: list[str] = []
    while (cycle := _first_cycle(edges)) and len(found) < 50:
        found.append(" -> ".join(cycle))
        edges[cycle[-2]].discard(cycle[-1])
    return found


def test_no_import_cycles() -> None:
    cycles = _cycles(_module_graph())
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_import_cycles_counting_every_import() -> None:
    """A ``TYPE_CHECKING`` or function-local import hides a cycle from the
    interpreter, not from the design: the module still knows the one that imports it."""
    cycles = _cycles(_module_graph(everywhere=True))
    assert not cycles, "import cycles (every import counted):\n" + "\n".join(cycles)


def test_the_cycle_check_sees_hidden_imports() -> None:
    """The check itself: a cycle closed only under ``TYPE_CHECKING``, or only inside
    a function, is found."""
    typing_only = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ctxwarden.a import A\n"
    )
    local = "def f() -> None:\n    import ctxwarden.a\n"
    for source in (typing_only, local):
        assert _deps(source, everywhere=False) == set()
        # b imports a only where the interpreter does not look; a imports b.
        hidden = {d.removesuffix(".A") for d in _deps(source, everywhere=True)}
        edges = {"ctxwarden.a": {"ctxwarden.b"}, "ctxwarden.b": hidden}
        assert _cycles(edges) == ["ctxwarden.a -> ctxwarden.b -> ctxwarden.a"]
