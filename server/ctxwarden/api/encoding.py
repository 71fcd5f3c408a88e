"""Cached message encodings under one server's byte budget (``--encoding-cache-mb``).

Encoding a 1,000-message input from scratch costs ~20 ms in Python; with each
stored message encoded once it costs ~0.2 ms. The cache belongs to the api
layer: each server makes its own (app.serve, or ContextServicer by default),
so two servers in one process never share it. It is keyed by session and
revision: a new revision (new settings) starts the session's encodings again,
and a session that leaves memory (HotSessions.on_evict) takes its encodings
with it. When the total would exceed the budget, the encodings of the least
recently built sessions go.

What is counted is what an entry really holds: the encoded bytes plus the
objects around them (ENTRY_OVERHEAD). The messages an entry points to belong to
the hot session anyway; entries of messages that left the view (a compaction, a
rollback) are dropped, so they cannot keep those alive.

The first input of a long session (100,000 messages: seconds of CPU) is not
encoded in one go: ``encode_cooperatively`` encodes what the cache lacks in
slices of a few ms and lets the event loop run the other calls in between
(ctxwarden.util.loop_slices).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from ctxwarden.core.messages import Message
from ctxwarden.core.model_input import ModelInputView
from ctxwarden.util.loop_slices import ENABLED, Slicer

ENTRY_OVERHEAD = 176
"""Bytes per entry besides the encoding: the bytes object's header (33), the
(message, bytes) tuple (56), the int key (32) and its dict slot (~55)."""
STALE_SLACK = 64
"""Entries beyond the view's messages tolerated before stale ones are dropped."""
DEFAULT_LIMIT_BYTES = 32 * 1024 * 1024
"""The budget unless the server is given another (``--encoding-cache-mb``)."""
COOPERATIVE_FROM = 256
"""Fewer missing encodings than this are made in one go (well under a slice)."""

Fresh = dict[int, tuple[Message, bytes]]


class _Encodings:
    """One session's encodings: id(message) -> (message, bytes), of one revision."""

    __slots__ = ("entries", "revision", "size")

    def __init__(self, revision: int) -> None:
        self.revision = revision
        self.size = 0
        self.entries: dict[int, tuple[Message, bytes]] = {}


class EncodingCache:
    """Encoded messages of hot sessions, under one byte budget."""

    def __init__(
        self, encode_message: Callable[[Message], bytes], limit_bytes: int = DEFAULT_LIMIT_BYTES
    ) -> None:
        self.limit_bytes = limit_bytes
        self.total_bytes = 0
        self._encode = encode_message
        # session_id -> its encodings, least recently built first.
        self._sessions: OrderedDict[str, _Encodings] = OrderedDict()

    def __len__(self) -> int:
        """Sessions whose encodings are cached."""
        return len(self._sessions)

    def forget(self, session_id: str) -> None:
        """Drop a session's encodings (its copy left memory)."""
        cached = self._sessions.pop(session_id, None)
        if cached is not None:
            self.total_bytes -= cached.size

    async def encode_cooperatively(self, v: ModelInputView, offset: int) -> list[bytes]:
        """``encode``, with the encodings the cache lacks made in slices that
        yield to the event loop: the time held at once does not grow with the session."""
        if not ENABLED or len(v.messages) - offset < COOPERATIVE_FROM:
            return self.encode(v, offset)
        todo = self._missing(v, offset)
        if len(todo) < COOPERATIVE_FROM:
            return self.encode(v, offset)
        fresh: Fresh = {}
        slicer = Slicer()
        for i, m in enumerate(todo):
            fresh[id(m)] = (m, self._encode(m))
            if i & 63 == 63 and slicer.due():
                await slicer.pause()
        return self.encode(v, offset, fresh)

    def _missing(self, v: ModelInputView, offset: int) -> Sequence[Message]:
        """The messages of ``v.messages[offset:]`` without a cached encoding."""
        messages = v.messages[offset:]
        cached = self._sessions.get(v.session.session_id)
        if not v.live or self.limit_bytes <= 0 or cached is None:
            return messages
        if cached.revision != v.session.revision:
            return messages
        entries = cached.entries
        out = []
        for m in messages:
            hit = entries.get(id(m))
            if hit is None or hit[0] is not m:
                out.append(m)
        return out

    def encode(self, v: ModelInputView, offset: int, fresh: Fresh | None = None) -> list[bytes]:
        """The length-delimited encodings of ``v.messages[offset:]``, cached.

        ``fresh``: encodings made already (by ``encode_cooperatively``), by id.
        """
        made = fresh or {}
        if not v.live or self.limit_bytes <= 0:
            return [self._made(made, m) for m in v.messages[offset:]]
        sid = v.session.session_id
        cached = self._sessions.pop(sid, None)
        if cached is None or cached.revision != v.session.revision:
            if cached is not None:  # other settings: the view's messages may differ
                self.total_bytes -= cached.size
            cached = _Encodings(v.session.revision)
        entries = cached.entries
        prev = size = cached.size
        if len(entries) > len(v.messages) + STALE_SLACK:
            size = self._drop_stale(entries, v)
        out = []
        for m in v.messages[offset:]:
            hit = entries.get(id(m))
            if hit is not None and hit[0] is m:
                out.append(hit[1])
                continue
            encoded = self._made(made, m)
            out.append(encoded)
            if m.seq:  # stored messages only: the summary and synthetic results are remade
                entries[id(m)] = (m, encoded)
                size += len(encoded) + ENTRY_OVERHEAD
        if size > self.limit_bytes:  # alone over budget: caching it would evict every other session
            self.total_bytes -= prev
            return out
        cached.size = size
        self.total_bytes += size - prev
        self._sessions[sid] = cached
        self._trim()
        return out

    def _made(self, fresh: Fresh, m: Message) -> bytes:
        hit = fresh.get(id(m))
        return hit[1] if hit is not None and hit[0] is m else self._encode(m)

    def share(self, source_id: str, fork_id: str, revision: int) -> None:
        """A fork made at the end of ``source_id`` starts its encodings (of its
        ``revision``) as a copy of the source's: its view shows the very same
        message objects (a hit needs the same object), so its first input is not
        encoded again, however long it is."""
        cached = self._sessions.get(source_id)
        if cached is None or fork_id in self._sessions:
            return
        copy = _Encodings(revision)
        copy.entries, copy.size = dict(cached.entries), cached.size
        self._sessions[fork_id] = copy
        self.total_bytes += copy.size  # the bytes are shared: counted twice, to be safe
        self._trim()

    def _trim(self) -> None:
        """Drop the least recently built sessions' encodings while over budget."""
        while self.total_bytes > self.limit_bytes and self._sessions:
            _, old = self._sessions.popitem(last=False)
            self.total_bytes -= old.size

    @staticmethod
    def _drop_stale(entries: dict[int, tuple[Message, bytes]], v: ModelInputView) -> int:
        """Keep only the entries of messages in view; returns the bytes kept."""
        live = {id(m) for m in v.messages}
        for key in [k for k in entries if k not in live]:
            del entries[key]
        return sum(len(e[1]) + ENTRY_OVERHEAD for e in entries.values())
