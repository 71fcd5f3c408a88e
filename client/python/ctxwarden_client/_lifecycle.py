"""ArchiveSession, UnarchiveSession and GetUsage, mixed into Client and AsyncClient."""
# ruff: noqa: ASYNC109

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from . import _calls
from .v1 import context_service_pb2 as pb
from .v1 import session_pb2

if TYPE_CHECKING:
    from ._calls import Call

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")


class SyncLifecycle:
    if TYPE_CHECKING:

        def _call(self, call: Call[_Req, _Resp], timeout: float | None) -> _Resp: ...

    def archive_session(
        self, session_id: str, *, timeout: float | None = None
    ) -> session_pb2.Session:
        """Archives the session (read-only until unarchived; idempotent)."""
        return self._call(_calls.archive_session(session_id), timeout)

    def unarchive_session(
        self, session_id: str, *, timeout: float | None = None
    ) -> session_pb2.Session:
        """Makes an archived session writable again (idempotent)."""
        return self._call(_calls.unarchive_session(session_id), timeout)

    def get_usage(self, session_id: str = "", *, timeout: float | None = None) -> pb.UsageReport:
        """The usage ledger of a session, or of the tenant's sessions ("")."""
        return self._call(_calls.get_usage(session_id), timeout)


class AsyncLifecycle:
    if TYPE_CHECKING:

        async def _call(self, call: Call[_Req, _Resp], timeout: float | None) -> _Resp: ...

    async def archive_session(
        self, session_id: str, *, timeout: float | None = None
    ) -> session_pb2.Session:
        """Archives the session (read-only until unarchived; idempotent)."""
        return await self._call(_calls.archive_session(session_id), timeout)

    async def unarchive_session(
        self, session_id: str, *, timeout: float | None = None
    ) -> session_pb2.Session:
        """Makes an archived session writable again (idempotent)."""
        return await self._call(_calls.unarchive_session(session_id), timeout)

    async def get_usage(
        self, session_id: str = "", *, timeout: float | None = None
    ) -> pb.UsageReport:
        """The usage ledger of a session, or of the tenant's sessions ("")."""
        return await self._call(_calls.get_usage(session_id), timeout)
