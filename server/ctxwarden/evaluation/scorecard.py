"""The scorecard: runs summed per policy and summariser, printed and as JSON."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ctxwarden.core.anchor_report import AnchorLocation
from ctxwarden.core.anchors import CATEGORIES
from ctxwarden.evaluation.runner import RunResult

SHORT = {
    "file_path": "path",
    "url": "url",
    "identifier": "ident",
    "quantity": "qty",
    "constraint": "constr",
    "open_task": "task",
    "tool_call": "tool",
}
"""Column headings of the printed table."""


def combine(runs: Iterable[RunResult]) -> list[RunResult]:
    """One RunResult per (policy, summariser): the sum of its scenarios, in first-seen order."""
    out: dict[tuple[str, str], RunResult] = {}
    for r in runs:
        key = (r.policy, r.summarizer)
        total = out.setdefault(key, RunResult("all", r.policy, r.summarizer))
        for name in (
            "messages",
            "compactions",
            "clearings",
            "tokens_before",
            "tokens_after",
            "summarizer_calls",
            "summarizer_tokens_in",
            "summarizer_tokens_out",
            "prefix_invalidations",
            "tokens_recached",
        ):
            setattr(total, name, getattr(total, name) + getattr(r, name))
        for c in CATEGORIES:
            row = total.by_category[c]
            for i, n in enumerate(r.by_category[c]):
                row[i] += n
    return list(out.values())


def result_json(r: RunResult) -> dict[str, Any]:
    survival = {c.label: r.survival(c) for c in CATEGORIES}
    return {
        "scenario": r.scenario,
        "policy": r.policy,
        "summarizer": r.summarizer,
        "messages": r.messages,
        "compactions": r.compactions,
        "clearings": r.clearings,
        "tokens_before": r.tokens_before,
        "tokens_after": r.tokens_after,
        "summarizer_calls": r.summarizer_calls,
        "summarizer_tokens_in": r.summarizer_tokens_in,
        "summarizer_tokens_out": r.summarizer_tokens_out,
        "prefix_invalidations": r.prefix_invalidations,
        "tokens_recached": r.tokens_recached,
        "survival": survival,
        "anchors": {
            c.label: {loc.label: r.by_category[c][loc - 1] for loc in AnchorLocation}
            for c in CATEGORIES
        },
    }


def scorecard_json(
    runs: Sequence[RunResult], *, seed: int, scenarios: Sequence[str]
) -> dict[str, Any]:
    return {
        "seed": seed,
        "scenarios": list(scenarios),
        "totals": [result_json(r) for r in combine(runs)],
        "runs": [result_json(r) for r in runs],
    }


def _pct(value: float | None) -> str:
    return "   -" if value is None else f"{round(100 * value):3d}%"


def format_scorecard(runs: Sequence[RunResult]) -> str:
    """A table: one row per policy and summariser (all scenarios summed)."""
    head = (
        f"{'policy':<17} {'summarizer':<22} "
        + " ".join(f"{SHORT[c.label]:>6}" for c in CATEGORIES)
        + f" {'cps':>4} {'clr':>4} {'before':>8} {'after':>8} {'sum-in':>8} {'sum-out':>7}"
        + f" {'recached':>8}"
    )
    lines = ["survival of anchors by category (all scenarios), then totals", head]
    lines.append("-" * len(head))
    for r in combine(runs):
        name = r.summarizer if len(r.summarizer) <= 22 else r.summarizer[:21] + "…"
        lines.append(
            f"{r.policy:<17} {name:<22} "
            + " ".join(f"{_pct(r.survival(c)):>6}" for c in CATEGORIES)
            + f" {r.compactions:>4} {r.clearings:>4} {r.tokens_before:>8} {r.tokens_after:>8}"
            + f" {r.summarizer_tokens_in:>8} {r.summarizer_tokens_out:>7} {r.tokens_recached:>8}"
        )
    lines.append(
        "cps: summarising compactions, clr: clearings, before/after: input tokens around each "
        "checkpoint (summed), sum-in/out: summariser tokens, recached: tokens sent uncached after "
        "each prefix change"
    )
    return "\n".join(lines)
