"""Rendered provider JSON of live model inputs, made once per state.

Rendering a long session into a provider's format costs several times building
its native input. The rendered result is a pure function of the input, and the
input of the session's state (same state, same bytes), so it is kept, keyed by
the session, its version (advanced by every change), the format and the output
budget: an unchanged session renders once however often it is asked for, and a
change makes the old entries unreachable (they age out of the LRU).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from ctxwarden.core.render import Rendered

Key = tuple[str, int, int, int]
"""(session_id, session version, format, max_output_tokens)."""

ENTRY_OVERHEAD = 512


@dataclass(slots=True)
class _Entry:
    rendered: Rendered
    size: int


class RenderedCache:
    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.size = 0
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self.hits = 0
        """Answers served from the cache (for tests and metrics)."""

    def get(self, key: Key) -> Rendered | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry.rendered

    def put(self, key: Key, rendered: Rendered) -> None:
        size = len(rendered.json) * 2 + ENTRY_OVERHEAD  # str of mostly 1-byte chars: generous
        if size > self.limit_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= old.size
        self._entries[key] = _Entry(rendered, size)
        self.size += size
        while self.size > self.limit_bytes:
            _, dropped = self._entries.popitem(last=False)
            self.size -= dropped.size
