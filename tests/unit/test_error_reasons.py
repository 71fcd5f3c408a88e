"""ErrorInfo reasons come from one catalogue (ctxwarden.core.reasons.ErrorReason).

The server code names every reason it sends as an ``ErrorReason`` member (no
string literals), the generated reference's table of reasons (docs/reference/errors.md,
scripts/gen_docs.py) lists exactly the catalogue
with each reason's status code, and no member is left unused (but the retired
ones, which no code may send).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import grpc

from ctxwarden.core import errors
from ctxwarden.core.reasons import RETIRED, ErrorReason

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "server" / "ctxwarden"
CATALOGUE = PACKAGE / "core" / "reasons.py"
README = ROOT / "docs" / "reference" / "errors.md"

REASON_ARGUMENT = {
    "rich_status": 3,
    "_abort": 4,
    "AuthError": 1,
    "_unauthenticated": 0,
    "_denied": 0,
}
"""Callables that take the reason positionally, and its position."""

VALUES = {member.value for member in ErrorReason}
ERROR_CODES = {
    cls.__name__: cls.kind.value
    for cls in vars(errors).values()
    if isinstance(cls, type)
    and issubclass(cls, errors.CtxwardenError)
    and cls is not errors.CtxwardenError
}
"""Domain error class name -> the gRPC status code it is sent as."""


def _modules() -> dict[Path, ast.Module]:
    """Every server module except the code generated from the protos."""
    return {
        path: ast.parse(path.read_text(), str(path))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "v1"
    }


MODULES = _modules()


def _name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _reason_nodes(call: ast.Call) -> list[ast.expr]:
    """The expressions a call passes as a reason."""
    nodes = [k.value for k in call.keywords if k.arg == "reason"]
    index = REASON_ARGUMENT.get(_name(call))
    if index is not None and len(call.args) > index:
        nodes.append(call.args[index])
    return nodes


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the string constants that are docstrings or bare string statements."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"


def test_reasons_are_catalogue_members_not_string_literals() -> None:
    bad = []
    for path, tree in MODULES.items():
        if path == CATALOGUE:
            continue
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for value in _reason_nodes(node):
                    if isinstance(value, ast.Constant | ast.JoinedStr):
                        bad.append(f"{_where(path, value)}: reason {ast.unparse(value)}")
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(isinstance(s, ast.Attribute) and s.attr == "reason" for s in sides):
                    bad += [
                        f"{_where(path, s)}: compared with {ast.unparse(s)}"
                        for s in sides
                        if isinstance(s, ast.Constant)
                    ]
            if (
                isinstance(node, ast.Constant)
                and node.value in VALUES
                and id(node) not in docstrings
            ):
                bad.append(f"{_where(path, node)}: literal {node.value!r}")
    assert not bad, "use ErrorReason members, not strings:\n" + "\n".join(sorted(set(bad)))


def test_positional_reason_arguments_are_where_the_test_looks() -> None:
    """REASON_ARGUMENT matches the signatures (a reordered parameter fails here)."""
    found: dict[str, int] = {}
    for tree in MODULES.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                params = [a.arg for a in node.args.posonlyargs + node.args.args]
                if node.name in REASON_ARGUMENT and "reason" in params:
                    found[node.name] = params.index("reason")
            if isinstance(node, ast.ClassDef) and node.name in REASON_ARGUMENT:
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                        params = [a.arg for a in item.args.args[1:]]
                        found[node.name] = params.index("reason")
    assert found == REASON_ARGUMENT


def test_catalogue_values_are_their_names() -> None:
    assert all(member.value == member.name for member in ErrorReason)
    assert all(re.fullmatch(r"[A-Z][A-Z0-9_]*", member.value) for member in ErrorReason)


def test_catalogue_members_each_have_a_description() -> None:
    tree = ast.parse(CATALOGUE.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ErrorReason")
    described = {
        target.id
        for stmt, after in zip(cls.body, cls.body[1:], strict=False)
        if isinstance(stmt, ast.Assign)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and str(after.value.value).strip()
        for target in stmt.targets
        if isinstance(target, ast.Name)
    }
    assert described == set(ErrorReason.__members__)


def _used() -> dict[str, set[str]]:
    """Member name -> the status codes it is sent with, where the code is static."""
    used: dict[str, set[str]] = defaultdict(set)
    for path, tree in MODULES.items():
        if path == CATALOGUE:
            continue
        helpers = _status_helpers(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "ErrorReason"
            ):
                used.setdefault(node.attr, set())
            if not isinstance(node, ast.Call):
                continue
            for value in _reason_nodes(node):
                if isinstance(value, ast.Attribute) and value.attr in ErrorReason.__members__:
                    code = _static_code(node, helpers)
                    if code:
                        used[value.attr].add(code)
    return used


def _status_helpers(tree: ast.Module) -> dict[str, str]:
    """Functions of a module that build an error with one fixed status code."""
    helpers = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            codes = {
                n.attr
                for n in ast.walk(node)
                if isinstance(n, ast.Attribute) and ast.unparse(n.value) == "grpc.StatusCode"
            }
            if len(codes) == 1:
                helpers[node.name] = codes.pop()
    return helpers


def _static_code(call: ast.Call, helpers: dict[str, str]) -> str:
    name = _name(call)
    if name in ERROR_CODES:
        return ERROR_CODES[name]
    if name in helpers:
        return helpers[name]
    for arg in call.args[:2]:
        if isinstance(arg, ast.Attribute) and ast.unparse(arg.value) == "grpc.StatusCode":
            return arg.attr
    return ""


def test_every_catalogue_member_is_used() -> None:
    retired = {member.name for member in RETIRED}
    unused = set(ErrorReason.__members__) - set(_used()) - retired
    assert not unused, f"reasons no server code sends: {sorted(unused)}"
    still_sent = retired & set(_used())
    assert not still_sent, f"retired reasons still sent: {sorted(still_sent)}"


def _readme_table() -> dict[str, set[str]]:
    """Reason -> status codes, from the reference's table of error reasons."""
    section = README.read_text()
    rows: dict[str, set[str]] = {}
    in_table = False
    for line in section.splitlines():
        if line.startswith("| Reason |"):
            in_table = True
            continue
        if not in_table or line.startswith("| ---"):
            continue
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        reason = cells[0].strip("`")
        assert reason not in rows, f"{reason} is listed twice"
        assert cells[2], f"{reason} has no description"
        rows[reason] = set(re.findall(r"`([A-Z_]+)`", cells[1]))
    return rows


def test_readme_lists_exactly_the_catalogue() -> None:
    table = _readme_table()
    assert set(table) == set(ErrorReason.__members__), (
        f"missing: {sorted(set(ErrorReason.__members__) - set(table))}; "
        f"not in the catalogue: {sorted(set(table) - set(ErrorReason.__members__))}"
    )


def test_readme_status_codes_are_the_ones_sent() -> None:
    table = _readme_table()
    codes = set(grpc.StatusCode.__members__)
    for reason, sent in _used().items():
        listed = table.get(reason, set())
        assert listed, f"{reason}: no status code in the README"
        assert listed <= codes, f"{reason}: {sorted(listed - codes)} are not status codes"
        if sent:
            assert listed == sent, f"{reason} is sent as {sorted(sent)}, the README says {listed}"
