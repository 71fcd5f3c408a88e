"""Serve the console from the server's event loop (uvicorn, no signal handlers of
its own: ``ctxwarden serve`` owns shutdown)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable

import uvicorn

from ctxwarden.api.auth import Authenticator
from ctxwarden.api.guard import FailureLimiter
from ctxwarden.console.auth import ConsoleAuth, Logins
from ctxwarden.console.config import ConsoleConfig
from ctxwarden.console.web import Console
from ctxwarden.service.console import ConsoleReader
from ctxwarden.util import listen


class ConsoleError(ValueError):
    pass


class ConsoleServer:
    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None], address: str) -> None:
        self._server = server
        self._task = task
        self.address = address
        """The bound http(s)://HOST:PORT."""

    async def close(self) -> None:
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._server.shutdown()


def _bind(address: listen.Address) -> socket.socket:
    host = address.host or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, address.port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def start_console(
    config: ConsoleConfig,
    reader: ConsoleReader,
    authenticator: Authenticator,
    *,
    allow_unauthenticated: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> ConsoleServer:
    try:
        address = listen.parse(config.listen)
    except listen.ListenError as exc:
        raise ConsoleError(str(exc).replace("--listen", "--console-listen")) from exc
    if address.is_unix:
        raise ConsoleError("--console-listen must be HOST:PORT (the console is served over HTTP)")
    if authenticator.enabled and not (authenticator.api_keys or authenticator.jwt):
        raise ConsoleError(
            "the console authenticates with API keys or JWTs (--api-keys-file, "
            "--jwt-jwks-file); client certificates alone cannot log in to it"
        )
    if not authenticator.enabled and not address.is_local and not allow_unauthenticated:
        raise ConsoleError(
            f"refusing to serve the console on {config.listen} without authentication: "
            "configure --api-keys-file or --jwt-jwks-file, listen on 127.0.0.1, or pass "
            "--insecure-allow-unauthenticated if the network is trusted"
        )
    logins = Logins(config.login_ttl_seconds, config.max_logins_per_tenant, clock)
    auth = ConsoleAuth(authenticator, logins, FailureLimiter(clock=clock))
    app = Console(reader, auth, config).app()
    try:
        sock = _bind(address)
    except OSError as exc:
        raise ConsoleError(f"cannot serve the console on {config.listen}: {exc}") from exc
    uv = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        ssl_certfile=config.tls_cert or None,
        ssl_keyfile=config.tls_key or None,
        log_level=logging.WARNING,
    )
    uv.load()
    server = uvicorn.Server(uv)
    server.lifespan = uv.lifespan_class(uv)
    await server.startup(sockets=[sock])
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    scheme = "https" if config.tls else "http"
    task = asyncio.create_task(server.main_loop(), name="console")
    return ConsoleServer(server, task, f"{scheme}://{shown}:{port}")
