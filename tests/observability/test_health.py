"""grpc.health.v1 follows the database, and SIGTERM reports NOT_SERVING before exit.

The database outage test stops and starts a private MariaDB server the suite runs itself
(tests/support/mariadb.py), never the server behind ``CTXWARDEN_TEST_MYSQL_URL``.
Select it alone with ``-m db_outage`` (or leave it out with ``-m "not db_outage"``).
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.observability.conftest import SERVICE, observed_server, sample, scrape, wait_health
from tests.support.mariadb import PrivateMariaDB
from tests.support.server import ServerProcess, migrate_database

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def test_sigterm_reports_not_serving_before_exit(backend_url: str, tmp_path: Path) -> None:
    server = ServerProcess(backend_url, log_dir=tmp_path)
    server.start()
    proc = server.proc
    assert proc is not None
    try:
        with grpc.insecure_channel(server.target) as ch:
            watch = health_pb2_grpc.HealthStub(ch).Watch(
                health_pb2.HealthCheckRequest(service=SERVICE), timeout=30
            )
            assert next(watch).status == SERVING
            proc.send_signal(signal.SIGTERM)
            # The open Watch is an in-flight call: the server drains it, and it
            # has already been told NOT_SERVING while the process still runs.
            assert next(watch).status == NOT_SERVING
            assert proc.poll() is None
            watch.cancel()
        assert proc.wait(timeout=30) == 0
    finally:
        server.stop()


# -- database outage ----------------------------------------------------------------------


@contextmanager
def _sqlite_file_away(path: Path) -> Iterator[None]:
    """The database file is moved away (the server's open handles still work)."""
    away = path.with_name(path.name + ".away")
    os.rename(path, away)
    try:
        yield
    finally:
        os.replace(away, path)


def _still_works(target: str) -> None:
    sid = f"h-{uuid.uuid4().hex[:10]}"
    with grpc.insecure_channel(target) as ch:
        stub = pb_grpc.ContextServiceStub(ch)
        stub.CreateSession(pb.CreateSessionRequest(session_id=sid), timeout=30)
        assert stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=30).session_id == sid


@pytest.mark.db_outage
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def test_health_follows_the_database(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """NOT_SERVING while the database is unreachable, SERVING again once it is back."""
    outage: AbstractContextManager[None]
    if backend == "sqlite":
        # A database of its own: moving the shared file would pull it from under
        # the other tests' server.
        db = tmp_path / "outage.db"
        url = f"sqlite:///{db}"
        outage = _sqlite_file_away(db)
    else:
        # The suite's private MariaDB: stopping it disturbs nobody.
        mariadb: PrivateMariaDB = request.getfixturevalue("private_mariadb")
        url = mariadb.create_database()
        outage = mariadb.down()
    migrate_database(url)
    with observed_server(url, tmp_path, "--health-interval", "0.2") as server:
        wait_health(server.target, SERVING, timeout=10)
        _still_works(server.target)
        with outage:
            wait_health(server.target, NOT_SERVING, timeout=20)
            assert sample(scrape(server.metrics), "ctxwarden_database_up") == 0
        wait_health(server.target, SERVING, timeout=60)
        assert sample(scrape(server.metrics), "ctxwarden_database_up") == 1
        _still_works(server.target)
        log = server.log_path().read_text()
    assert "database unreachable" in log
    assert "database reachable again" in log
