"""Shared pieces of the reliability tests: servers, waiting, health, logs, reports."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.agents import ErrorEvent, LoadReport
from tests.support.server import ServerProcess

LOAD_ENV = "CTXWARDEN_LOAD_SECONDS"
SERVICE = "ctxwarden.v1.ContextService"
SERVING = health_pb2.HealthCheckResponse.SERVING


def is_mysql(backend_url: str) -> bool:
    return backend_url.startswith("mysql")


def load_seconds(backend_url: str) -> float:
    """The steady-load duration: CTXWARDEN_LOAD_SECONDS, else 60 s on MySQL, 15 s on SQLite."""
    value = os.environ.get(LOAD_ENV, "").strip()
    if value:
        return float(value)
    return 60.0 if is_mysql(backend_url) else 15.0


@contextmanager
def serving(backend_url: str, log_dir: Path, *args: str) -> Iterator[ServerProcess]:
    server = ServerProcess(backend_url, log_dir=log_dir, extra_args=list(args))
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def wait_until(predicate: Callable[[], bool], within: float, what: str) -> None:
    """Poll ``predicate`` every 50 ms; fail when it is still false after ``within`` s."""
    if not await eventually(predicate, within):
        raise AssertionError(f"timed out after {within:g} s waiting for {what}")


async def eventually(predicate: Callable[[], bool], within: float) -> bool:
    """Poll ``predicate`` every 50 ms for up to ``within`` seconds; its last answer."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def error_log_lines(log: str) -> list[str]:
    """Lines the server logged at ERROR or above, and tracebacks."""
    out = []
    for line in log.splitlines():
        if '"level":"ERROR"' in line or '"level":"CRITICAL"' in line or "Traceback" in line:
            out.append(line[:400])
    return out


def codes(events: Sequence[ErrorEvent]) -> dict[str, int]:
    return dict(Counter(f"{e.code}/{e.reason or '-'}" for e in events))


def show(events: Sequence[ErrorEvent], limit: int = 8) -> str:
    shown = "; ".join(f"t={e.t:.2f} {e.op} {e.code} {e.reason} {e.details}" for e in events[:limit])
    return f"{len(events)} errors {codes(events)}: {shown}"


def write_report(path: Path, report: LoadReport, **extra: Any) -> dict[str, Any]:
    data = {**report.summary(), **extra}
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    return data


class HealthWatcher:
    """Polls grpc.health.v1 Check (overall and the ContextService) every 100 ms."""

    def __init__(self, target: str, clock: Callable[[], float]) -> None:
        self.target = target
        self.clock = clock
        self.samples: list[tuple[float, str]] = []
        """(time, "SERVING" | "NOT_SERVING" | "ERROR:<code>"), the worse of the two services."""
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async with grpc.aio.insecure_channel(self.target) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while True:
                try:
                    statuses = [
                        (
                            await stub.Check(health_pb2.HealthCheckRequest(service=s), timeout=2)
                        ).status
                        for s in ("", SERVICE)
                    ]
                    state = "SERVING" if statuses == [SERVING, SERVING] else "NOT_SERVING"
                except grpc.aio.AioRpcError as err:
                    state = f"ERROR:{err.code().name}"
                self.samples.append((self.clock(), state))
                await asyncio.sleep(0.1)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def first(self, state: str, since: float = 0.0) -> float | None:
        return next((t for t, s in self.samples if t >= since and s == state), None)

    def last_state(self) -> str:
        return self.samples[-1][1] if self.samples else ""
