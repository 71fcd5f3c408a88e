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
            out += [(path.name, n) for n in names if n.startswith("ctxwarden.")]
    return out


@pytest.mark.parametrize(
    ("layer", "allowed", "forbidden"),
    [
        ("core", ("ctxwarden.core",), ()),
        ("observability", (), ("ctxwarden.service",)),
        ("api", (), ("ctxwarden.observability",)),
    ],
)
def test_layer_imports(layer: str, allowed: tuple[str, ...], forbidden: tuple[str, ...]) -> None:
    bad = [
        (f, m)
        for f, m in _imports(layer)
        if (allowed and not m.startswith(allowed)) or (forbidden and m.startswith(forbidden))
    ]
    assert not bad, f"{layer} imports {bad}"
