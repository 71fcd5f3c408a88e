"""Sentence anchors (core.anchors): a user's constraints and open tasks, and
the words two sentences are compared by.

A constraint is a sentence of a user message with one of ``CONSTRAINT_WORDS``;
an open task a sentence with TODO or FIXME, an unchecked list item
(``- [ ] ...``), or a user question (see ``core.anchors.span_anchors``).
Sentences end at line breaks and at ``.!?;`` followed by a space (or their
full-width forms); list markers are dropped.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

MAX_ANCHOR_CHARS = 200
"""An anchor's text is cut to this many characters (its key is taken from the cut text)."""


def cut(text: str) -> str:
    return text if len(text) <= MAX_ANCHOR_CHARS else text[:MAX_ANCHOR_CHARS]


_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[\u3002\uff01\uff1f\uff1b])|\n+")
_LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_CONSTRAINT = re.compile(
    r"\b(?:must|never|always|only|don['\u2019]t|do not|muss|müssen|musst|nie|niemals|immer|"
    r"jamais|toujours|doit|doivent|dois|nunca|siempre|debe|deben)\b",
    re.IGNORECASE,
)
_CONSTRAINT_CJK = re.compile(r"必须|不要|永远|只")
CONSTRAINT_WORDS = (
    "must, never, always, only, don't, do not; muss, müssen, musst, nie, niemals, immer; "
    "jamais, toujours, doit, doivent, dois; nunca, siempre, debe, deben; 必须, 不要, 永远, 只"
)
"""The words that make a sentence of a user message a constraint (documented)."""
_TODO = re.compile(r"\b(?:TODO|FIXME)\b")
# Horizontal blanks only: ``\s*`` at every line start made a run of n blank lines O(n²).
_UNCHECKED = re.compile(r"^[^\S\n]*[-*+][^\S\n]+\[ \][^\S\n]+(\S.*)$", re.MULTILINE)
_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def sentences(text: str) -> list[str]:
    """``text`` cut at line breaks and sentence ends, list markers removed."""
    out = []
    for part in _SENTENCE_END.split(text):
        s = _LIST_MARK.sub("", part).strip()
        if s:
            out.append(s)
    return out


def words(text: str) -> frozenset[str]:
    """The words of ``text``, lower-cased (NFKC); CJK characters one by one."""
    out: set[str] = set()
    for w in _WORD.findall(unicodedata.normalize("NFKC", text).lower()):
        if _CJK.search(w):
            out.update(_CJK.findall(w))
            out.update(_CJK.sub(" ", w).split())
        else:
            out.add(w)
    return frozenset(out)


def sentence_key(text: str) -> str:
    """Lower-cased words in order: two sentences that differ only in case,
    spacing or punctuation have one key."""
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).lower()))


def is_constraint(sentence: str) -> bool:
    return bool(_CONSTRAINT.search(sentence) or _CONSTRAINT_CJK.search(sentence))


def constraints(text: str) -> Iterator[str]:
    """The sentences of ``text`` that state a constraint."""
    for s in sentences(text):
        if is_constraint(s) and sentence_key(s):
            yield cut(s)


def open_tasks(text: str) -> Iterator[str]:
    """Sentences with TODO or FIXME, and unchecked list items (``- [ ] ...``) of ``text``."""
    for m in _UNCHECKED.finditer(text):
        yield cut(m.group(1).strip())
    for line in text.splitlines():
        if _TODO.search(line) and not _UNCHECKED.match(line):
            for s in sentences(line):
                if _TODO.search(s) and sentence_key(s):
                    yield cut(s)


def question(text: str) -> str | None:
    """The last sentence of ``text`` when the text ends with a question mark."""
    stripped = text.rstrip()
    if not stripped.endswith(("?", "\uff1f")):
        return None
    found = sentences(stripped)
    return cut(found[-1]) if found and sentence_key(found[-1]) else None
