"""In-process tests: service hooks, the interceptor on all four RPC kinds, log
formatting, engine events and the health monitor."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import text

from ctxwarden.api.auth import Authenticator
from ctxwarden.api.servicer import ContextServicer
from ctxwarden.api.tenancy import current_tenant, enter_tenant, tenant_listener
from ctxwarden.app.server import _interceptors
from ctxwarden.config import Settings
from ctxwarden.core.errors import FailedPrecondition, Unavailable
from ctxwarden.core.model_input import TokenBreakdown, TokenCountMethod
from ctxwarden.core.session import Checkpoint, CompactionTrigger
from ctxwarden.observability.db import instrument_engine, operation
from ctxwarden.observability.health import DatabaseProbe, DatabaseUnreachable, HealthMonitor
from ctxwarden.observability.interceptor import RpcObserver
from ctxwarden.observability.logging import (
    FIELDS_ATTR,
    JsonFormatter,
    RpcInfo,
    TextFormatter,
    configure_logging,
    current_rpc,
)
from ctxwarden.observability.metrics import Metrics, ServiceMetrics, parse_listen
from ctxwarden.store.engine import make_engine
from ctxwarden.v1 import context_service_pb2 as svc_pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.support.builders import user
from tests.support.inproc import replica
from tests.support.server import migrate_database


@pytest.fixture
def fresh() -> Metrics:
    return Metrics(process=False)


def value(m: Metrics, name: str, **labels: str) -> float:
    got = m.registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


# -- service hooks ---------------------------------------------------------------------


def _tokens(total: int, ratio: float) -> TokenBreakdown:
    return TokenBreakdown(
        1, 2, 3, total - 6, total, 128000, 111616, True, 0, ratio, TokenCountMethod.ESTIMATED
    )


async def test_hooks_record_into_the_installed_metrics(fresh: Metrics) -> None:
    hooks = ServiceMetrics()
    hooks.observe_append(5)  # nothing installed: a no-op
    hooks.install(fresh)
    hooks.observe_append(3)
    hooks.observe_append(0)
    hooks.observe_model_input(_tokens(5000, 1.07))
    hooks.observe_compaction(
        Checkpoint(
            "c1",
            "s1",
            "sum",
            10,
            9000,
            0,
            tokens_after=2000,
            summarizer="agent",
            trigger=CompactionTrigger.THRESHOLD,
        )
    )

    async def summarise() -> str:
        return "summary"

    async def unavailable() -> str:
        raise Unavailable("down", reason="SUMMARIZER_FAILED")

    async def rejected() -> str:
        raise FailedPrecondition("bad key", reason="SUMMARIZER_FAILED")

    assert await hooks.timed_summarize("extractive", summarise()) == "summary"
    with pytest.raises(Unavailable):
        await hooks.timed_summarize("openai:m", unavailable())
    with pytest.raises(FailedPrecondition):
        await hooks.timed_summarize("openai:m", rejected())
    hooks.uninstall(Metrics(process=False))  # not the installed one: still recording
    hooks.observe_append(1)
    hooks.uninstall(fresh)
    hooks.observe_append(100)

    assert value(fresh, "ctxwarden_messages_appended_total") == 4
    assert value(fresh, "ctxwarden_model_input_tokens_count") == 1
    assert value(fresh, "ctxwarden_model_input_tokens_bucket", le="8192.0") == 1
    assert value(fresh, "ctxwarden_model_input_tokens_bucket", le="4096.0") == 0
    assert value(fresh, "ctxwarden_token_estimate_error_ratio_bucket", le="1.1") == 1
    assert value(fresh, "ctxwarden_token_estimate_error_ratio_bucket", le="1.05") == 0
    assert value(fresh, "ctxwarden_compactions_total", trigger="threshold", summarizer="agent") == 1
    assert value(fresh, "ctxwarden_compaction_tokens_removed_total", trigger="threshold") == 7000
    duration = "ctxwarden_summarizer_duration_seconds_count"
    assert value(fresh, duration, summarizer="extractive", result="ok") == 1
    assert value(fresh, duration, summarizer="openai:m", result="unavailable") == 1
    failures = "ctxwarden_summarizer_failures_total"
    assert value(fresh, failures, summarizer="openai:m", reason="unavailable") == 1
    assert value(fresh, failures, summarizer="openai:m", reason="rejected") == 1


def test_hooks_given_metrics_record_into_them_only() -> None:
    a, b = Metrics(process=False), Metrics(process=False)
    ServiceMetrics(a).observe_append(2)
    ServiceMetrics(b).observe_append(5)
    ServiceMetrics().observe_append(7)  # the default: records nothing
    assert value(a, "ctxwarden_messages_appended_total") == 2
    assert value(b, "ctxwarden_messages_appended_total") == 5


def test_two_metrics_never_share_a_registry() -> None:
    a, b = Metrics(process=False), Metrics(process=False)
    a.rpcs.labels("x/Y", "OK").inc()
    assert value(a, "ctxwarden_rpcs_total", method="x/Y", code="OK") == 1
    assert value(b, "ctxwarden_rpcs_total", method="x/Y", code="OK") == 0


@pytest.mark.parametrize(
    ("listen", "want"),
    [
        ("127.0.0.1:9100", ("127.0.0.1", 9100)),
        ("[::1]:0", ("::1", 0)),
        ("0.0.0.0:1", ("0.0.0.0", 1)),
    ],
)
def test_parse_listen(listen: str, want: tuple[str, int]) -> None:
    assert parse_listen(listen) == want


@pytest.mark.parametrize("listen", ["9100", ":9100", "host:port", "h:70000"])
def test_parse_listen_rejects(listen: str) -> None:
    with pytest.raises(ValueError, match="metrics"):
        parse_listen(listen)


# -- the interceptor on every kind of RPC -------------------------------------------------


async def _unary(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    if request == b"abort":
        await context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
    if request == b"boom":
        raise RuntimeError("bug")
    if request == b"setcode":
        context.set_code(grpc.StatusCode.ALREADY_EXISTS)
    return b"re:" + request


async def _client_stream(requests: AsyncIterator[bytes], context: Any) -> bytes:
    return b",".join([r async for r in requests])


async def _server_stream_writer(request: bytes, context: Any) -> None:
    for i in range(3):  # like health Watch: writes instead of yielding
        await context.write(request + str(i).encode())


async def _bidi(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
    async for r in requests:
        if r == b"stop":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "stopped")
        yield r.upper()


async def _sleepy(request: bytes, context: Any) -> bytes:
    await asyncio.sleep(30)
    return b""


def _handler() -> grpc.GenericRpcHandler:
    ident = {"request_deserializer": None, "response_serializer": None}
    return grpc.method_handlers_generic_handler(
        "t.Svc",
        {
            "Unary": grpc.unary_unary_rpc_method_handler(_unary, **ident),
            "Sleepy": grpc.unary_unary_rpc_method_handler(_sleepy, **ident),
            "ClientStream": grpc.stream_unary_rpc_method_handler(_client_stream, **ident),
            "ServerStream": grpc.unary_stream_rpc_method_handler(_server_stream_writer, **ident),
            "Bidi": grpc.stream_stream_rpc_method_handler(_bidi, **ident),
        },
    )


async def test_interceptor_handles_all_four_kinds(
    fresh: Metrics, caplog: pytest.LogCaptureFixture
) -> None:
    server = grpc.aio.server(interceptors=[RpcObserver(fresh)])
    server.add_generic_rpc_handlers((_handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    caplog.set_level(logging.INFO, logger="ctxwarden.access")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            unary: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = ch.unary_unary("/t.Svc/Unary")
            assert await unary(b"x") == b"re:x"
            for req, code in [
                (b"abort", grpc.StatusCode.NOT_FOUND),
                (b"boom", grpc.StatusCode.UNKNOWN),
                (b"setcode", grpc.StatusCode.ALREADY_EXISTS),
            ]:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await unary(req)
                assert err.value.code() is code
            sleepy: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = ch.unary_unary("/t.Svc/Sleepy")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await sleepy(b"", timeout=0.2)
            assert err.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            cs: grpc.aio.StreamUnaryMultiCallable[bytes, bytes] = ch.stream_unary(
                "/t.Svc/ClientStream"
            )
            assert await cs(iter([b"a", b"b"])) == b"a,b"
            ss: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = ch.unary_stream(
                "/t.Svc/ServerStream"
            )
            assert [r async for r in ss(b"s")] == [b"s0", b"s1", b"s2"]
            bidi: grpc.aio.StreamStreamMultiCallable[bytes, bytes] = ch.stream_stream("/t.Svc/Bidi")
            assert [r async for r in bidi(iter([b"a", b"b"]))] == [b"A", b"B"]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                _ = [r async for r in bidi(iter([b"a", b"stop", b"c"]))]
            assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION

        def rpcs(method: str, code: str) -> float:
            return value(fresh, "ctxwarden_rpcs_total", method=f"t.Svc/{method}", code=code)

        # The cancelled Sleepy handler is observed when it has finished on the server's
        # side, which a loaded machine may take a while to get to: wait for that (a fixed
        # 0.3 s failed under a full suite run), not for a guessed time.
        deadline = asyncio.get_running_loop().time() + 30
        while not rpcs("Sleepy", "DEADLINE_EXCEEDED"):
            assert asyncio.get_running_loop().time() < deadline, "Sleepy was never observed"
            await asyncio.sleep(0.01)
    finally:
        await server.stop(0)

    assert rpcs("Unary", "OK") == 1
    assert rpcs("Unary", "NOT_FOUND") == 1
    assert rpcs("Unary", "UNKNOWN") == 1
    assert rpcs("Unary", "ALREADY_EXISTS") == 1
    assert rpcs("Sleepy", "DEADLINE_EXCEEDED") == 1
    assert rpcs("ClientStream", "OK") == 1
    assert rpcs("ServerStream", "OK") == 1
    assert rpcs("Bidi", "OK") == 1
    assert rpcs("Bidi", "FAILED_PRECONDITION") == 1
    streamed = "ctxwarden_rpc_stream_messages_total"
    # (a behaviour that writes with context.write is not counted message by message)
    assert value(fresh, streamed, method="t.Svc/Bidi", direction="sent") == 3
    assert value(fresh, streamed, method="t.Svc/ClientStream", direction="received") == 2
    assert value(fresh, streamed, method="t.Svc/Bidi", direction="received") == 4
    assert value(fresh, "ctxwarden_rpcs_in_flight", method="t.Svc/Unary") == 0
    lines = [r for r in caplog.records if r.name == "ctxwarden.access"]
    assert len(lines) == 9
    boom = next(r for r in lines if getattr(r, FIELDS_ATTR)["code"] == "UNKNOWN")
    assert boom.levelno == logging.ERROR
    assert getattr(boom, FIELDS_ATTR)["error"] == "RuntimeError"


# -- logging ----------------------------------------------------------------------------


def _record(msg: str = "hello", **fields: Any) -> logging.LogRecord:
    record = logging.LogRecord("ctxwarden.x", logging.WARNING, __file__, 1, msg, (), None)
    if fields:
        setattr(record, FIELDS_ATTR, fields)
    return record


def test_json_formatter_adds_rpc_context_and_tenant() -> None:
    fmt = JsonFormatter()
    plain = json.loads(fmt.format(_record()))
    assert set(plain) == {"ts", "level", "logger", "msg"}
    info = RpcInfo(method="svc/M", request_id="r1", session_id="s1")
    token = current_rpc.set(info)
    listener = tenant_listener.set(info.note_tenant)
    try:
        tenant_token = enter_tenant("acme")
        current_tenant.reset(tenant_token)  # an inner layer resets its variable ...
        out = json.loads(fmt.format(_record(code="OK")))
    finally:
        tenant_listener.reset(listener)
        current_rpc.reset(token)
    # ... the tenant recorded on the RPC survives it.
    assert out["tenant"] == "acme" and info.tenant == "acme"
    assert (out["method"], out["request_id"], out["session_id"], out["code"]) == (
        "svc/M",
        "r1",
        "s1",
        "OK",
    )


def test_json_formatter_keeps_tracebacks_on_one_line() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        import sys

        record = _record()
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert "ValueError" in json.loads(line)["exc"]


def test_text_formatter_quotes_values() -> None:
    line = TextFormatter().format(_record(tenant="", note="two words", n=3))
    assert line.endswith(' tenant="" note="two words" n=3')


def test_configure_logging_replaces_root_handlers() -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    try:
        configure_logging("warning", "json", stream=stream)
        logging.getLogger("ctxwarden.t").warning("x %s", 1)
        logging.getLogger("ctxwarden.t").info("hidden")
        assert [json.loads(s)["msg"] for s in stream.getvalue().splitlines()] == ["x 1"]
        with pytest.raises(ValueError, match="log level"):
            configure_logging("LOUD", "json", stream=stream)
        with pytest.raises(ValueError, match="log format"):
            configure_logging("INFO", "xml", stream=stream)
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])


# -- engine events ----------------------------------------------------------------------


def test_operation_labels() -> None:
    assert operation("  select 1") == "SELECT"
    assert operation("(SELECT 1) UNION (SELECT 2)") == "SELECT"
    assert operation("INSERT INTO t VALUES (?)") == "INSERT"
    assert operation("VACUUM") == "OTHER"
    assert operation("") == "OTHER"


@pytest.fixture
def memory_tracing() -> Iterator[tuple[Any, Any]]:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ctxwarden.observability.tracing import setup_tracing

    exporter = InMemorySpanExporter()
    tracing = setup_tracing("", exporter=exporter, batch=False)
    assert tracing is not None
    yield tracing, exporter
    tracing.shutdown()


async def test_engine_events_time_statements_and_trace_them(
    backend_url: str, fresh: Metrics, memory_tracing: tuple[Any, Any]
) -> None:
    tracing, exporter = memory_tracing
    engine = make_engine(backend_url, pool_size=2)
    instrument_engine(engine, fresh, tracing)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 2"))  # outside any span: timed, not traced
        rpc = tracing.start_rpc("t.Svc/Method", {})
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
            assert value(fresh, "ctxwarden_db_pool_connections_in_use") == 1
            with pytest.raises(Exception, match="no_such_table"):
                await conn.execute(text("SELECT * FROM no_such_table"))
        rpc.finish_rpc("OK", 0)
        assert value(fresh, "ctxwarden_db_pool_connections_in_use") == 0
        assert value(fresh, "ctxwarden_db_pool_checkouts_total") >= 1
        assert value(fresh, "ctxwarden_db_pool_size") > 0
        assert value(fresh, "ctxwarden_db_query_duration_seconds_count", operation="SELECT") >= 3
        assert value(fresh, "ctxwarden_db_errors_total", operation="SELECT") == 1
    finally:
        await engine.dispose()
    spans = exporter.get_finished_spans()
    assert all(s.attributes.get("db.query.text") != "SELECT 2" for s in spans)
    server = next(s for s in spans if s.name == "t.Svc/Method")
    db = [s for s in spans if s.parent is not None and s.parent.span_id == server.context.span_id]
    texts = [s.attributes["db.query.text"] for s in db]
    assert "SELECT 1" in texts and "SELECT * FROM no_such_table" in texts
    failed = next(s for s in db if s.attributes["db.query.text"] == "SELECT * FROM no_such_table")
    assert not failed.status.is_ok


# -- health ---------------------------------------------------------------------------


class FakeHealth:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    async def set(self, service: str, status: int) -> None:
        self.calls.append((service, status))


async def test_health_monitor_flips_on_changes_only(fresh: Metrics) -> None:
    from grpc_health.v1 import health_pb2

    results: list[BaseException | None] = [None, OSError("refused"), OSError("again"), None]

    async def probe() -> None:
        outcome = results.pop(0)
        if outcome is not None:
            raise outcome

    fake = FakeHealth()
    monitor = HealthMonitor(fake, ("", "svc"), probe, interval=0.01, metrics=fresh)
    assert await monitor.check_once()
    assert fake.calls == []  # already SERVING
    assert not await monitor.check_once()
    assert value(fresh, "ctxwarden_database_up") == 0
    assert not await monitor.check_once()
    assert await monitor.check_once()
    assert value(fresh, "ctxwarden_database_up") == 1
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    serving = health_pb2.HealthCheckResponse.SERVING
    assert fake.calls == [("", not_serving), ("svc", not_serving), ("", serving), ("svc", serving)]


async def test_health_monitor_times_out_a_hanging_probe() -> None:
    async def hang() -> None:
        await asyncio.sleep(60)

    fake = FakeHealth()
    monitor = HealthMonitor(fake, ("",), hang, interval=0.01, timeout=0.05)
    assert not await monitor.check_once()
    monitor.start()
    await asyncio.sleep(0.1)
    await monitor.stop()
    assert len(fake.calls) == 1


async def test_sqlite_probe_notices_a_moved_or_replaced_file(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    db.write_bytes(b"")
    pings: list[int] = []

    async def ping() -> None:
        pings.append(1)

    probe = DatabaseProbe(ping, f"sqlite:///{db}")
    await probe()
    os.rename(db, tmp_path / "y.db")
    with pytest.raises(DatabaseUnreachable, match="No such file"):
        await probe()
    db.write_bytes(b"")  # a different file at the same path
    with pytest.raises(DatabaseUnreachable, match="replaced"):
        await probe()
    os.replace(tmp_path / "y.db", db)
    await probe()
    assert len(pings) == 2  # never pinged a file that is not ours
    assert DatabaseProbe(ping, "sqlite:///:memory:").path is None
    assert DatabaseProbe(ping, "mysql+aiomysql://u@h/db").path is None


async def test_access_log_names_the_authenticated_tenant(
    fresh: Metrics, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Authentication sets the tenant in the api layer; the access line, written
    after it was reset, still names it (unary and streaming calls)."""
    url = f"sqlite:///{tmp_path}/tenant.db"
    await asyncio.to_thread(migrate_database, url)
    settings = Settings(database_url=url)
    auth = Authenticator(api_keys={hashlib.sha256(b"key-of-acme").hexdigest(): "acme"})
    md = (("authorization", "Bearer key-of-acme"),)
    async with replica(url) as manager:
        server = grpc.aio.server(interceptors=_interceptors(settings, auth, fresh, None))
        server.add_generic_rpc_handlers((ContextServicer(manager, settings.limits).handler(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        caplog.set_level(logging.INFO, logger="ctxwarden.access")
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = pb_grpc.ContextServiceStub(ch)
                await stub.CreateSession(
                    svc_pb.CreateSessionRequest(session_id="s1"), metadata=md, timeout=30
                )
                append = svc_pb.AppendMessagesRequest(session_id="s1", messages=[user("hi")])
                _ = [r async for r in stub.StreamMessages(iter([append]), metadata=md, timeout=30)]
        finally:
            await server.stop(0)
    lines = {
        getattr(r, FIELDS_ATTR)["method"]: getattr(r, FIELDS_ATTR)
        for r in caplog.records
        if r.name == "ctxwarden.access"
    }
    for method in ("CreateSession", "StreamMessages"):
        fields = lines[f"ctxwarden.v1.ContextService/{method}"]
        assert (fields["code"], fields["tenant"]) == ("OK", "acme"), fields
    assert current_tenant.get() == "" and tenant_listener.get() is None
