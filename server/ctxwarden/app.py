"""Wires store, service and api into a running gRPC server."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ctxwarden.api.handlers import SERVICE_NAME
from ctxwarden.api.servicer import ContextServicer
from ctxwarden.config import Settings
from ctxwarden.core.compaction.types import Summarizer
from ctxwarden.service.manager import SessionManager
from ctxwarden.store import migrate
from ctxwarden.store.engine import make_engine
from ctxwarden.store.repository import Repository
from ctxwarden.store.urls import is_sqlite

log = logging.getLogger("ctxwarden")


class SchemaOutdated(RuntimeError):
    pass


def ensure_schema(url: str) -> None:
    """Refuse an outdated schema; create a brand-new embedded SQLite database."""
    status = migrate.schema_status(url)
    if status.up_to_date:
        return
    if status.empty and status.current is None and is_sqlite(url):
        log.info("creating a new SQLite database")
        migrate.upgrade(url)
        return
    raise SchemaOutdated(
        f"the database schema is at revision {status.current or 'none'} but this server "
        f"needs {status.head}; run `ctxwarden migrate --database-url ...` first"
    )


class BadConfig(ValueError):
    pass


def make_summarizer(settings: Settings) -> Summarizer | None:
    if not settings.summarizer_kind:
        return None
    from ctxwarden.summarizers import build_summarizer

    try:
        return build_summarizer(
            settings.summarizer_kind,
            base_url=settings.summarizer_base_url,
            model=settings.summarizer_model,
            api_key_env=settings.summarizer_api_key_env,
            timeout=settings.summarizer_timeout,
            max_output_tokens=settings.summarizer_max_output_tokens,
        )
    except ValueError as exc:
        raise BadConfig(str(exc)) from exc


async def serve(settings: Settings) -> None:
    await asyncio.to_thread(ensure_schema, settings.database_url)
    summarizer = make_summarizer(settings)
    repo = Repository(make_engine(settings.database_url, pool_size=settings.db_pool_size))
    manager = SessionManager(repo, settings, summarizer)
    servicer = ContextServicer(manager, settings.limits)
    max_bytes = settings.limits.max_request_bytes
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", max_bytes),
            ("grpc.max_send_message_length", max_bytes),
        ]
    )
    server.add_generic_rpc_handlers((servicer.handler(),))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (
            SERVICE_NAME,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    port = server.add_insecure_port(settings.listen)
    if port == 0:
        raise OSError(f"cannot listen on {settings.listen}")
    await server.start()
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    host = settings.listen.rsplit(":", 1)[0]
    # Tests and supervisors read this line to learn the bound port.
    print(f"ctxwarden listening on {host}:{port}", flush=True)
    log.info("serving on %s:%d, database %s", host, port, _redact(settings.database_url))

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    log.info("shutting down: no new calls, finishing in-flight ones")
    await health_servicer.enter_graceful_shutdown()
    await server.stop(settings.shutdown_grace_seconds)
    await manager.close()
    log.info("stopped")


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def run(settings: Settings) -> int:
    try:
        asyncio.run(serve(settings))
    except (SchemaOutdated, BadConfig) as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2
    return 0
