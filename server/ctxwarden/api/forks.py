"""ForkSession's handler (a mixin of the ContextService servicer)."""

from __future__ import annotations

from typing import Any

from ctxwarden.api.convert_session import session_to_pb
from ctxwarden.api.encoding import EncodingCache
from ctxwarden.api.tenancy import current_tenant, inner_id
from ctxwarden.api.unary import idempotency_key, unary
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.service.manager import SessionManager
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses_pb


class ForkHandlers:
    manager: SessionManager
    encodings: EncodingCache

    @unary
    async def ForkSession(self, request: pb.ForkSessionRequest, context: Any) -> ses_pb.Session:
        if request.at_seq < 0:
            raise InvalidArgument(
                f"at_seq {request.at_seq} is negative; 0 forks at the end",
                reason=ErrorReason.INVALID_SEQ,
                field="at_seq",
            )
        new_id = (
            inner_id(request.new_session_id, "new_session_id") if request.new_session_id else ""
        )
        source = inner_id(request.session_id)
        fork = await self.manager.fork_session(
            source, request.at_seq, new_id, idempotency_key(request), tenant=current_tenant.get()
        )
        if request.at_seq == 0:  # at the end: its input starts as the source's does
            self.encodings.share(source, fork.session_id, fork.revision)
        return session_to_pb(fork)
