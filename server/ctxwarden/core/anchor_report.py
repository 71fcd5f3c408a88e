"""The loss report of a checkpoint: how many of the compacted span's anchors
survive where (``core.anchor_search``), the lost ones listed; its stored form;
and the re-injection of lost anchors (``preserve_lost_anchors``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwarden.core.anchor_search import (
    AnchorLocation,
    Indexes,
    TargetIndex,
    Targets,
    place,
    place_steps,
)
from ctxwarden.core.anchor_sentences import sentence_key
from ctxwarden.core.anchors import (
    CATEGORIES,
    TOOL_KEY_SEP,
    Anchor,
    AnchorCategory,
    structured,
)

# Where anchors survive is core.anchor_search; its names are imported from here too.
__all__ = [
    "DEFAULT_PRESERVE_TOKENS",
    "MAX_LOST_LISTED_PER_CATEGORY",
    "AnchorLocation",
    "CategoryCounts",
    "Indexes",
    "LossReport",
    "TargetIndex",
    "Targets",
    "build_report",
    "parse_preserved",
    "place",
    "place_steps",
    "preserve",
    "preserved_line",
    "rekey",
    "report_dumps",
    "report_from_json",
    "report_loads",
    "report_to_json",
    "shortfalls",
]

MAX_LOST_LISTED_PER_CATEGORY = 10
"""A report lists at most this many lost anchors of each category (counts are complete)."""
DEFAULT_PRESERVE_TOKENS = 512
"""preserve_lost_anchors' budget when the policy names categories but no budget."""


# -- the report ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CategoryCounts:
    category: AnchorCategory
    by_location: tuple[int, ...] = (0,) * len(AnchorLocation)
    """Indexed by AnchorLocation - 1."""

    def count(self, location: AnchorLocation) -> int:
        return self.by_location[location - 1]

    @property
    def total(self) -> int:
        return sum(self.by_location)

    @property
    def lost(self) -> int:
        return self.count(AnchorLocation.LOST)

    @property
    def survival(self) -> float:
        """Share of the category's anchors that survive (1.0 when it had none)."""
        return 1.0 if self.total == 0 else (self.total - self.lost) / self.total


@dataclass(frozen=True, slots=True)
class LossReport:
    categories: tuple[CategoryCounts, ...] = field(
        default_factory=lambda: tuple(CategoryCounts(c) for c in CATEGORIES)
    )
    """One per category, in category order."""
    lost: tuple[Anchor, ...] = ()
    """Lost anchors, at most MAX_LOST_LISTED_PER_CATEGORY per category."""
    lost_omitted: int = 0
    """Lost anchors not listed."""
    span_from_seq: int = 0
    span_to_seq: int = 0
    """The compacted span (0, 0: it held no message)."""

    def counts(self, category: AnchorCategory) -> CategoryCounts:
        return self.categories[category - 1]

    def survival(self, category: AnchorCategory) -> float:
        return self.counts(category).survival

    @property
    def total(self) -> int:
        return sum(c.total for c in self.categories)

    @property
    def lost_total(self) -> int:
        return sum(c.lost for c in self.categories)


def build_report(
    anchors: Sequence[Anchor],
    locations: Sequence[AnchorLocation],
    span: tuple[int, int] = (0, 0),
) -> LossReport:
    counts = {c: [0] * len(AnchorLocation) for c in CATEGORIES}
    listed: list[Anchor] = []
    per_category: dict[AnchorCategory, int] = {}
    omitted = 0
    for a, loc in zip(anchors, locations, strict=True):
        counts[a.category][loc - 1] += 1
        if loc is AnchorLocation.LOST:
            n = per_category.get(a.category, 0)
            if n < MAX_LOST_LISTED_PER_CATEGORY:
                listed.append(a)
                per_category[a.category] = n + 1
            else:
                omitted += 1
    listed.sort(key=lambda a: (a.category, a.seq))
    return LossReport(
        tuple(CategoryCounts(c, tuple(counts[c])) for c in CATEGORIES),
        tuple(listed),
        omitted,
        *span,
    )


