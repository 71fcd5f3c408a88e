"""In-process service and api layers over a real database (no subprocess).

Two SessionManagers on one database are two replicas; their coroutines run in
the test's own event loop, so a race can be driven step by step. The api layer
runs as a real grpc.aio server on a loopback socket in the same loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import grpc

from ctxwarden.api.servicer import ContextServicer
from ctxwarden.app.server import build_manager
from ctxwarden.config import Settings
from ctxwarden.core.messages import ContentBlock, Message, Role, Usage
from ctxwarden.core.session import Session
from ctxwarden.core.tenancy import scoped_id
from ctxwarden.service.manager import SessionManager
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc


class FakeClock:
    """A clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def replica(
    url: str, clock: FakeClock | None = None, **settings: Any
) -> AsyncIterator[SessionManager]:
    """One server's service layer on ``url`` (a migrated database)."""
    manager = await build_manager(Settings(database_url=url, **settings), None)
    if clock is not None:
        manager.runtime.clock = clock
    try:
        yield manager
    finally:
        await manager.close()


@asynccontextmanager
async def api_server(manager: SessionManager) -> AsyncIterator[pb_grpc.ContextServiceStub]:
    """The api layer over ``manager``, served on a loopback port in this loop."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((ContextServicer(manager, manager.settings.limits).handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.ContextServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(None)


def user_msg(text: str, message_id: str = "") -> Message:
    return Message(role=Role.USER, content=(ContentBlock.of_text(text),), message_id=message_id)


def assistant_msg(
    text: str = "",
    *,
    calls: tuple[tuple[str, str, str], ...] = (),
    failed: bool = False,
    usage: Usage | None = None,
    model: str = "",
    metadata: dict[str, str] | None = None,
) -> Message:
    from ctxwarden.core.messages import ContentKind, StopReason

    blocks = [ContentBlock.of_text(text)] if text else []
    blocks += [
        ContentBlock(ContentKind.TOOL_CALL, tool_call_id=i, tool_name=n, arguments_json=a)
        for i, n, a in calls
    ]
    return Message(
        role=Role.ASSISTANT,
        content=tuple(blocks),
        stop_reason=StopReason.ERROR if failed else StopReason.STOP,
        error_message="503 upstream overloaded" if failed else "",
        usage=usage,
        model=model,
        metadata=metadata or {},
    )


def tool_result_msg(call_id: str, text: str) -> Message:
    return Message(
        role=Role.TOOL_RESULT,
        content=(ContentBlock.of_text(text),),
        tool_call_id=call_id,
        tool_name="read",
    )


async def new_session(
    manager: SessionManager, tenant: str = "", session_id: str = "", **fields: Any
) -> str:
    sid = scoped_id(tenant, session_id) if session_id else ""
    created = await manager.create_session(
        replace(Session(session_id=""), **fields), sid, None, tenant=tenant
    )
    return created.session_id
