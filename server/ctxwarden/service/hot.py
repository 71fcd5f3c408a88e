"""A bounded LRU of hot sessions, and one lock per session independent of it.

The locks are reference counted: an entry lives while somebody holds or waits
for it, and is dropped by the last one out. Evicting a session from the LRU
never touches its lock, so a waiter woken by a release always takes the same
lock the releaser held, and two coroutines can never run one session's
critical section at the same time.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace

from ctxwarden.core.cache_prefix import CachePrefix
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import Unavailable
from ctxwarden.core.reasons import ErrorReason


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class SessionLocks:
    """One asyncio.Lock per session, alive exactly while it is held or awaited.

    ``wait_timeout`` bounds the wait (0: unbounded): a holder is itself bounded
    by the database timeout, so a longer wait means the database is hung, and the
    caller gets UNAVAILABLE instead of queueing without end."""

    def __init__(self, wait_timeout: float = 0.0) -> None:
        self._entries: dict[str, _Entry] = {}
        self.wait_timeout = wait_timeout
        self.releasing: Callable[[str], None] | None = None
        """Called with the session's ID by each holder just before it lets go."""

    def __len__(self) -> int:
        return len(self._entries)

    def held(self, session_id: str) -> bool:
        """Whether somebody holds or waits for the session's lock."""
        return session_id in self._entries

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        entry = self._entries.get(session_id)
        if entry is None:
            entry = self._entries[session_id] = _Entry()
        entry.users += 1
        try:
            try:
                if self.wait_timeout > 0:
                    async with asyncio.timeout(self.wait_timeout):
                        await entry.lock.acquire()
                else:
                    await entry.lock.acquire()
            except TimeoutError:
                raise Unavailable(
                    "another call on this session is still waiting for the database; retry shortly",
                    reason=ErrorReason.SESSION_BUSY,
                ) from None
            try:
                yield
            finally:
                try:
                    if self.releasing is not None:
                        self.releasing(session_id)
                finally:
                    entry.lock.release()  # whatever ``releasing`` did
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[session_id]


class EvictionCause:
    """Why a session's copy left memory (the ``cause`` label of the evictions metric)."""

    LRU = "lru"
    """Room for another session (--max-hot-sessions)."""
    IDLE = "idle"
    """Not touched for --idle-evict-seconds."""
    ARCHIVED = "archived"
    DELETED = "deleted"
    STALE = "stale"
    """Another writer changed the session, or a write's outcome is unknown."""


