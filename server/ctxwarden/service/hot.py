"""A bounded LRU of hot sessions with one lock per session."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from ctxwarden.core.context import SessionContext


class HotSessions:
    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._items: OrderedDict[str, SessionContext] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    def __len__(self) -> int:
        return len(self._items)

    def lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            if len(self._locks) > 4 * self.capacity:
                self._prune_locks()
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    def _prune_locks(self) -> None:
        for sid, lock in list(self._locks.items()):
            if sid not in self._items and not lock.locked():
                del self._locks[sid]

    def get(self, session_id: str) -> SessionContext | None:
        ctx = self._items.get(session_id)
        if ctx is not None:
            self._items.move_to_end(session_id)
        return ctx

    def put(self, session_id: str, ctx: SessionContext) -> None:
        self._items[session_id] = ctx
        self._items.move_to_end(session_id)
        if len(self._items) <= self.capacity:
            return
        # Evict the least recently used sessions nobody is working on.
        for sid in list(self._items):
            if len(self._items) <= self.capacity:
                break
            lock = self._locks.get(sid)
            if sid != session_id and (lock is None or not lock.locked()):
                del self._items[sid]
                self._locks.pop(sid, None)

    def evict(self, session_id: str) -> None:
        self._items.pop(session_id, None)
