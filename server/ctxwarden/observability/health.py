"""Database-driven health: NOT_SERVING while the database is unreachable.

A background task probes the database every ``interval`` seconds and sets
``grpc.health.v1`` for every listed service (``""`` and the ContextService):
SERVING when the probe passes, NOT_SERVING when it fails or times out. Only
changes are written (and logged). Once shutdown begins, the health servicer
ignores further sets, so a late probe can never report SERVING again.

The probe is ``Store.ping`` (``SELECT 1`` through the server's own pool; on a
Galera cluster member also "is this node Synced", store/cluster.py).
For SQLite that alone proves little: open connections keep working on a file
that was deleted, moved or whose directory became unreachable, while new
connections would silently create an empty database at the path. So for a
SQLite file the probe first checks that the path still names the very file
the server opened (same device and inode); only then does it ping.

A loop held by CPU work is not a database outage. The probe's ``timeout``
counts only the time the event loop was free to run it: the probe is awaited
in short steps, and whatever a step overran (the loop was busy elsewhere) is
lag, not waiting for the database. A database that really does not answer
still runs out of steps; a stall only delays the verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url

from ctxwarden.store.urls import async_url

if TYPE_CHECKING:
    from ctxwarden.observability.metrics import Metrics

log = logging.getLogger(__name__)

Probe = Callable[[], Awaitable[None]]
Clock = Callable[[], float]

STEP_SECONDS = 0.1
"""The probe is awaited in steps this long; a step's overrun is loop lag."""
LAG_NOTICE_SECONDS = 1.0
"""Loop lag during one probe worth a warning (the database answered, late)."""


class DatabaseUnreachable(Exception):
    pass


def sqlite_path(database_url: str) -> str | None:
    """The file behind a SQLite URL, or None (not SQLite, in-memory, or a URI)."""
    url = async_url(database_url)
    if not url.drivername.startswith("sqlite"):
        return None
    database = make_url(database_url).database or ""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return os.path.abspath(database)


class DatabaseProbe:
    """Ping through the pool; for a SQLite file, first check it is still the same file."""

    def __init__(self, ping: Probe, database_url: str) -> None:
        self._ping = ping
        self.path = sqlite_path(database_url)
        self._identity: tuple[int, int] | None = None
        if self.path is not None:
            # The schema check made the file; if it is somehow missing now, the
            # first probe that finds it records it.
            with contextlib.suppress(OSError):
                st = os.stat(self.path)
                self._identity = (st.st_dev, st.st_ino)

    async def __call__(self) -> None:
        if self.path is not None:
            try:
                st = os.stat(self.path)
            except OSError as exc:
                raise DatabaseUnreachable(f"database file {self.path}: {exc.strerror}") from exc
            if self._identity is None:
                self._identity = (st.st_dev, st.st_ino)
            elif (st.st_dev, st.st_ino) != self._identity:
                raise DatabaseUnreachable(f"database file {self.path} was replaced by another file")
        await self._ping()


class HealthMonitor:
    """Runs ``probe`` every ``interval`` s; flips the services' health on changes."""

    def __init__(
        self,
        health: Any,
        services: Sequence[str],
        probe: Probe,
        *,
        interval: float,
        timeout: float | None = None,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.health = health
        self.services = tuple(services)
        self.probe = probe
        self.interval = max(0.05, interval)
        self.timeout = timeout if timeout is not None else max(1.0, min(self.interval, 10.0))
        self.metrics = metrics
        self.clock = clock
        self.last_lag = 0.0
        """Loop lag (s) seen while the last probe was awaited."""
        self.serving = True
        self._task: asyncio.Task[None] | None = None

    async def check_once(self) -> bool:
        """Probe once and publish the result; True when the database answered."""
        try:
            await self._answer()
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            await self._publish(False, f"no answer within {self.timeout:g} s")
            return False
        except Exception as exc:
            await self._publish(False, str(exc).splitlines()[0] if str(exc) else repr(exc))
            return False
        await self._publish(True, "")
        return True

    async def _answer(self) -> None:
        """Await the probe; TimeoutError after ``timeout`` s of loop time free to run it.

        Each step of the wait counts what it asked for, not what it took: when
        the loop is held (a big encoding, a saturated host), the overrun is lag,
        and the probe's answer, queued behind that work, is still awaited.
        """
        clock = self.clock or asyncio.get_running_loop().time
        task = asyncio.ensure_future(self.probe())
        left, lag = self.timeout, 0.0
        try:
            while True:
                step = min(STEP_SECONDS, left)
                started = clock()
                done, _ = await asyncio.wait((task,), timeout=step)
                lag += max(0.0, clock() - started - step)
                if done:
                    break
                left -= step
                if left <= 1e-9:
                    raise TimeoutError
        finally:
            self.last_lag = lag
            if not task.done():
                task.cancel()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await task
        if lag >= LAG_NOTICE_SECONDS:
            log.warning(
                "database answered the health probe, but the event loop was held for "
                "%.1f s meanwhile (not a database problem; see "
                "ctxwarden_event_loop_lag_seconds)",
                lag,
            )
        task.result()

    async def _publish(self, ok: bool, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.database_up.set(1 if ok else 0)
        if ok == self.serving:
            return
        self.serving = ok
        from grpc_health.v1 import health_pb2

        status = (
            health_pb2.HealthCheckResponse.SERVING
            if ok
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in self.services:
            await self.health.set(name, status)
        if ok:
            log.warning("database reachable again: health is SERVING")
        else:
            log.error("database unreachable (%s): health is NOT_SERVING", reason)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the monitor die
                log.exception("health probe failed unexpectedly")

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="ctxwarden-health")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
