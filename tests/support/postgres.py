"""A private PostgreSQL server the suite starts itself, for tests that take the database away.

Like tests/support/mariadb.py for MySQL: the server behind ``CTXWARDEN_TEST_POSTGRES_URL``
is shared and never stopped; the session fixture ``private_postgres`` initialises a data
directory of its own (``initdb`` of the Debian postgresql package) and runs a ``postgres``
child process on a free loopback port (trust authentication, user ``postgres``, no
configuration but its own). PostgreSQL refuses to run as root: when the suite runs as root,
the server runs as the ``postgres`` system user the package creates (through
``setpriv``: see ``PrivatePostgres.as_user``). Every helper acts on
that child process alone.

Usage::

    def test_x(private_postgres: PrivatePostgres) -> None:
        url = private_postgres.create_database()  # postgresql+asyncpg://postgres@...:PORT/<new>
        with private_postgres.down():  # stopped here, started again afterwards
            ...
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.mariadb import free_port

POSTGRES_ENV = "CTXWARDEN_TEST_POSTGRES_URL"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0


def find_bindir() -> str | None:
    """The directory of ``initdb`` and ``postgres`` (``CTXWARDEN_PG_BINDIR`` overrides)."""
    override = os.environ.get("CTXWARDEN_PG_BINDIR")
    if override:
        return override
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if found:
        return str(Path(found[-1]).parent)
    initdb = shutil.which("initdb")
    return str(Path(initdb).resolve().parent) if initdb else None


class PrivatePostgres:
    """One ``postgres`` child process with its own data directory under ``base_dir``."""

    def __init__(self, base_dir: Path, *, bindir: str | None = None) -> None:
        found = bindir or find_bindir()
        if found is None:
            raise RuntimeError(
                "initdb / postgres not found: the PostgreSQL outage tests run a private "
                "server; install the Debian package postgresql"
            )
        self.bindir = Path(found)
        self.base_dir = base_dir
        self.datadir = base_dir / "data"
        self.log = base_dir / "postgres.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._user = "postgres" if os.geteuid() == 0 else None

    @staticmethod
    def as_user(command: list[str], user: str | None) -> tuple[list[str], str | None]:
        """``command`` and the ``user=`` to pass to subprocess for running it as ``user``.

        ``Popen(user=...)`` makes subprocess fork the whole test process rather than
        vfork it, and gRPC's fork handlers then run in the child: beside a busy
        ``grpc.aio`` server about one child in three crashed before ``exec``. ``setpriv``
        (util-linux) changes the user after ``exec`` instead."""
        setpriv = shutil.which("setpriv")
        if user is None or setpriv is None:
            return command, user
        wrapped = [setpriv, f"--reuid={user}", f"--regid={user}", "--init-groups", *command]
        return wrapped, None

    @property
    def url(self) -> str:
        return self.database_url("postgres")

    def database_url(self, name: str) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{name}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _install(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self.base_dir, entry.pw_uid, entry.pw_gid)
        command, user = self.as_user(
            [
                str(self.bindir / "initdb"),
                "--pgdata",
                str(self.datadir),
                "--username",
                "postgres",
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--no-sync",
            ],
            self._user,
        )
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=START_TIMEOUT, user=user
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def answers(self, timeout: float = 1.0) -> bool:
        try:
            with psycopg.connect(
                host="127.0.0.1",
                port=self.port,
                user="postgres",
                dbname="postgres",
                connect_timeout=max(1, round(timeout)),
            ) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the server (a no-op when it runs) and wait until it answers."""
        if self.running():
            return
        if not (self.datadir / "PG_VERSION").exists():
            self._install()
        deadline = time.monotonic() + timeout
        for attempt in range(1, 6):
            self._spawn()
            while not self.answers():
                if not self.running():
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"private postgres did not answer:\n{self.log_tail()}")
                time.sleep(0.05)
            else:
                return
            # The last server's processes may still hold its shared memory or lock file
            # for a moment after it exited: try again shortly.
            code = self.proc.returncode if self.proc is not None else None
            self.proc = None
            if attempt == 5 or time.monotonic() > deadline:
                raise RuntimeError(f"private postgres exited ({code}):\n{self.log_tail()}")
            time.sleep(0.5 * attempt)

    def _spawn(self) -> None:
        command, user = self.as_user(
            [
                str(self.bindir / "postgres"),
                "-D",
                str(self.datadir),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self.base_dir}",
                "-c",
                "fsync=off",
            ],
            self._user,
        )
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                user=user,
            )

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Fast shutdown (SIGINT: running transactions are aborted, clients disconnected)."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
        self.proc = None

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """Stopped inside the block, always running (and answering) again after it."""
        try:
            self.stop()
            yield
        finally:
            self.start()

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def execute(self, sql: str, database: str = "postgres") -> None:
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=database, autocommit=True
        ) as conn:
            conn.execute(sql.encode())

    def create_database(self, name: str | None = None) -> str:
        name = name or f"ctxw_{os.getpid()}_{secrets.token_hex(3)}"
        self.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[PrivatePostgres]:
    """A running private PostgreSQL server for the whole session, removed at the end.

    Skipped, like every PostgreSQL test, when ``CTXWARDEN_TEST_POSTGRES_URL`` is unset.
    """
    if not os.environ.get(POSTGRES_ENV):
        pytest.skip(f"{POSTGRES_ENV} is not set")
    server = PrivatePostgres(Path(tempfile.mkdtemp(prefix="ctxw-pg-")))
    try:
        server.start()
        yield server
    finally:
        server.close()
