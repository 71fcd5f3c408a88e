"""The process-wide budget for cached message encodings (``--encoding-cache-mb``).

Encoding a 1,000-message input from scratch costs ~20 ms in Python; with each
stored message encoded once it costs ~0.2 ms. The encodings live in the
session's own RenderCache, so they go when the session leaves memory; this
budget only tracks them, through weak references, and empties the caches of
the least recently built sessions when the total would exceed it.

What is counted is what a cache entry really holds: the encoded bytes plus
the objects around them (ENTRY_OVERHEAD). The messages an entry points to
belong to the hot session anyway; entries of messages that left the view (a
compaction, a rollback) are dropped, so they cannot keep those alive.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict, deque
from collections.abc import Callable

from ctxwarden.core.messages import Message
from ctxwarden.core.model_input import ModelInputView, RenderCache

ENTRY_OVERHEAD = 176
"""Bytes per entry besides the encoding: the bytes object's header (33), the
(message, bytes) tuple (56), the int key (32) and its dict slot (~55)."""
STALE_SLACK = 64
"""Entries beyond the view's messages tolerated before stale ones are dropped."""


def _on_death(dead: deque[int], key: int) -> Callable[[weakref.ref[RenderCache]], None]:
    """A weakref callback that notes ``key``; it holds neither the cache nor the budget."""

    def note(_ref: weakref.ref[RenderCache]) -> None:
        dead.append(key)

    return note


class EncodingCache:
    """Encoded messages of hot sessions, under one byte budget for the process."""

    def __init__(
        self, encode_message: Callable[[Message], bytes], limit_bytes: int = 32 * 1024 * 1024
    ) -> None:
        self.limit_bytes = limit_bytes
        self.total_bytes = 0
        self._encode = encode_message
        # id(cache) -> (weak reference to it, bytes accounted), least recently built first.
        self._caches: OrderedDict[int, tuple[weakref.ref[RenderCache], int]] = OrderedDict()
        # ids of caches that died (their session left memory); appended by weakref
        # callbacks, which may run at any point, and settled by the next encode.
        self._dead: deque[int] = deque()

    def __len__(self) -> int:
        """Sessions whose encodings are cached."""
        self._reap()
        return len(self._caches)

    def _reap(self) -> None:
        while self._dead:
            key = self._dead.popleft()
            entry = self._caches.get(key)
            if entry is not None and entry[0]() is None:
                del self._caches[key]
                self.total_bytes -= entry[1]

    def _track(self, cache: RenderCache) -> tuple[weakref.ref[RenderCache], int]:
        entry = self._caches.pop(id(cache), None)
        if entry is not None and entry[0]() is cache:
            return entry
        if entry is not None:  # a dead cache's id, reused before it was reaped
            self.total_bytes -= entry[1]
        cache.clear()  # a cache the budget dropped starts again from empty
        return weakref.ref(cache, _on_death(self._dead, id(cache))), 0

    def encode(self, v: ModelInputView, offset: int) -> list[bytes]:
        """The length-delimited encodings of ``v.messages[offset:]``, cached."""
        self._reap()
        cache = v.render_cache
        if cache is None or self.limit_bytes <= 0:
            return [self._encode(m) for m in v.messages[offset:]]
        ref, size = self._track(cache)
        prev = size
        if len(cache) > len(v.messages) + STALE_SLACK:
            size = self._drop_stale(cache, v)
        out = []
        for m in v.messages[offset:]:
            hit = cache.get(id(m))
            if hit is not None and hit[0] is m:
                out.append(hit[1])
                continue
            encoded = self._encode(m)
            out.append(encoded)
            if m.seq:  # stored messages only: the summary and synthetic results are remade
                cache[id(m)] = (m, encoded)
                size += len(encoded) + ENTRY_OVERHEAD
        if size > self.limit_bytes:  # alone over budget: caching it would evict every other session
            cache.clear()
            self.total_bytes -= prev
            return out
        self.total_bytes += size - prev
        self._caches[id(cache)] = (ref, size)
        while self.total_bytes > self.limit_bytes and self._caches:
            _, (old_ref, old_size) = self._caches.popitem(last=False)
            old = old_ref()
            if old is not None:
                old.clear()
            self.total_bytes -= old_size
        return out

    @staticmethod
    def _drop_stale(cache: RenderCache, v: ModelInputView) -> int:
        """Keep only the entries of messages in view; returns the bytes kept."""
        live = {id(m) for m in v.messages}
        for key in [k for k in cache if k not in live]:
            del cache[key]
        return sum(len(e[1]) + ENTRY_OVERHEAD for e in cache.values())
