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
encoded in one go: ``encode_cooperatively`` looks up and encodes its messages in
slices of a few ms and lets the event loop run the other calls in between
(ctxwarden.util.loop_slices); only storing what it made is done at once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from ctxwarden.core.messages import Message
from ctxwarden.core.model_input import ModelInputView
from ctxwarden.core.stepwise import EVERY, Steps, finish
from ctxwarden.util.loop_slices import ENABLED, finished

ENTRY_OVERHEAD = 176
"""Bytes per entry besides the encoding: the bytes object's header (33), the
(message, bytes) tuple (56), the int key (32) and its dict slot (~55)."""
STALE_SLACK = 64
"""Entries beyond the view's messages tolerated before stale ones are dropped."""
DEFAULT_LIMIT_BYTES = 32 * 1024 * 1024
"""The budget unless the server is given another (``--encoding-cache-mb``)."""
COOPERATIVE_FROM = 256
"""Inputs of fewer messages than this are encoded in one go (well under a slice)."""


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
        """``encode``, a slice at a time, letting the event loop run the other calls
        in between: the time held at once does not grow with the session."""
        if not ENABLED or len(v.messages) - offset < COOPERATIVE_FROM:
            return self.encode(v, offset)
        return await finished(self.encode_steps(v, offset))

    def encode(self, v: ModelInputView, offset: int) -> list[bytes]:
        """The length-delimited encodings of ``v.messages[offset:]``, cached."""
        return finish(self.encode_steps(v, offset))

    def encode_steps(self, v: ModelInputView, offset: int) -> Steps[list[bytes]]:
        """``encode`` in steps (core.stepwise). The steps only read the cache; what
        they made is stored at the end, in one go (``_store``), so a call for the
        same session that runs between two steps sees the cache as it was."""
        messages = v.messages[offset:]
        caching = v.live and self.limit_bytes > 0
        cached = self._sessions.get(v.session.session_id) if caching else None
        entries = cached.entries if cached and cached.revision == v.session.revision else {}
        out: list[bytes] = []
        made: list[tuple[Message, bytes]] = []
        for i, m in enumerate(messages):
            hit = entries.get(id(m))
            if hit is not None and hit[0] is m:
                out.append(hit[1])
            else:
                encoded = self._encode(m)
                out.append(encoded)
                if m.seq:  # stored messages only: the summary and synthetic results are remade
                    made.append((m, encoded))
            if i % EVERY == EVERY - 1:
                yield
        if caching:
            self._store(v, made)
        return out

    def _store(self, v: ModelInputView, made: Sequence[tuple[Message, bytes]]) -> None:
        """Keep the encodings ``made`` for ``v``'s session, within the budget."""
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
        for m, encoded in made:
            old = entries.get(id(m))
            if old is not None:
                if old[0] is m:
                    continue  # stored meanwhile by another call
                size -= len(old[1]) + ENTRY_OVERHEAD  # a freed message's id, reused
            entries[id(m)] = (m, encoded)
            size += len(encoded) + ENTRY_OVERHEAD
        if size > self.limit_bytes:  # alone over budget: caching it would evict every other session
            self.total_bytes -= prev
            return
        cached.size = size
        self.total_bytes += size - prev
        self._sessions[sid] = cached
        self._trim()

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
