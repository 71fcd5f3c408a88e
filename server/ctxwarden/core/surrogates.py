"""Lone surrogates: JSON may escape one, no UTF-8 encoder takes one.

JSON allows "\\ud800" and ``json.loads`` decodes it to a str with a surrogate
code point; so does decoding JSON text found inside a decoded document (tool-call
arguments, Anthropic's streamed ``input_json_delta``), and re-serialising it with
``ensure_ascii=False`` keeps the code point. Stored, it would make token counting,
rendering, compaction prompts and the database fail for the session from then
on, so what is stored is checked (``core.validation``) and so is what ingest
decodes a second time (``core.ingest``).
"""

from __future__ import annotations

import re

_ESCAPED = re.compile(r"\\u[dD][89a-fA-F]")


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a surrogate code point (never in ASCII text: O(1) there;
    otherwise the strict UTF-16 encoder, which refuses one, is the fastest scan)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-16-le")
    except UnicodeEncodeError:
        return True
    return False


def escapes_surrogate(json_text: str) -> bool:
    """Whether ``json_text`` escapes a surrogate ("\\ud800"): decoded, it may hold
    a lone one (text that holds one is checked with ``has_surrogate``)."""
    return _ESCAPED.search(json_text) is not None


def has_lone_surrogate(value: object) -> bool:
    """Whether a decoded JSON value holds a string (key or value) with a surrogate
    (an escaped pair decodes to its character; only an unpaired one is left)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if has_surrogate(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


__all__ = ["escapes_surrogate", "has_lone_surrogate", "has_surrogate"]
