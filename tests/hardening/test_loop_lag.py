"""Event-loop lag is measured, and a call that holds the loop is named in the log.

The watchdog's look is driven directly with an injected time (``LoopLag.check``)
from inside a real gRPC call served through the real RPC observer, so the test
needs no timing luck; one test also lets the real thread catch a real hold.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from ctxwarden.observability.interceptor import RpcObserver
from ctxwarden.observability.loop_lag import LoopLag

METHOD = "ctxwarden.test.Held/Hold"


def held_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "event loop held" in r.getMessage()]


async def _call_through_observer(lag: LoopLag) -> None:
    """One real unary call over a socket; its handler is where the loop is 'held'."""

    async def hold(request: bytes, context: Any) -> bytes:
        lag.check(lag.beat + lag.interval + 5.0)  # the watchdog looks 5 s into a hold
        return request

    handler = grpc.method_handlers_generic_handler(
        "ctxwarden.test.Held", {"Hold": grpc.unary_unary_rpc_method_handler(hold)}
    )
    server = grpc.aio.server(interceptors=[RpcObserver(None)])
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/{METHOD}")
            assert await call(b"x", timeout=10) == b"x"
    finally:
        await server.stop(None)


async def test_a_hold_is_logged_naming_the_grpc_method(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    lag = LoopLag(registry, clock=time.monotonic)
    beat = lag.beat
    await _call_through_observer(lag)
    with caplog.at_level(logging.WARNING, logger="ctxwarden.observability.loop_lag"):
        lag.observe(5.0, beat)  # the sampler wakes 5 s late
        lag.observe(0.01, beat)  # an ordinary sample: no line
    lines = held_log(caplog)
    assert len(lines) == 1, lines
    assert f"by gRPC {METHOD}" in lines[0]
    assert "ctxwarden/observability/interceptor.py" in lines[0]
    count = registry.get_sample_value("ctxwarden_event_loop_lag_seconds_count")
    slow = registry.get_sample_value("ctxwarden_event_loop_lag_seconds_bucket", {"le": "2.5"})
    assert count == 2 and slow == 1


async def test_a_short_delay_names_nobody() -> None:
    lag = LoopLag(None, slow=0.2)
    lag.check(lag.beat + lag.interval + 0.1)
    assert lag.culprit is None


class Reporting(LoopLag):
    """Sets ``seen`` once a sample reports a slow hold."""

    def __init__(self) -> None:
        super().__init__(CollectorRegistry(), interval=0.02, slow=0.15)
        self.seen = asyncio.Event()

    def observe(self, lag: float, beat: float, cpu: float | None = None) -> None:
        super().observe(lag, beat, cpu)
        if lag >= self.slow:
            self.seen.set()


def _hold_the_loop() -> None:
    """CPU work that keeps the loop busy for 0.6 s (what a big encoding does)."""
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:
        sum(range(1000))


async def test_the_watchdog_thread_catches_a_real_hold(caplog: pytest.LogCaptureFixture) -> None:
    lag = Reporting()
    with caplog.at_level(logging.WARNING, logger="ctxwarden.observability.loop_lag"):
        lag.start()
        try:
            await asyncio.sleep(0)  # let the sampler take its first beat
            _hold_the_loop()
            await asyncio.wait_for(lag.seen.wait(), 10)
        finally:
            await lag.stop()
    lines = held_log(caplog)
    # " by ...": the watchdog thread looked at the stack while the loop was held.
    assert lines and " by no known call (outside ctxwarden code, " in lines[0], lines
    assert "s of CPU in that time" in lines[0]