class HotSessions:
    """``clock`` (seconds, monotonic) stamps each access, for idle eviction."""

    def __init__(
        self,
        capacity: int,
        lock_timeout: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.capacity = max(1, capacity)
        self._items: OrderedDict[str, SessionContext] = OrderedDict()
        self._touched: dict[str, float] = {}
        self.locks = SessionLocks(lock_timeout)
        self._listeners: list[tuple[Callable[[str], None], bool]] = []
        self.clock = clock
        self.evictions: Counter[str] = Counter()
        """Copies that left memory, by EvictionCause (read by the metrics at scrape)."""
        self._builds_in_writes: dict[str, list[tuple[SessionContext, int, CachePrefix]]] = {}
        """Builds counted while the session's lock was held: (copy, builds after, prefix)."""
        self.locks.releasing = self._keep_builds

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._items

    def on_evict(self, listener: Callable[[str], None], *, on_rebuild: bool = True) -> None:
        """Call ``listener(session_id)`` whenever a session's copy leaves memory
        (evicted, or replaced by another copy), e.g. to drop what was derived from it.
        ``on_rebuild`` False: not when the copy is rebuilt in place (``put_rebuilt``),
        for what does not depend on how its messages were counted."""
        self._listeners.append((listener, on_rebuild))

    def _left(self, session_id: str, *, rebuilt: bool = False) -> None:
        for listener, on_rebuild in self._listeners:
            if on_rebuild or not rebuilt:
                listener(session_id)

    def lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        """``async with hot.lock(sid):`` runs the session's critical section."""
        return self.locks.hold(session_id)

    def get(self, session_id: str) -> SessionContext | None:
        ctx = self._items.get(session_id)
        if ctx is not None:
            self._items.move_to_end(session_id)
            self._touched[session_id] = self.clock()
        return ctx

    def count_build(self, session_id: str, prefix: CachePrefix) -> None:
        """Count a live input in the hot copy's cache ledger.

        A build takes no lock, so a write may be in flight: it planned its version of
        the session before this count and puts it in memory after. Such counts are
        noted and, when the write lets go of the lock, counted again on the copy if the
        version it left does not have them (``_keep_builds``)."""
        ctx = self.get(session_id)
        if ctx is None:
            return
        builds = _count(ctx, prefix)
        if self.locks.held(session_id):
            self._builds_in_writes.setdefault(session_id, []).append((ctx, builds, prefix))

    def _keep_builds(self, session_id: str) -> None:
        """A lock holder lets go: the builds counted meanwhile that the copy's session
        lacks (it was planned before them) are counted again, in order. A copy replaced
        meanwhile (restored) lost them, as a dropped copy loses its unwritten counts."""
        noted = self._builds_in_writes.pop(session_id, None)
        if not noted:
            return
        ctx = self._items.get(session_id)
        for copy, builds, prefix in noted:
            if copy is ctx and ctx.session.usage.cache.builds < builds:
                _count(ctx, prefix)

    def put_rebuilt(self, session_id: str, rebuilt: SessionContext) -> None:
        """Put a copy the lock holder rebuilt from the current one (UpdateSession's new
        tokenizer or model: the same messages, counted anew) in its place. Unlike a
        restored copy, it continues the current one: the builds noted on that are
        counted on it at release, and only the listeners that depend on the counts
        hear that the current one left."""
        current = self._items.get(session_id)
        if current is None:
            self.put(session_id, rebuilt)
            return
        noted = self._builds_in_writes.get(session_id, [])
        noted[:] = [(rebuilt if c is current else c, n, p) for c, n, p in noted]
        self._items[session_id] = rebuilt
        self._items.move_to_end(session_id)
        self._touched[session_id] = self.clock()
        if current is not rebuilt:
            self._left(session_id, rebuilt=True)

    def put(self, session_id: str, ctx: SessionContext) -> None:
        old = self._items.get(session_id)
        if old is not None and old is not ctx:
            self._left(session_id)
        self._items[session_id] = ctx
        self._items.move_to_end(session_id)
        self._touched[session_id] = self.clock()
        if len(self._items) <= self.capacity:
            return
        # Evict the least recently used sessions nobody is working on.
        for sid in list(self._items):
            if len(self._items) <= self.capacity:
                break
            if sid != session_id and not self.locks.held(sid):
                self._remove(sid, EvictionCause.LRU)

    def _remove(self, session_id: str, cause: str) -> None:
        del self._items[session_id]
        self._touched.pop(session_id, None)
        self.evictions[cause] += 1
        self._left(session_id)

    def evict(self, session_id: str, cause: str = EvictionCause.STALE) -> None:
        if session_id in self._items:
            self._remove(session_id, cause)

    def recheck_forks_of(self, parent: str) -> None:
        """Make the next write to each hot fork of ``parent`` check its stored
        version first: a rollback of the parent may hand rows over to its forks
        (store.lineage.hand_over), which moves their versions on."""
        for ctx in self._items.values():
            if ctx.session.parent_session_id == parent:
                ctx.checked_at = float("-inf")

    def evict_idle(self, idle_seconds: float) -> int:
        """Evict the sessions not touched for ``idle_seconds`` that nobody is
        working on; returns how many. The LRU order is the order of last touch,
        so the scan stops at the first session touched recently."""
        if idle_seconds <= 0:
            return 0
        now = self.clock()
        evicted = 0
        for sid in list(self._items):
            if now - self._touched.get(sid, now) < idle_seconds:
                break
            if not self.locks.held(sid):
                self._remove(sid, EvictionCause.IDLE)
                evicted += 1
        return evicted


def _count(ctx: SessionContext, prefix: CachePrefix) -> int:
    """Count one build in the copy's cache ledger; the builds counted after it."""
    usage = ctx.session.usage.after_build(prefix)
    ctx.session = replace(ctx.session, usage=usage)
    return usage.cache.builds
