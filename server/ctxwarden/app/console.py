"""``ctxwarden serve --console-listen``: the console over a running manager."""

from __future__ import annotations

from ctxwarden.api.auth import Authenticator
from ctxwarden.config import Settings
from ctxwarden.console.config import ConsoleConfig
from ctxwarden.console.server import ConsoleServer, start_console
from ctxwarden.service.console import ConsoleReader
from ctxwarden.service.manager import SessionManager
from ctxwarden.store.console_reads import ConsoleReads


async def start_for(
    settings: Settings, manager: SessionManager, auth: Authenticator
) -> ConsoleServer | None:
    """The console of ``settings`` (None when it is off); raises ConsoleError."""
    if not settings.console_listen:
        return None
    config = ConsoleConfig(
        settings.console_listen, tls_cert=settings.tls_cert, tls_key=settings.tls_key
    )
    reader = ConsoleReader(manager, ConsoleReads(manager.store.engine))
    return await start_console(
        config, reader, auth, allow_unauthenticated=settings.insecure_allow_unauthenticated
    )
