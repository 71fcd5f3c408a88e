"""Wires store, service and api into a running gRPC server."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ctxwarden.api import reflection_v1
from ctxwarden.api.auth import Authenticator, JwtConfig, describe, load_api_keys, load_jwks
from ctxwarden.api.convert import new_encoding_cache
from ctxwarden.api.guard import GuardInterceptor, RateLimiter
from ctxwarden.api.handlers import SERVICE_NAME
from ctxwarden.api.reads import (
    OPEN_READ_SLOTS,
    OPEN_READ_TIMEOUT,
    STREAM_WINDOW_BYTES,
    BoundedReads,
    ReadGate,
)
from ctxwarden.api.servicer import ContextServicer
from ctxwarden.app import lifecycle
from ctxwarden.app.database_errors import schema_problem
from ctxwarden.config import Settings
from ctxwarden.core.compaction.types import Summarizer
from ctxwarden.observability.db import instrument_engine
from ctxwarden.observability.health import DatabaseProbe, HealthMonitor
from ctxwarden.observability.interceptor import RpcObserver
from ctxwarden.observability.logging import configure_logging
from ctxwarden.observability.loop_lag import LoopLag
from ctxwarden.observability.metrics import (
    Metrics,
    MetricsServer,
    ServiceMetrics,
    disable_created_series,
    start_metrics_server,
)
from ctxwarden.observability.tracing import Tracing, setup_tracing
from ctxwarden.service.manager import SessionManager
from ctxwarden.store import migrate
from ctxwarden.store.engine import make_engine, writable_message_bytes
from ctxwarden.store.quota import TenantQuota
from ctxwarden.store.repository import Store
from ctxwarden.store.urls import is_sqlite
from ctxwarden.util import listen, loop_slices

if TYPE_CHECKING:
    from ctxwarden.app.worker_link import WorkerLink
    from ctxwarden.console.server import ConsoleServer

log = logging.getLogger("ctxwarden")

HEALTH_SERVICES = ("", SERVICE_NAME)


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
    raise SchemaOutdated(schema_problem(url, status))


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


def make_authenticator(settings: Settings) -> Authenticator:
    try:
        auth = Authenticator(
            api_keys=load_api_keys(settings.api_keys_file) if settings.api_keys_file else {},
            jwt=JwtConfig(
                load_jwks(settings.jwt_jwks_file),
                settings.jwt_issuer,
                settings.jwt_audience,
                settings.jwt_tenant_claim,
            )
            if settings.jwt_jwks_file
            else None,
            mtls_tenants=bool(settings.tls_client_ca),
        )
    except (OSError, ValueError) as exc:
        raise BadConfig(str(exc)) from exc
    try:
        address = listen.parse(settings.listen)
    except listen.ListenError as exc:
        raise BadConfig(str(exc)) from exc
    if not auth.enabled and not address.is_local and not settings.insecure_allow_unauthenticated:
        raise BadConfig(
            f"refusing to listen on {settings.listen} without authentication: configure "
            "--api-keys-file, --jwt-jwks-file or --tls-client-ca, listen on 127.0.0.1 or a "
            "unix:PATH socket, or pass "
            "--insecure-allow-unauthenticated if the network is trusted"
        )
    return auth


def _server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    if not settings.tls_cert and not settings.tls_key:
        return None
    if not settings.tls_cert or not settings.tls_key:
        raise BadConfig("--tls-cert and --tls-key go together")
    try:
        cert = Path(settings.tls_cert).read_bytes()
        key = Path(settings.tls_key).read_bytes()
        ca = Path(settings.tls_client_ca).read_bytes() if settings.tls_client_ca else None
    except OSError as exc:
        raise BadConfig(f"cannot read TLS files: {exc}") from exc
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


async def build_manager(
    settings: Settings,
    summarizer: Summarizer | None,
    obs: Metrics | None = None,
    tracing: Tracing | None = None,
) -> SessionManager:
    """The store and the service for ``settings`` (what serve() runs, and what the
    in-process tests use)."""
    engine = make_engine(
        settings.database_url,
        pool_size=settings.db_pool_size,
        connect_timeout=settings.db_connect_timeout_seconds,
        pool_timeout=settings.db_pool_timeout_seconds,
    )
    if obs is not None:
        instrument_engine(engine, obs, tracing)
    hooks = ServiceMetrics(obs, tracing)
    quota = TenantQuota(settings.max_sessions_per_tenant, settings.max_stored_bytes_per_tenant)
    store = Store(
        engine,
        append_writers=settings.append_writers,
        observe=hooks.observe_db,
        max_message_bytes=await writable_message_bytes(engine, settings.limits.max_message_bytes),
        quota=quota,
        statement_timeout=settings.db_timeout_seconds,
    )
    await quota.reconcile(engine)
    return SessionManager(store, settings, summarizer, metrics=hooks)


async def serve(settings: Settings, link: WorkerLink | None = None) -> None:
    """Serve until SIGTERM/SIGINT; ``link``: as one worker of ``serve --workers N``."""
    if settings.model_table_file:
        from ctxwarden.config.modeltable import load_model_table

        try:
            load_model_table(settings.model_table_file)
        except (OSError, ValueError) as exc:
            raise BadConfig(str(exc)) from exc
    await asyncio.to_thread(ensure_schema, settings.database_url)
    summarizer = make_summarizer(settings)
    auth = make_authenticator(settings)
    credentials = _server_credentials(settings)
    disable_created_series()
    obs = Metrics()
    tracing = setup_tracing(settings.otel_endpoint) if settings.otel_endpoint else None
    manager = await build_manager(settings, summarizer, obs, tracing)
    obs.watch_sessions(
        lambda: len(manager.hot),
        manager.hot.capacity,
        lambda: manager.restores,
        lambda: manager.runtime.catch_ups,
    )
    metrics_server: MetricsServer | None = None
    console: ConsoleServer | None = None
    schedule = lifecycle.start(settings, manager, obs.registry)
    try:
        if settings.metrics_listen:
            try:
                metrics_server = start_metrics_server(settings.metrics_listen, obs.registry)
            except (OSError, ValueError) as exc:
                raise BadConfig(
                    f"cannot serve metrics on {settings.metrics_listen}: {exc}"
                ) from exc
        if settings.console_listen:
            # The console's web stack (uvicorn, Starlette, Jinja) is loaded only when it is on.
            from ctxwarden.app.console import start_for as start_console_for
            from ctxwarden.console.server import ConsoleError

            try:
                console = await start_console_for(settings, manager, auth)
            except ConsoleError as exc:
                raise BadConfig(str(exc)) from exc
        await _serve_grpc(
            settings, manager, auth, credentials, obs, tracing, metrics_server, console, link
        )
    finally:
        await lifecycle.stop(schedule)
        if console is not None:
            await console.close()
        if metrics_server is not None:
            metrics_server.close()
        if tracing is not None:
            tracing.shutdown()


def _interceptors(
    settings: Settings, auth: Authenticator, obs: Metrics, tracing: Tracing | None
) -> list[grpc.aio.ServerInterceptor]:
    # The observer comes first (outermost), so it times, logs and counts every
    # call, including the ones authentication or rate limiting rejects. The
    # guard covers ContextService only: health and reflection stay open.
    # BoundedReads is innermost: it serves unary methods as client-streaming
    # ones, so nothing is read before the guard has authenticated the call.
    timeout = settings.request_read_timeout
    return [
        RpcObserver(obs, tracing),
        GuardInterceptor(auth, RateLimiter(settings.rate_limit_rps)),
        BoundedReads(
            ReadGate(settings.max_concurrent_reads, timeout, "--request-read-timeout"),
            ReadGate(OPEN_READ_SLOTS, min(timeout, OPEN_READ_TIMEOUT), "health and reflection"),
        ),
    ]


def server_options(settings: Settings, address: listen.Address) -> list[tuple[str, int]]:
    max_bytes = settings.limits.max_request_bytes
    return [
        ("grpc.max_receive_message_length", max_bytes),
        ("grpc.max_send_message_length", max_bytes),
        ("grpc.max_concurrent_streams", settings.max_concurrent_streams),
        ("grpc.max_allowed_incoming_connections", settings.max_connections),
        # Windows grow only for messages being read: BDP probing would otherwise
        # grow every stream's window, read or not, to tens of MB.
        ("grpc.http2.bdp_probe", 0),
        ("grpc.http2.lookahead_bytes", STREAM_WINDOW_BYTES),
        *listen.grpc_options(address, settings.reuse_port),
    ]


async def _serve_grpc(
    settings: Settings,
    manager: SessionManager,
    auth: Authenticator,
    credentials: grpc.ServerCredentials | None,
    obs: Metrics,
    tracing: Tracing | None,
    metrics_server: MetricsServer | None,
    console: ConsoleServer | None = None,
    link: WorkerLink | None = None,
) -> None:
    address = listen.parse(settings.listen)
    server = grpc.aio.server(
        interceptors=_interceptors(settings, auth, obs, tracing),
        options=server_options(settings, address),
        maximum_concurrent_rpcs=settings.max_concurrent_rpcs,
    )
    health_servicer = _add_services(server, settings, manager, link)
    try:
        port = listen.bind(server, address, credentials, settings.unix_socket_mode)
    except listen.ListenError as exc:
        raise BadConfig(str(exc)) from exc
    monitor = HealthMonitor(
        health_servicer,
        HEALTH_SERVICES,
        DatabaseProbe(manager.store.ping, settings.database_url),
        interval=settings.health_interval_seconds,
        metrics=obs,
    )
    loop_lag = LoopLag(obs.registry)
    await server.start()
    manager.start()
    for name in HEALTH_SERVICES:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    monitor.start()
    loop_lag.start()
    loop_slices.tune_gc()
    if link is not None:
        link.ready(
            address.bound(port),
            metrics_server.address if metrics_server else "",
            console.address if console else "",
        )
    else:
        _announce(settings, address.bound(port), credentials, auth, metrics_server, console)

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    log.info("shutting down: NOT_SERVING, no new calls, finishing in-flight ones")
    # Order matters: report NOT_SERVING first (load balancers stop sending), stop
    # the probe (it can no longer flip health back), then drain, then close the pool.
    await health_servicer.enter_graceful_shutdown()
    await monitor.stop()
    await loop_lag.stop()
    await server.stop(settings.shutdown_grace_seconds)
    await manager.close(settings.shutdown_grace_seconds)
    log.info("stopped")


def _add_services(
    server: grpc.aio.Server,
    settings: Settings,
    manager: SessionManager,
    link: WorkerLink | None,
) -> health.aio.HealthServicer:
    """ContextService, health (a worker's is shared with its supervisor) and,
    unless turned off, reflection; returns the health servicer."""
    encodings = new_encoding_cache(max(0, settings.encoding_cache_mb) * 1024 * 1024)
    servicer = ContextServicer(manager, settings.limits, encodings)
    server.add_generic_rpc_handlers((servicer.handler(),))
    health_servicer = health.aio.HealthServicer() if link is None else link.health_servicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if settings.reflection:
        reflection_v1.enable(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name), server
        )
    return health_servicer


def _announce(
    settings: Settings,
    bound: str,
    credentials: grpc.ServerCredentials | None,
    auth: Authenticator,
    metrics_server: MetricsServer | None,
    console: ConsoleServer | None,
) -> None:
    # Tests and supervisors read this line to learn the bound address.
    print(f"ctxwarden listening on {bound}", flush=True)
    if metrics_server is not None:
        # ... and this one (always after the first) for the metrics port.
        print(f"ctxwarden metrics on {metrics_server.address}", flush=True)
    log.info(
        "serving on %s (%s), database %s, authentication: %s, summariser: %s%s",
        bound,
        "TLS" if credentials is not None else "plaintext",
        _redact(settings.database_url),
        describe(auth),
        _describe_summarizer(settings),
        f", metrics on {metrics_server.address}" if metrics_server else "",
    )
    if console is not None:
        # ... and this one (after those) for the console.
        print(f"ctxwarden console on {console.address}", flush=True)


def _describe_summarizer(settings: Settings) -> str:
    if not settings.summarizer_kind:
        return "none (Compact needs agent-side summaries)"
    if settings.summarizer_kind == "extractive":
        return "extractive"
    return f"{settings.summarizer_kind} {settings.summarizer_model or '(default model)'}"


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def run(settings: Settings, link: WorkerLink | None = None) -> int:
    try:
        configure_logging(settings.log_level, settings.log_format)
    except ValueError as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(settings, link))
    except (SchemaOutdated, BadConfig) as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2
    return 0
