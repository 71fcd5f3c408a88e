"""Where a compacted span's anchors survive.

Each anchor of the span (``core.anchors``) is looked for in what the model
sees after the compaction, in this order, and counted at the first place it
is found: the summary (with any turn-prefix summary), the session's pinned
state, the file lists, the memory block, the kept messages (as the view shows
them), the anchors re-injected by ``preserve_lost_anchors``; else it is lost
(``core.anchor_report`` counts the places into a loss report).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ctxwarden.core.anchor_sentences import sentences, words
from ctxwarden.core.anchors import (
    SENTENCE_COVERAGE,
    TOOL_KEY_SEP,
    Anchor,
    AnchorCategory,
    structured,
    word_set,
)
from ctxwarden.core.stepwise import EVERY, Steps, finish

NEGATIONS = word_set("never not don no nie niemals nicht kein keine jamais ne pas nunca 不 别 没")
"""A constraint or open task survives only in a sentence of the same polarity:
both with one of these words or both without ("never push" is no "always push")."""


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
    return finish(place_steps(anchors, targets))


def place_steps(
    anchors: Sequence[Anchor], targets: Targets | Indexes
) -> Steps[list[AnchorLocation]]:
    """``place`` in steps (core.stepwise): a long session's span has tens of
    thousands of anchors."""
    indexes = targets.indexes() if isinstance(targets, Targets) else targets
    out = []
    for i, a in enumerate(anchors):
        if i % EVERY == EVERY - 1:
            yield
        where = AnchorLocation.LOST
        for loc in SEARCH_ORDER:
            index = indexes.get(loc)
            if index is not None and index.text and index.holds(a):
                where = loc
                break
        out.append(where)
    return out
