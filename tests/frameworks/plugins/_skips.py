"""Marks the framework tests listed in tests/frameworks/skips.toml as skipped, with their reason."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

SKIPS = Path(__file__).resolve().parents[1] / "skips.toml"


def listed(framework: str) -> dict[str, str]:
    """``{node id: reason}`` of one framework's table in skips.toml."""
    with SKIPS.open("rb") as f:
        table = tomllib.load(f).get(framework, {})
    return {node: str(reason) for node, reason in table.items()}


def deselect(
    config: pytest.Config, items: list[pytest.Item], drop: Callable[[pytest.Item], bool]
) -> None:
    """Remove the items ``drop`` names from the run, reported as deselected."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (dropped if drop(item) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def apply_skips(framework: str, items: list[pytest.Item]) -> None:
    skips = listed(framework)
    for item in items:
        reason = skips.get(item.nodeid) or skips.get(item.nodeid.split("[", 1)[0])
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"ctxwarden swap: {reason}"))
