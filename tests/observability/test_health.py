"""grpc.health.v1 follows the database, and SIGTERM reports NOT_SERVING before exit.

The database outage test stops the shared MariaDB (other tests' too), so it
always restarts it and waits until it answers, and it runs last in this file.
Select it alone with ``-m db_outage`` (or leave it out with ``-m "not db_outage"``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pymysql
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy.engine import make_url

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.observability.conftest import SERVICE, observed_server, sample, scrape, wait_health
from tests.support.server import ServerProcess, migrate_database

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
MARIADBD = "/usr/sbin/mariadbd"


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


# -- database outage (keep last in this file) -------------------------------------------


def _mysql_args(url: str) -> list[str]:
    u = make_url(url)
    args = [f"--host={u.host or '127.0.0.1'}", f"--port={u.port or 3306}"]
    args.append(f"--user={u.username or 'root'}")
    if u.password:
        args.append(f"--password={u.password}")
    return args


def _mariadb_answers(url: str) -> bool:
    u = make_url(url)
    try:
        conn = pymysql.connect(
            host=u.host or "127.0.0.1",
            port=u.port or 3306,
            user=u.username or "root",
            password=u.password or "",
            connect_timeout=2,
        )
    except pymysql.MySQLError:
        return False
    conn.close()
    return True


def _mariadb_running() -> bool:
    status = subprocess.run(
        ["start-stop-daemon", "--status", "--exec", MARIADBD], capture_output=True
    )
    return status.returncode == 0


def _start_mariadb(url: str, timeout: float = 90.0) -> None:
    """Start MariaDB (unless it is running) and wait until it answers."""
    deadline = time.monotonic() + timeout
    while _mariadb_running() and not _mariadb_answers(url) and time.monotonic() < deadline:
        time.sleep(0.2)  # still shutting down (or starting): let it finish first
    if not _mariadb_answers(url):
        subprocess.run(
            ["start-stop-daemon", "--start", "--oknodo", "--background", "--exec", MARIADBD],
            check=True,
            capture_output=True,
        )
    while not _mariadb_answers(url):
        if time.monotonic() > deadline:
            raise RuntimeError("MariaDB did not come back")
        time.sleep(0.2)


def _stop_mariadb(url: str) -> None:
    subprocess.run(["mysqladmin", *_mysql_args(url), "shutdown"], check=True, capture_output=True)
    deadline = time.monotonic() + 60
    while _mariadb_running() and time.monotonic() < deadline:
        time.sleep(0.1)


@contextmanager
def _mariadb_down(url: str) -> Iterator[None]:
    """MariaDB is stopped inside the block and always running again after it."""
    try:
        _stop_mariadb(url)
        yield
    finally:
        _start_mariadb(url)


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
def test_health_follows_the_database(backend_url: str, tmp_path: Path) -> None:
    """NOT_SERVING while the database is unreachable, SERVING again once it is back."""
    sqlite = backend_url.startswith("sqlite")
    if sqlite:
        # A database of its own: moving the shared file would pull it from under
        # the other tests' server.
        db = tmp_path / "outage.db"
        url = f"sqlite:///{db}"
        migrate_database(url)
    else:
        url = backend_url
    with observed_server(url, tmp_path, "--health-interval", "0.2") as server:
        wait_health(server.target, SERVING, timeout=10)
        _still_works(server.target)
        outage = _sqlite_file_away(db) if sqlite else _mariadb_down(url)
        with outage:
            wait_health(server.target, NOT_SERVING, timeout=20)
            assert sample(scrape(server.metrics), "ctxwarden_database_up") == 0
        wait_health(server.target, SERVING, timeout=60)
        assert sample(scrape(server.metrics), "ctxwarden_database_up") == 1
        _still_works(server.target)
        log = server.log_path().read_text()
    assert "database unreachable" in log
    assert "database reachable again" in log
