"""Session lifecycle use cases: ArchiveSession and UnarchiveSession.

An archived session leaves memory and stays out of it: reads restore it for
the one call (runtime.restore keeps no archived copy), and every write is
refused by runtime.context_locked until it is unarchived.
"""

from __future__ import annotations

from ctxwarden.core.session import Session
from ctxwarden.core.validation import check_session_id
from ctxwarden.service.hot import EvictionCause
from ctxwarden.service.runtime import SessionRuntime
from ctxwarden.util import ids


class Lifecycle:
    """ArchiveSession, UnarchiveSession."""

    def __init__(self, rt: SessionRuntime) -> None:
        self.rt = rt

    async def archive_session(self, session_id: str) -> Session:
        """Archive the session (idempotent) and drop its in-memory copy."""
        return await self._set(session_id, ids.now_us())

    async def unarchive_session(self, session_id: str) -> Session:
        """Make the session writable again (idempotent); the next call restores it."""
        return await self._set(session_id, 0)

    async def _set(self, session_id: str, archive_time_us: int) -> Session:
        check_session_id(session_id)
        async with self.rt.hot.lock(session_id):
            session = await self.rt.db(
                lambda: self.rt.store.sessions.set_archived(session_id, archive_time_us)
            )
            if archive_time_us:
                self.rt.hot.evict(session_id, EvictionCause.ARCHIVED)
        if session is None:
            raise self.rt.not_found(session_id)
        return session
