"""The context policies ``ctxwarden eval compaction`` compares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxwarden.core.anchors import AnchorCategory
from ctxwarden.core.session import ContextPolicy

BASE: dict[str, Any] = {
    "context_window": 8000,
    "reserve_tokens": 1000,
    "keep_recent_tokens": 2000,
    "tokenizer": "heuristic",
}
_KEEP = (1 << AnchorCategory.CONSTRAINT) | (1 << AnchorCategory.OPEN_TASK)
POLICIES: dict[str, ContextPolicy] = {
    "baseline": ContextPolicy(**BASE),
    "preserve": ContextPolicy(
        **BASE, preserve_lost_anchors=_KEEP, preserve_lost_anchors_max_tokens=400
    ),
    "layered": ContextPolicy(**BASE, clear_tool_results_at_least=1500, clear_tool_results_keep=2),
    "layered+preserve": ContextPolicy(
        **BASE,
        clear_tool_results_at_least=1500,
        clear_tool_results_keep=2,
        preserve_lost_anchors=_KEEP,
        preserve_lost_anchors_max_tokens=400,
    ),
}
"""The policies compared (threshold 7,000 tokens: the scenarios compact several times)."""


def policies_named(names: list[str]) -> Mapping[str, ContextPolicy]:
    """The named policies, in order (KeyError for an unknown one)."""
    return {name: POLICIES[name] for name in names}
