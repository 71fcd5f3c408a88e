"""A bounded LRU of hot sessions, and one lock per session independent of it.

The locks are reference counted: an entry lives while somebody holds or waits
for it, and is dropped by the last one out. Evicting a session from the LRU
never touches its lock, so a waiter woken by a release always takes the same
lock the releaser held, and two coroutines can never run one session's
critical section at the same time.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

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
                entry.lock.release()
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[session_id]


class HotSessions:
    def __init__(self, capacity: int, lock_timeout: float = 0.0) -> None:
        self.capacity = max(1, capacity)
        self._items: OrderedDict[str, SessionContext] = OrderedDict()
        self.locks = SessionLocks(lock_timeout)
        self._listeners: list[Callable[[str], None]] = []

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._items

    def on_evict(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(session_id)`` whenever a session's copy leaves memory
        (evicted, or replaced by another copy), e.g. to drop what was derived from it."""
        self._listeners.append(listener)

    def _left(self, session_id: str) -> None:
        for listener in self._listeners:
            listener(session_id)

    def lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        """``async with hot.lock(sid):`` runs the session's critical section."""
        return self.locks.hold(session_id)

    def get(self, session_id: str) -> SessionContext | None:
        ctx = self._items.get(session_id)
        if ctx is not None:
            self._items.move_to_end(session_id)
        return ctx

    def put(self, session_id: str, ctx: SessionContext) -> None:
        old = self._items.get(session_id)
        if old is not None and old is not ctx:
            self._left(session_id)
        self._items[session_id] = ctx
        self._items.move_to_end(session_id)
        if len(self._items) <= self.capacity:
            return
        # Evict the least recently used sessions nobody is working on.
        for sid in list(self._items):
            if len(self._items) <= self.capacity:
                break
            if sid != session_id and not self.locks.held(sid):
                del self._items[sid]
                self._left(sid)

    def evict(self, session_id: str) -> None:
        if self._items.pop(session_id, None) is not None:
            self._left(session_id)
