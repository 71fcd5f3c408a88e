"""ArchiveSession and UnarchiveSession, a mixin of the ContextService servicer."""

from __future__ import annotations

from typing import Any

from ctxwarden.api.convert_session import session_to_pb
from ctxwarden.api.tenancy import inner_id
from ctxwarden.api.unary import unary
from ctxwarden.service.manager import SessionManager
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses_pb


class LifecycleRpcs:
    manager: SessionManager

    @unary
    async def ArchiveSession(
        self, request: pb.ArchiveSessionRequest, context: Any
    ) -> ses_pb.Session:
        archived = await self.manager.archive_session(inner_id(request.session_id))
        return session_to_pb(archived)

    @unary
    async def UnarchiveSession(
        self, request: pb.UnarchiveSessionRequest, context: Any
    ) -> ses_pb.Session:
        session = await self.manager.unarchive_session(inner_id(request.session_id))
        return session_to_pb(session)
