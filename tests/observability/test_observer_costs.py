"""What the RPC observer costs a call: each method wrapped once, no async generator
per unary call, each metric child looked up once."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter

from ctxwarden.api.reads import BoundedReads, ReadGate
from ctxwarden.observability import label_cache
from ctxwarden.observability.interceptor import RpcObserver
from ctxwarden.observability.label_cache import LabelCache
from ctxwarden.observability.metrics import Metrics


async def _unary(request: bytes, context: Any) -> bytes:
    return b"ok:" + request


async def _client_stream(requests: AsyncIterator[bytes], context: Any) -> bytes:
    return b",".join([r async for r in requests])


def _handler() -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        "t.Svc",
        {
            "Unary": grpc.unary_unary_rpc_method_handler(_unary),
            "ClientStream": grpc.stream_unary_rpc_method_handler(_client_stream),
        },
    )


async def test_unary_calls_through_the_read_bound_start_no_async_generator() -> None:
    """A unary method is served as client-streaming (api/reads.py) and reads one
    message. An async generator left unfinished costs the loop a wake-up and a
    task to close it, so none may be started per call: the observer's request
    stream reads through the context, not through grpc's own generator."""
    gate = ReadGate(4, 5.0, "--request-read-timeout")
    metrics = Metrics(process=False)
    server = grpc.aio.server(interceptors=[RpcObserver(metrics), BoundedReads(gate, gate)])
    server.add_generic_rpc_handlers((_handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            unary: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = ch.unary_unary("/t.Svc/Unary")
            assert await unary(b"warm") == b"ok:warm"
            hooks = sys.get_asyncgen_hooks()
            started: list[str] = []

            def firstiter(agen: Any) -> None:
                started.append(agen.__qualname__)
                if hooks.firstiter is not None:
                    hooks.firstiter(agen)

            sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=hooks.finalizer)
            try:
                for i in range(5):
                    assert await unary(b"%d" % i) == b"ok:%d" % i
            finally:
                sys.set_asyncgen_hooks(*hooks)
            # A real client stream still reads every message through the observer.
            stream: grpc.aio.StreamUnaryMultiCallable[bytes, bytes] = ch.stream_unary(
                "/t.Svc/ClientStream"
            )
            assert await stream(iter([b"a", b"b", b"c"])) == b"a,b,c"
    finally:
        await server.stop(0)
    assert started == []
    ok = metrics.registry.get_sample_value(
        "ctxwarden_rpcs_total", {"method": "t.Svc/Unary", "code": "OK"}
    )
    assert ok == 6
    received = metrics.registry.get_sample_value(
        "ctxwarden_rpc_stream_messages_total",
        {"method": "t.Svc/ClientStream", "direction": "received"},
    )
    assert received == 3


@dataclass
class _Details:
    method: str
    invocation_metadata: tuple[tuple[str, str | bytes], ...] = ()


async def test_the_observer_wraps_each_method_once() -> None:
    """gRPC asks every interceptor for the handler on every call; the observer
    answers with the wrapper it built the first time."""
    generic = _handler()
    observer = RpcObserver(None)

    async def continuation(details: Any) -> Any:
        return generic.service(details)

    first = await observer.intercept_service(continuation, _Details("/t.Svc/Unary"))
    again = await observer.intercept_service(continuation, _Details("/t.Svc/Unary"))
    other = await observer.intercept_service(continuation, _Details("/t.Svc/ClientStream"))
    assert first is not None and first is again
    assert other is not None and other is not first
    assert await observer.intercept_service(continuation, _Details("/t.Svc/Missing")) is None


def test_label_cache_looks_each_child_up_once(monkeypatch: Any) -> None:
    registry = CollectorRegistry()
    counter = Counter("calls", "calls", ["method", "code"], registry=registry)
    single = Counter("kinds", "kinds", ["kind"], registry=registry)
    by = LabelCache(counter)
    assert by(("m", "OK")) is counter.labels("m", "OK")
    assert by(("m", "OK")) is by(("m", "OK"))
    by(("m", "OK")).inc()
    by(("m", "NOT_FOUND")).inc(2)
    assert registry.get_sample_value("calls_total", {"method": "m", "code": "OK"}) == 1
    assert registry.get_sample_value("calls_total", {"method": "m", "code": "NOT_FOUND"}) == 2
    LabelCache(single)("input").inc(3)
    assert registry.get_sample_value("kinds_total", {"kind": "input"}) == 3
    # Past its bound a cache stops adding, and still answers with the right child.
    monkeypatch.setattr(label_cache, "MAX_CHILDREN", 1)
    bounded = LabelCache(counter)
    assert bounded(("a", "OK")) is counter.labels("a", "OK")
    assert bounded(("b", "OK")) is counter.labels("b", "OK")
    assert len(bounded._children) == 1
