"""Start, stop, kill and restart real ``ctxwarden serve`` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import psycopg
import pymysql
from sqlalchemy.engine import make_url

from ctxwarden.v1 import context_service_pb2_grpc

CLI = [sys.executable, "-m", "ctxwarden"]


def make_mysql_database(base_url: str, name: str) -> str:
    url = make_url(base_url)
    conn = pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
    )
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    finally:
        conn.close()
    return url.set(database=name).render_as_string(hide_password=False)


def drop_mysql_database(base_url: str, name: str) -> None:
    url = make_url(base_url)
    conn = pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
    )
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()


def _postgres_admin(base_url: str) -> psycopg.Connection[tuple[object, ...]]:
    url = make_url(base_url)
    return psycopg.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 5432,
        user=url.username or "postgres",
        password=url.password or None,
        dbname=url.database or "postgres",
        autocommit=True,
    )


def make_postgres_database(base_url: str, name: str) -> str:
    """A new, empty PostgreSQL database ``name`` beside the one of ``base_url``."""
    with _postgres_admin(base_url) as conn:
        conn.execute(f"CREATE DATABASE \"{name}\" ENCODING 'UTF8' TEMPLATE template0")
    return make_url(base_url).set(database=name).render_as_string(hide_password=False)


def drop_postgres_database(base_url: str, name: str) -> None:
    """Drop ``name``, ending the sessions still connected to it (PostgreSQL 13+)."""
    with _postgres_admin(base_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate_database(url: str) -> None:
    """Run ``ctxwarden migrate`` as a user would."""
    subprocess.run(
        [*CLI, "migrate", "--database-url", url], check=True, capture_output=True, text=True
    )


class ServerProcess:
    """One ``ctxwarden serve`` child process on a free loopback port."""

    def __init__(
        self,
        database_url: str,
        log_dir: Path,
        extra_args: list[str] | None = None,
        *,
        tls_ca: bytes | None = None,
        tls_client: tuple[bytes, bytes] | None = None,
    ):
        self.tls_ca = tls_ca
        self.tls_client = tls_client
        self.database_url = database_url
        self.log_dir = log_dir
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen[str] | None = None
        self.target = ""
        self.port = 0
        self._n = 0

    def start(self, port: int | None = None) -> None:
        """Start the server; by default on the port it had before (or a free one)."""
        listen_port = self.port if port is None else port
        self._n += 1
        stderr = open(self.log_dir / f"server-{self._n}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                *CLI,
                "serve",
                "--listen",
                f"127.0.0.1:{listen_port}",
                "--database-url",
                self.database_url,
                "--log-level",
                "WARNING",
                *self.extra_args,
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("ctxwarden listening on "):
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_text()}")
        else:
            raise RuntimeError(f"server did not start: {self.log_text()}")
        self.target = line.split()[-1]
        self.port = int(self.target.rsplit(":", 1)[1])
        if self.tls_ca is None:
            with grpc.insecure_channel(self.target) as ch:
                grpc.channel_ready_future(ch).result(timeout=10)
            return
        key, cert = self.tls_client or (None, None)
        creds = grpc.ssl_channel_credentials(self.tls_ca, key, cert)
        opts = (("grpc.ssl_target_name_override", "localhost"),)
        with grpc.secure_channel(self.target, creds, options=opts) as ch:
            grpc.channel_ready_future(ch).result(timeout=10)

    def log_text(self) -> str:
        return (self.log_dir / f"server-{self._n}.log").read_text()

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        return code

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def stub(self, channel: grpc.Channel) -> context_service_pb2_grpc.ContextServiceStub:
        return context_service_pb2_grpc.ContextServiceStub(channel)
