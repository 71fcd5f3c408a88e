"""OpenAI Responses reasoning items, kept in a THINKING block and given back.

Ingest reads a ``reasoning`` item into one THINKING block: its text is the
summary texts joined by a blank line (with no summary, the ``reasoning_text``
content's texts), its signature the compact JSON of what giving the item back
takes (``reasoning_signature``)::

    {"id": "rs_...", "encrypted_content": "...", "summary": [12, 40]}

``encrypted_content`` only when the item had one; ``summary`` (the lengths, in
code points, of two or more summary parts) or ``content`` (those of the
``reasoning_text`` parts) only where the text alone does not say where its
parts begin. A signature with neither stands for one summary part holding the
whole text (none when the text is empty), as ingest wrote it before the
lengths were kept.

``reasoning_item`` rebuilds the item from the block, for the OpenAI Responses
renderer: ``{"type": "reasoning", "id", "summary", "content" (when it had
one), "encrypted_content" (when it had one)}``, its texts as received. A
stateless loop (``store: false``) needs it back, with its encrypted content,
to keep its reasoning between tool calls.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SEPARATOR = "\n\n"
"""Between the texts of a reasoning item's parts in its THINKING block."""

_KEYS = frozenset({"id", "encrypted_content", "summary", "content"})


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def reasoning_signature(
    item_id: str,
    encrypted_content: str = "",
    *,
    summary: Sequence[str] = (),
    content: Sequence[str] = (),
) -> str:
    """The THINKING block signature of a reasoning item with these ``summary``
    texts (or, with none, these ``content`` texts)."""
    value: dict[str, object] = {"id": item_id}
    if encrypted_content:
        value["encrypted_content"] = encrypted_content
    if summary:
        if len(summary) > 1 or not summary[0]:
            value["summary"] = [len(t) for t in summary]
    elif content:
        value["content"] = [len(t) for t in content]
    return _dumps(value)


@dataclass(frozen=True, slots=True)
class ReasoningSignature:
    item_id: str
    encrypted_content: str = ""
    summary: tuple[int, ...] | None = None
    """The lengths of the summary parts (None: one part, the whole text)."""
    content: tuple[int, ...] | None = None
    """The lengths of the reasoning_text parts (None: the text is the summary)."""


def _lengths(value: object) -> tuple[int, ...] | None:
    if not isinstance(value, list):
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value):
        return None
    return tuple(value)


def parse_signature(signature: str) -> ReasoningSignature | None:
    """The reasoning signature in ``signature``; None when it is none (e.g. an
    Anthropic or Gemini signature, which is base64)."""
    if not signature.startswith("{"):
        return None
    try:
        value = json.loads(signature)
    except ValueError:
        return None
    if not isinstance(value, dict) or set(value) - _KEYS or not isinstance(value.get("id"), str):
        return None
    encrypted = value.get("encrypted_content", "")
    if not isinstance(encrypted, str):
        return None
    summary, content = _lengths(value.get("summary")), _lengths(value.get("content"))
    if (summary is None and "summary" in value) or (content is None and "content" in value):
        return None
    return ReasoningSignature(value["id"], encrypted, summary, content)


def parse_reasoning_signature(signature: str) -> tuple[str, str] | None:
    """(item id, encrypted content) of a ``reasoning_signature``; None when
    ``signature`` is not one."""
    parsed = parse_signature(signature)
    return None if parsed is None else (parsed.item_id, parsed.encrypted_content)


def _split(text: str, lengths: tuple[int, ...] | None) -> list[str] | None:
    """``text`` cut into parts of ``lengths`` with a SEPARATOR between them;
    None when they do not fit it."""
    if lengths is None:
        return None
    parts: list[str] = []
    pos = 0
    for i, n in enumerate(lengths):
        if i:
            if not text.startswith(SEPARATOR, pos):
                return None
            pos += len(SEPARATOR)
        parts.append(text[pos : pos + n])
        pos += n
    return parts if pos == len(text) else None


def reasoning_item(text: str, signature: str) -> dict[str, Any] | None:
    """The reasoning input item a THINKING block holds; None when its signature
    is no reasoning signature with an item id."""
    parsed = parse_signature(signature)
    if parsed is None or not parsed.item_id:
        return None
    item: dict[str, Any] = {"type": "reasoning", "id": parsed.item_id}
    content = _split(text, parsed.content)
    if content is not None:
        item["summary"] = []
        item["content"] = [{"type": "reasoning_text", "text": t} for t in content]
    else:
        summary = _split(text, parsed.summary)
        if summary is None:
            summary = [text] if text else []
        item["summary"] = [{"type": "summary_text", "text": t} for t in summary]
    if parsed.encrypted_content:
        item["encrypted_content"] = parsed.encrypted_content
    return item


__all__ = [
    "SEPARATOR",
    "ReasoningSignature",
    "parse_reasoning_signature",
    "parse_signature",
    "reasoning_item",
    "reasoning_signature",
]
