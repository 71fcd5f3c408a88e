"""A private MariaDB server the suite starts itself, for tests that take the database away.

Stopping, killing or freezing a database server is only safe on one nobody else uses, so
these tests never touch the server behind ``CTXWARDEN_TEST_MYSQL_URL``: the session fixture
``private_mariadb`` initialises a data directory of its own (``mariadb-install-db``) and runs
a ``mariadbd`` child process on a free loopback port, with ``--no-defaults`` so no system
configuration applies. Every helper acts on that child process (its PID) alone.

Usage::

    def test_x(private_mariadb: PrivateMariaDB) -> None:
        url = private_mariadb.create_database()  # mysql+aiomysql://root@127.0.0.1:PORT/<new>
        with private_mariadb.down():  # stopped here, started again afterwards
            ...
        with private_mariadb.paused():  # SIGSTOP here (hung, not gone), SIGCONT afterwards
            ...

A server of a test's own with other options (e.g. a ``sql_mode``):
``PrivateMariaDB(Path(tempfile.mkdtemp()), server_args=["--sql-mode=NO_BACKSLASH_ESCAPES"])``
(tests/hardening/test_sql_mode.py).

``url`` is the base URL, ``mysql+aiomysql://root@127.0.0.1:PORT/test`` (database ``test``
exists). A test that stops, kills or pauses the server must leave it running again (the
context managers do; otherwise call ``start()`` / ``resume()`` in a ``finally``): the
fixture is shared by the whole session.

Like every MySQL test, these are skipped when ``CTXWARDEN_TEST_MYSQL_URL`` is unset; when it
is set, a missing MariaDB server is a failure (install the ``mariadb-server`` package).
Needs MariaDB 10.4 or newer (``mariadb-install-db --auth-root-authentication-method``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pymysql
import pytest

MYSQL_ENV = "CTXWARDEN_TEST_MYSQL_URL"
MARIADBD_CANDIDATES = ("/usr/sbin/mariadbd", "/usr/libexec/mariadbd", "/usr/bin/mariadbd")
START_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0


def find_mariadbd() -> str | None:
    """The ``mariadbd`` binary (``CTXWARDEN_MARIADBD`` overrides), or None."""
    override = os.environ.get("CTXWARDEN_MARIADBD")
    if override:
        return override
    found = shutil.which("mariadbd")
    if found:
        return found
    return next((p for p in MARIADBD_CANDIDATES if os.access(p, os.X_OK)), None)


def find_install_db() -> str | None:
    """The ``mariadb-install-db`` script (``CTXWARDEN_MARIADB_INSTALL_DB`` overrides), or None."""
    return os.environ.get("CTXWARDEN_MARIADB_INSTALL_DB") or shutil.which("mariadb-install-db")


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PrivateMariaDB:
    """One ``mariadbd`` child process with its own data directory under ``base_dir``.

    ``start()`` initialises the data directory the first time. The port is chosen once and
    kept across restarts, so ``url`` (and every server configured with it) stays valid.
    """

    def __init__(
        self,
        base_dir: Path,
        *,
        mariadbd: str | None = None,
        install_db: str | None = None,
        port: int | None = None,
        server_args: Sequence[str] = (),
    ) -> None:
        """``server_args``: extra ``mariadbd`` options (e.g. ``--sql-mode=...``), after
        the fixed ones."""
        binary = mariadbd or find_mariadbd()
        installer = install_db or find_install_db()
        if binary is None or installer is None:
            raise RuntimeError(
                "mariadbd / mariadb-install-db not found: the database outage tests run a "
                "private MariaDB server; install the Debian package mariadb-server"
            )
        self.mariadbd = binary
        self.install_db = installer
        self.base_dir = base_dir
        self.datadir = base_dir / "data"
        self.socket = base_dir / "mariadb.sock"
        self.error_log = base_dir / "error.log"
        self.port = port or free_port()
        self.server_args = tuple(server_args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.is_paused = False
        self._started = False
        self.startup_seconds = 0.0
        """How long the last ``start()`` took (including the data directory, the first time)."""

    # -- addresses -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``mysql+aiomysql://root@127.0.0.1:PORT/test``: the server URL the tests use."""
        return self.database_url("test")

    def database_url(self, name: str) -> str:
        return f"mysql+aiomysql://root@127.0.0.1:{self.port}/{name}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    # -- life cycle ------------------------------------------------------------------------

    def _user_args(self) -> list[str]:
        # mariadbd refuses to run as root unless told to.
        return ["--user=root"] if os.geteuid() == 0 else []

    def _install(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                self.install_db,
                "--no-defaults",
                *self._user_args(),
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                f"--datadir={self.datadir}",
            ],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"mariadb-install-db failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
            )

    def running(self) -> bool:
        """The child process exists (it may be paused, starting or shutting down)."""
        return self.proc is not None and self.proc.poll() is None

    def answers(self, timeout: float = 1.0) -> bool:
        """A client can connect and run a query right now."""
        try:
            conn = pymysql.connect(
                host="127.0.0.1",
                port=self.port,
                user="root",
                password="",
                connect_timeout=timeout,
                read_timeout=timeout,
                write_timeout=timeout,
            )
        except pymysql.MySQLError:
            return False
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
            return True
        except pymysql.MySQLError:
            return False
        finally:
            conn.close()

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the server (a no-op when it runs, resumed when paused) and wait until it
        answers."""
        if self.running():
            self.resume()
            self.wait_until_answering(timeout)
            return
        began = time.monotonic()
        if not (self.datadir / "mysql").is_dir():
            self._install()
        for attempt in range(3):
            self._spawn()
            try:
                self.wait_until_answering(timeout)
                break
            except RuntimeError:
                # Someone took the port between free_port() and the bind: before the first
                # successful start nothing depends on the port yet, so pick another one.
                in_use = not self.running() and "Address already in use" in self.log_tail()
                if self._started or not in_use or attempt == 2:
                    self.kill()
                    raise
                self.proc = None
                self.port = free_port()
        self._started = True
        self.startup_seconds = time.monotonic() - began

    def _spawn(self) -> None:
        with open(self.error_log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.mariadbd,
                    "--no-defaults",
                    *self._user_args(),
                    f"--datadir={self.datadir}",
                    f"--socket={self.socket}",
                    f"--port={self.port}",
                    "--bind-address=127.0.0.1",
                    f"--pid-file={self.base_dir / 'mariadbd.pid'}",
                    f"--log-error={self.error_log}",
                    f"--tmpdir={self.base_dir}",
                    "--character-set-server=utf8mb4",
                    "--collation-server=utf8mb4_general_ci",
                    *self.server_args,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                # Its own session: a Ctrl-C in the terminal reaches pytest (which then
                # stops this server), never the server directly.
                start_new_session=True,
            )
        self.is_paused = False

    def wait_until_answering(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self.answers():
            if not self.running():
                raise RuntimeError(f"private mariadbd exited:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"private mariadbd did not answer within {timeout:g} s:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Shut the server down cleanly (SIGTERM) and wait until the process is gone;
        SIGKILL when it takes longer than ``timeout``. A no-op when it is not running."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            self.resume()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
        self.proc = None
        self.is_paused = False

    def kill(self) -> None:
        """SIGKILL: the server dies without a shutdown (InnoDB recovers on the next start)."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT)
        self.proc = None
        self.is_paused = False

    def restart(self, timeout: float = START_TIMEOUT) -> None:
        self.stop()
        self.start(timeout)

    def pause(self) -> None:
        """SIGSTOP: the server hangs. Connections are still accepted by the kernel, but
        nothing answers (a hung database, not a gone one) until ``resume()``."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            raise RuntimeError("the private mariadbd is not running")
        proc.send_signal(signal.SIGSTOP)
        self.is_paused = True

    def resume(self) -> None:
        """SIGCONT after ``pause()``; a no-op when the server is not paused."""
        proc = self.proc
        if self.is_paused and proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
        self.is_paused = False

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """Stopped inside the block, always running (and answering) again after it."""
        try:
            self.stop()
            yield
        finally:
            self.start()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """SIGSTOPped inside the block, always resumed after it."""
        try:
            self.pause()
            yield
        finally:
            self.resume()

    def close(self) -> None:
        """Stop the server and remove its data directory."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    # -- databases -------------------------------------------------------------------------

    def execute(self, sql: str) -> None:
        """Run one statement as root (autocommit)."""
        conn = pymysql.connect(
            host="127.0.0.1", port=self.port, user="root", password="", autocommit=True
        )
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
        finally:
            conn.close()

    def create_database(self, name: str | None = None) -> str:
        """Create a database (by default ``ctxw_<pid>_<random>``); its URL."""
        name = name or f"ctxw_{os.getpid()}_{secrets.token_hex(3)}"
        self.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        return self.database_url(name)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.error_log.read_text(errors="replace")
        except OSError:
            return "(no error log)"
        return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="session")
def private_mariadb() -> Iterator[PrivateMariaDB]:
    """A running private MariaDB server for the whole session, removed at the end.

    Skipped, like every MySQL test, when ``CTXWARDEN_TEST_MYSQL_URL`` is unset.
    """
    if not os.environ.get(MYSQL_ENV):
        pytest.skip(f"{MYSQL_ENV} is not set")
    # A short base path: the socket path must fit in sun_path (108 bytes).
    server = PrivateMariaDB(Path(tempfile.mkdtemp(prefix="ctxw-mariadb-")))
    try:
        server.start()
        yield server
    finally:
        server.close()
