"""One copy of the long strings that many sessions repeat.

Agents of one kind send the same system prompt and tool schemas for every
session; with thousands of hot sessions, a copy each is tens of megabytes.
"""

from __future__ import annotations

MIN_CHARS = 64
"""Shorter strings are not worth a lookup."""
MAX_ENTRIES = 4096

_pool: dict[str, str] = {}


def shared(text: str) -> str:
    """``text``, or an equal string already held for another session."""
    if len(text) < MIN_CHARS:
        return text
    held = _pool.get(text)
    if held is not None:
        return held
    if len(_pool) >= MAX_ENTRIES:
        _pool.clear()  # crude but bounded; the common strings come back at once
    _pool[text] = text
    return text