def shortfalls(
    report: LossReport, minimum: Mapping[AnchorCategory, float]
) -> list[tuple[AnchorCategory, float, float]]:
    """(category, survival, required) of each category below its minimum."""
    out = []
    for category, required in sorted(minimum.items()):
        got = report.survival(category)
        if got < required:
            out.append((category, got, required))
    return out


# -- storage ------------------------------------------------------------------------


def report_to_json(r: LossReport) -> dict[str, Any]:
    """A compact JSON object; only categories with anchors."""
    return {
        "span": [r.span_from_seq, r.span_to_seq],
        "counts": {c.category.label: list(c.by_location) for c in r.categories if c.total},
        "lost": [[a.category.label, a.seq, a.text, a.key] for a in r.lost],
        "omitted": r.lost_omitted,
    }


def report_from_json(d: Mapping[str, Any]) -> LossReport:
    counts = d.get("counts", {})
    categories = []
    for c in CATEGORIES:
        row = [int(n) for n in counts.get(c.label, ())]
        row += [0] * (len(AnchorLocation) - len(row))
        categories.append(CategoryCounts(c, tuple(row[: len(AnchorLocation)])))
    lost = tuple(
        Anchor(AnchorCategory[str(cat).upper()], str(text), str(key), int(seq))
        for cat, seq, text, key in d.get("lost", ())
    )
    span = d.get("span", [0, 0])
    return LossReport(tuple(categories), lost, int(d.get("omitted", 0)), int(span[0]), int(span[1]))


def report_dumps(r: LossReport) -> str:
    return json.dumps(report_to_json(r), ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def report_loads(text: str | None) -> LossReport | None:
    if not text:
        return None
    try:
        return report_from_json(json.loads(text))
    except (ValueError, KeyError, TypeError):
        return None  # an unreadable report is no reason to fail a read


# -- re-injection (preserve_lost_anchors) ------------------------------------------------

_LINE = re.compile(r"^- ([a-z ]+): (.+)$")


def preserved_line(anchor: Anchor) -> str:
    return f"- {anchor.category.label.replace('_', ' ')}: {anchor.text}"


def parse_preserved(text: str) -> list[Anchor]:
    """The anchors of a preserved block (lines ``- open task: ...``)."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        try:
            category = AnchorCategory[m.group(1).upper().replace(" ", "_")]
        except KeyError:
            continue
        found = rekey(category, m.group(2))
        if found is not None:
            out.append(found)
    return out


def rekey(category: AnchorCategory, text: str) -> Anchor | None:
    """The anchor of ``category`` that ``text`` (an anchor's text) stands for."""
    if category in (AnchorCategory.CONSTRAINT, AnchorCategory.OPEN_TASK):
        return Anchor(category, text, sentence_key(text))
    if category is AnchorCategory.TOOL_CALL:
        name, _, arg = text.partition(" ")
        value = arg.partition("=")[2]
        return Anchor(category, text, f"{name}{TOOL_KEY_SEP}{value}")
    for c, shown, key in structured(text):
        if c is category:
            return Anchor(category, shown, key)
    return None


def preserve(
    lost: Sequence[Anchor],
    categories: Iterable[AnchorCategory],
    max_tokens: int,
    count_tokens: Callable[[str], int],
    *,
    previous: str = "",
    summary: TargetIndex | None = None,
) -> str:
    """The preserved block: this compaction's lost anchors of ``categories``,
    then the previous checkpoint's preserved ones the new summary does not
    hold, one line each, while they fit ``max_tokens``."""
    wanted = set(categories)
    candidates = [a for a in lost if a.category in wanted]
    for a in parse_preserved(previous):
        if summary is None or not summary.holds(a):
            candidates.append(a)
    lines: list[str] = []
    seen: set[tuple[AnchorCategory, str]] = set()
    used = 0
    for a in candidates:
        if (a.category, a.key) in seen:
            continue
        line = preserved_line(a)
        cost = count_tokens(line + "\n")
        if used + cost > max_tokens:
            continue
        seen.add((a.category, a.key))
        lines.append(line)
        used += cost
    return "\n".join(lines)
