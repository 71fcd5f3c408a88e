"""Where a compacted span's anchors survive, and the loss report of a checkpoint.

Each anchor of the span (``core.anchors``) is looked for in what the model
sees after the compaction, in this order, and counted at the first place it
is found: the summary (with any turn-prefix summary), the session's pinned
state, the file lists, the memory block, the kept messages (as the view shows
them), the anchors re-injected by ``preserve_lost_anchors``; else it is lost.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwarden.core.anchor_sentences import sentence_key, sentences, words
from ctxwarden.core.anchors import (
    CATEGORIES,
    SENTENCE_COVERAGE,
    TOOL_KEY_SEP,
    Anchor,
    AnchorCategory,
    structured,
    word_set,
)

MAX_LOST_LISTED_PER_CATEGORY = 10
"""A report lists at most this many lost anchors of each category (counts are complete)."""
NEGATIONS = word_set("never not don no nie niemals nicht kein keine jamais ne pas nunca 不 别 没")
"""A constraint or open task survives only in a sentence of the same polarity:
both with one of these words or both without ("never push" is no "always push")."""
DEFAULT_PRESERVE_TOKENS = 512
"""preserve_lost_anchors' budget when the policy names categories but no budget."""


class AnchorLocation(enum.IntEnum):
    """Where an anchor survives (the same numbers on the wire)."""

    SUMMARY = 1
    PINNED_STATE = 2
    FILE_LISTS = 3
    KEPT_MESSAGES = 4
    MEMORY_BLOCK = 5
    REINJECTED = 6
    """Put back into the pinned state by the policy's preserve_lost_anchors."""
    LOST = 7

    @property
    def label(self) -> str:
        return self.name.lower()


SEARCH_ORDER = (
    AnchorLocation.SUMMARY,
    AnchorLocation.PINNED_STATE,
    AnchorLocation.FILE_LISTS,
    AnchorLocation.MEMORY_BLOCK,
    AnchorLocation.KEPT_MESSAGES,
    AnchorLocation.REINJECTED,
)


# -- looking anchors up in a text -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class TargetIndex:
    """One text where anchors may survive, indexed once."""

    text: str
    keys: frozenset[tuple[AnchorCategory, str]]
    paths: tuple[str, ...]
    shas: tuple[str, ...]
    sentence_words: tuple[frozenset[str], ...]
    postings: Mapping[str, tuple[int, ...]]
    """word -> the sentences (indexes into sentence_words) that hold it."""

    @classmethod
    def of(cls, text: str, extra_paths: Iterable[str] = ()) -> TargetIndex:
        keys = {(c, k) for c, _, k in structured(text)}
        keys |= {(AnchorCategory.FILE_PATH, p.removeprefix("./")) for p in extra_paths}
        paths = tuple(k for c, k in keys if c is AnchorCategory.FILE_PATH)
        shas = tuple(k for c, k in keys if c is AnchorCategory.IDENTIFIER and k.startswith("sha:"))
        sentence_words = tuple(w for w in (words(s) for s in sentences(text)) if w)
        postings: dict[str, list[int]] = {}
        for i, ws in enumerate(sentence_words):
            for w in ws:
                postings.setdefault(w, []).append(i)
        return cls(
            text,
            frozenset(keys),
            paths,
            shas,
            sentence_words,
            {w: tuple(ids) for w, ids in postings.items()},
        )

    def holds(self, anchor: Anchor) -> bool:
        c = anchor.category
        if c in (AnchorCategory.CONSTRAINT, AnchorCategory.OPEN_TASK):
            return self._holds_sentence(anchor.text)
        if c is AnchorCategory.TOOL_CALL:
            name, _, value = anchor.key.partition(TOOL_KEY_SEP)
            return contains_token(self.text, value or name)
        if (c, anchor.key) in self.keys:
            return True
        if c is AnchorCategory.FILE_PATH and not anchor.key.startswith(("/", "~")):
            tail = "/" + anchor.key
            return any(p.endswith(tail) for p in self.paths)
        if c is AnchorCategory.IDENTIFIER and anchor.key.startswith("sha:"):
            return any(s.startswith(anchor.key) or anchor.key.startswith(s) for s in self.shas)
        return False

    def _holds_sentence(self, text: str) -> bool:
        wanted = words(text)
        if not wanted:
            return False
        need = math.ceil(SENTENCE_COVERAGE * len(wanted))
        negated = not wanted.isdisjoint(NEGATIONS)
        # A sentence with `need` of the words has one of the len - need + 1 rarest.
        postings = self.postings
        rarest = sorted(wanted, key=lambda w: len(postings.get(w, ())))
        candidates: set[int] = set()
        for w in rarest[: len(wanted) - need + 1]:
            candidates.update(postings.get(w, ()))
        return any(
            len(wanted & self.sentence_words[i]) >= need
            and negated is not self.sentence_words[i].isdisjoint(NEGATIONS)
            for i in sorted(candidates)
        )


def _word(c: str) -> bool:
    return c.isalnum() or c == "_"


def _continues(text: str, i: int) -> bool:
    """Whether the token before ``i`` goes on at ``i`` (a word character, ``/``,
    ``-``, ``.``; a dot only when a word character follows it)."""
    if i >= len(text):
        return False
    c = text[i]
    if c == ".":
        return i + 1 < len(text) and _word(text[i + 1])
    return _word(c) or c in "/-"


def contains_token(haystack: str, needle: str) -> bool:
    """``needle`` in ``haystack`` not as part of a longer word, path or number
    (a sentence's final dot may follow it)."""
    if not needle:
        return False
    start = haystack.find(needle)
    while start >= 0:
        before = haystack[start - 1] if start else " "
        if not (_word(before) or before in "./-") and not _continues(haystack, start + len(needle)):
            return True
        start = haystack.find(needle, start + 1)
    return False


@dataclass(frozen=True, slots=True)
class Targets:
    """What the model sees after a compaction, by place."""

    summary: str = ""
    pinned_state: str = ""
    file_lists: Sequence[str] = ()
    memory_block: str = ""
    kept_messages: str = ""
    reinjected: str = ""

    def indexes(self) -> dict[AnchorLocation, TargetIndex]:
        return {
            AnchorLocation.SUMMARY: TargetIndex.of(self.summary),
            AnchorLocation.PINNED_STATE: TargetIndex.of(self.pinned_state),
            AnchorLocation.FILE_LISTS: TargetIndex.of(
                "\n".join(self.file_lists), extra_paths=self.file_lists
            ),
            AnchorLocation.MEMORY_BLOCK: TargetIndex.of(self.memory_block),
            AnchorLocation.KEPT_MESSAGES: TargetIndex.of(self.kept_messages),
            AnchorLocation.REINJECTED: TargetIndex.of(self.reinjected),
        }


Indexes = Mapping[AnchorLocation, TargetIndex]


def place(anchors: Sequence[Anchor], targets: Targets | Indexes) -> list[AnchorLocation]:
    """The location of each anchor (LOST where none holds it)."""
    indexes = targets.indexes() if isinstance(targets, Targets) else targets
    out = []
    for a in anchors:
        where = AnchorLocation.LOST
        for loc in SEARCH_ORDER:
            index = indexes.get(loc)
            if index is not None and index.text and index.holds(a):
                where = loc
                break
        out.append(where)
    return out


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
