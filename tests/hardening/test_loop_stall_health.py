"""A loop held by CPU work is not a database outage (the health probe).

Under load (a 2-core host, a big encoding) the event loop can be held for
seconds; the database's answer to the health probe then waits behind that
work. Health must stay SERVING and nothing may be logged at ERROR. A database
that really does not answer must still turn health NOT_SERVING.

The stall is injected without sleeping: the loop's clock is skewed forward
(``StallLoop.stall``), so every timer, the probe's steps included, finds itself
seconds late, exactly as after a callback that held the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ctxwarden.observability.health import DatabaseProbe, HealthMonitor
from tests.support.inproc import replica

STALL = 5.0
"""Seconds the loop is held: more than the probe's timeout."""
TIMEOUT = 2.0


class StallLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock a callback can push forward (a held loop, simulated)."""

    def __init__(self) -> None:
        super().__init__()
        self.skew = 0.0

    def time(self) -> float:
        return super().time() + self.skew

    def stall(self, seconds: float) -> None:
        self.skew += seconds


class FakeHealth:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    async def set(self, service: str, status: int) -> None:
        self.calls.append((service, status))


def run(main: Callable[[StallLoop], Awaitable[Any]]) -> Any:
    loop = StallLoop()
    try:
        return loop.run_until_complete(main(loop))
    finally:
        loop.close()


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_stall_while_the_database_answers_keeps_health_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The answer arrives just after the stall; the probe needs one more round
    trip (the connection going back to the pool) to finish."""

    async def main(loop: StallLoop) -> tuple[bool, HealthMonitor]:
        async def probe() -> None:
            answer: asyncio.Future[None] = loop.create_future()

            def held_then_answered() -> None:
                loop.stall(STALL)  # a callback held the loop for STALL s
                loop.call_soon(answer.set_result, None)

            loop.call_soon(held_then_answered)
            await answer
            released: asyncio.Future[None] = loop.create_future()
            loop.call_soon(released.set_result, None)
            await released

        monitor = HealthMonitor(FakeHealth(), ("",), probe, interval=10, timeout=TIMEOUT)
        return await monitor.check_once(), monitor

    with caplog.at_level(logging.WARNING, logger="ctxwarden.observability.health"):
        ok, monitor = run(main)
    assert ok and monitor.serving
    assert monitor.health.calls == []
    assert errors(caplog) == []
    assert monitor.last_lag >= STALL - 0.2
    assert any("event loop was held" in r.getMessage() for r in caplog.records)


def test_a_stall_during_a_real_ping_keeps_health_serving(
    backend_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The real probe (Store.ping through the pool) with the loop held while it runs."""

    async def main(loop: StallLoop) -> tuple[bool, bool, HealthMonitor]:
        async with replica(backend_url) as m:
            health = FakeHealth()
            monitor = HealthMonitor(
                health, ("",), DatabaseProbe(m.store.ping, backend_url), interval=10,
                timeout=TIMEOUT,
            )  # fmt: skip
            warm = await monitor.check_once()
            loop.call_soon(loop.stall, STALL)  # runs once the ping is under way
            return warm, await monitor.check_once(), monitor

    with caplog.at_level(logging.WARNING):
        warm, ok, monitor = run(main)
    assert warm and ok and monitor.serving
    assert monitor.health.calls == []
    assert errors(caplog) == []
    assert monitor.last_lag >= STALL - 0.2


def test_a_database_that_never_answers_is_still_not_serving_through_stalls(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Stalls delay the verdict; they cannot hide a hung database."""

    async def main(loop: StallLoop) -> tuple[bool, HealthMonitor]:
        def stall_again() -> None:
            loop.stall(1.0)
            loop.call_later(0.05, stall_again)

        async def hang() -> None:
            await loop.create_future()

        loop.call_soon(stall_again)
        monitor = HealthMonitor(FakeHealth(), ("",), hang, interval=10, timeout=0.3)
        return await monitor.check_once(), monitor

    with caplog.at_level(logging.WARNING, logger="ctxwarden.observability.health"):
        ok, monitor = run(main)
    assert not ok and not monitor.serving
    assert [m for m in errors(caplog) if "no answer within 0.3 s" in m]
