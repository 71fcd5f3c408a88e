"""MariaDB, and PostgreSQL, stopped and started again under load.

While the database is down, calls that need it fail with UNAVAILABLE
(reason DATABASE_UNAVAILABLE), never INTERNAL or UNKNOWN; grpc.health.v1
reports NOT_SERVING, then SERVING again once the database is back; the same
server process recovers by itself; and nothing acknowledged is lost or
duplicated (appends whose commit was in flight when the connection died are
retried with the same keys).

The database stopped is a private server the suite runs itself
(tests/support/mariadb.py, tests/support/postgres.py), never the one behind
``CTXWARDEN_TEST_MYSQL_URL`` or ``CTXWARDEN_TEST_POSTGRES_URL``; it is always
started again (and waited for) in a ``finally``. Leave the test out with
``-m "not db_outage"``.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from tests.reliability.harness import (
    HealthWatcher,
    eventually,
    serving,
    show,
    wait_until,
    write_report,
)
from tests.support.agents import LoadOptions, LoadReport, run_agents, verify_database
from tests.support.mariadb import PrivateMariaDB
from tests.support.postgres import PrivatePostgres
from tests.support.server import ServerProcess, migrate_database

AGENTS = 100
POSTGRES_AGENTS = 40
"""Fewer on PostgreSQL: the same paths, at a lower cost to the CI run."""
DOWN_SECONDS = 3.0
"""How long MariaDB stays down once health has reported NOT_SERVING."""
RESUMED_OPS = 3


class PrivateServer(Protocol):
    def stop(self) -> None: ...
    def start(self) -> None: ...
    def create_database(self) -> str: ...


@dataclass
class Timeline:
    stopping: float
    down: float
    starting: float
    back: float
    resumed: float


async def _outage(
    server: ServerProcess, database: PrivateServer, options: LoadOptions
) -> tuple[LoadReport, HealthWatcher, Timeline]:
    report = LoadReport(options)
    stop = asyncio.Event()
    health = HealthWatcher(server.target, report.now)
    load = asyncio.create_task(run_agents(server.target, options, report, stop))
    try:
        await wait_until(
            lambda: len(report.agents) == options.agents and not report.idle_agents(0.0, 4),
            60,
            "every agent to get going",
        )
        health.start()
        await asyncio.sleep(1.0)
        stopping = down = report.now()
        try:
            await asyncio.to_thread(database.stop)
            down = report.now()
            await eventually(lambda: health.first("NOT_SERVING", stopping) is not None, 20)
            await asyncio.sleep(DOWN_SECONDS)
        finally:
            starting = report.now()
            await asyncio.to_thread(database.start)
        back = report.now()
        await eventually(lambda: not report.idle_agents(back, RESUMED_OPS), 60)
        resumed = report.now()
        await eventually(lambda: health.last_state() == "SERVING", 30)
    except BaseException:
        load.cancel()
        raise
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await load
        await health.stop()
    return report, health, Timeline(stopping, down, starting, back, resumed)


@pytest.mark.db_outage
@pytest.mark.parametrize("backend", [pytest.param("mysql", marks=pytest.mark.mysql)])
def test_mariadb_restart_under_load(
    backend: str, private_mariadb: PrivateMariaDB, tmp_path: Path
) -> None:
    _restart_under_load(private_mariadb, "mariadb", tmp_path, AGENTS)


@pytest.mark.db_outage
@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)])
def test_postgres_restart_under_load(
    backend: str, private_postgres: PrivatePostgres, tmp_path: Path
) -> None:
    """A fast shutdown of PostgreSQL terminates every connection mid-transaction."""
    _restart_under_load(private_postgres, "postgres", tmp_path, POSTGRES_AGENTS)


def _restart_under_load(database: PrivateServer, label: str, tmp_path: Path, agents: int) -> None:
    options = LoadOptions(agents=agents, duration=300, retry_budget=60)
    backend_url = database.create_database()
    migrate_database(backend_url)
    try:
        with serving(
            backend_url, tmp_path, "--summarizer", "extractive", "--health-interval", "0.2"
        ) as server:
            assert server.proc is not None
            pid = server.proc.pid
            report, health, tl = asyncio.run(_outage(server, database, options))
            assert server.proc is not None and server.proc.pid == pid
            alive = server.proc.poll() is None
            log = server.log_text()
    finally:
        database.start()  # never leave the session's private database down
    check = verify_database(backend_url, report.agents)
    write_report(
        tmp_path / f"{label}-outage.json", report, timeline=tl.__dict__, health=health.samples
    )
    not_serving = health.first("NOT_SERVING", tl.stopping)
    serving_again = health.first("SERVING", tl.back)
    print(f"\n[{label} outage] {report.describe()}")
    print(
        f"[{label} outage] stop {tl.stopping:.2f}-{tl.down:.2f} s, NOT_SERVING at {not_serving} s, "
        f"start {tl.starting:.2f}-{tl.back:.2f} s, SERVING at {serving_again} s, "
        f"every agent resumed at {tl.resumed:.2f} s"
    )

    assert alive, "the server died when the database went away"
    assert "Traceback" not in log and "unhandled error" not in log
    assert not report.gave_up(), report.gave_up()[:5]
    idle = report.idle_agents(tl.back, RESUMED_OPS)
    assert not idle, f"{len(idle)} agents did not resume: " + show(
        [e for e in report.errors if e.agent in idle][-8:]
    )
    # Health followed the database, both ways.
    assert not_serving is not None and not_serving < tl.back, health.samples[-20:]
    assert serving_again is not None and health.last_state() == "SERVING"
    assert not [s for t, s in health.samples if s.startswith("ERROR")]
    # Calls failed cleanly, only while the database was away.
    assert not report.errors_between(0, tl.stopping), show(report.errors)
    wrong = [
        e for e in report.errors if (e.code, e.reason) != ("UNAVAILABLE", "DATABASE_UNAVAILABLE")
    ]
    assert not wrong, show(wrong)
    assert report.errors_between(tl.stopping, tl.back), "no call noticed the database was gone"
    late = [e for e in report.errors if e.t > tl.resumed]
    assert not late, show(late)
    # Nothing acknowledged was lost, nothing was stored twice.
    assert not report.violations, report.violations[:10]
    assert not check.problems, check.problems[:10]
    assert check.sessions == agents
