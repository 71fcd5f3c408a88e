"""Rendered provider JSON of live model inputs, grown with the session.

Rendering a long session into a provider's format from scratch costs several
times building its native input, and an agent asks for a new input after
every append. So each hot session keeps, per format, a render state
(``core.render.incremental``): the messages of its input rendered and
serialised once. A new input that begins with the messages the state was fed
(the view's fingerprint chain says so) feeds it only the new ones; anything
else (a compaction, a rollback, another model, prompt or tools) starts a new
state. The last finished rendering is kept too, so an unchanged session
renders nothing at all.

States live in an LRU bounded by bytes. A rendering takes its state out of
the cache and puts it back when done, so two renderings of one session never
share a state (the second starts its own).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from ctxwarden.core.model_input import ModelInputView
from ctxwarden.core.render import Format, Rendered, RenderState, finished, new_state

Key = tuple[str, int]
"""(session_id, format)."""

ENTRY_OVERHEAD = 512

INLINE_MESSAGES = 16
"""A rendering that feeds at most this many messages runs on the caller's
thread (a worker thread costs more than rendering a few messages)."""


@dataclass(slots=True)
class Entry:
    """A session's render state for one format, and what it was fed."""

    state: RenderState
    model: str
    prefix_hash: str
    digest: int
    """The view's fingerprint of the messages fed (after the summary)."""
    last: tuple[tuple[int, int], Rendered] | None = None
    """((session version, max_output_tokens), rendering) of the last request."""

    @property
    def size(self) -> int:
        # The last rendering shares its items with the state; only its joined
        # JSON, once read, is extra.
        memo = self.last[1].joined * 2 if self.last is not None else 0
        return self.state.size + memo + ENTRY_OVERHEAD


@dataclass(frozen=True, slots=True)
class Job:
    """One rendering: the state it continues (or a new one) and what to feed it."""

    entry: Entry
    feed: int
    """Messages of the view still to feed (from entry.state.fed on)."""

    @property
    def inline(self) -> bool:
        return self.feed <= INLINE_MESSAGES


def _fits(entry: Entry, view: ModelInputView, model: str) -> bool:
    if entry.model != model or entry.prefix_hash != view.prefix_hash:
        return False
    index = entry.state.fed - view.summary_messages
    return (
        bool(view.digests)
        and 0 <= index < len(view.digests)
        and entry.state.fed <= view.stable_messages
        and view.digests[index] == entry.digest
    )


def plan(entry: Entry | None, fmt: Format, view: ModelInputView, model: str) -> Job:
    """Continue ``entry`` when the view begins with what it was fed, else start anew."""
    if entry is None or not _fits(entry, view, model):
        s = view.session
        state = new_state(fmt, s.system_prompt, s.tools, model=model)
        entry = Entry(state, model, view.prefix_hash, 0)
    return Job(entry, max(0, view.stable_messages - entry.state.fed))


def run(job: Job, view: ModelInputView) -> Rendered:
    """Feed the view's new stable messages, then finish with the rest."""
    entry, state = job.entry, job.entry.state
    stable = view.stable_messages
    state.feed(view.messages[state.fed : stable])
    if view.digests:
        entry.digest = view.digests[stable - view.summary_messages]
    return finished(state, view.messages[stable:])


class RenderedCache:
    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.size = 0
        self._entries: OrderedDict[Key, Entry] = OrderedDict()
        self._sizes: dict[Key, int] = {}
        self.hits = 0
        """Requests answered with the last rendering, rendering nothing (tests, metrics)."""
        self.resumed = 0
        """Renderings that continued a state rather than starting one."""

    def take(self, key: Key) -> Entry | None:
        """The state of ``key``, taken out of the cache (put it back when done)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.size -= self._sizes.pop(key)
        return entry

    def put(self, key: Key, entry: Entry) -> None:
        self.take(key)
        size = entry.size
        if size > self.limit_bytes:
            return
        self._entries[key] = entry
        self._sizes[key] = size
        self.size += size
        while self.size > self.limit_bytes:
            dropped, _ = self._entries.popitem(last=False)
            self.size -= self._sizes.pop(dropped)

    def forget(self, session_id: str) -> None:
        for key in [k for k in self._entries if k[0] == session_id]:
            self.take(key)

    def __len__(self) -> int:
        return len(self._entries)
