"""The real parts the whole-API model test drives: one or two ``ctxwarden serve`` replicas
over one database (each with its web console, whose session search is the one label
search), the CLI (export, import, purge) and direct SQL to age rows (the retention rules'
clock) and to end the replicas' database connections."""

from __future__ import annotations

import contextlib
import random
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
from sqlalchemy import bindparam, create_engine, text
from sqlalchemy.exc import DBAPIError

from ctxwarden.store.urls import sync_url
from ctxwarden.util import ids
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.support.observed import wait_for_sample
from tests.support.server import CLI, ServerProcess

Stub = pb_grpc.ContextServiceStub
DAY_US = 86_400_000_000
SERVER_ARGS = ["--summarizer", "extractive", "--max-stored-bytes-per-tenant", "50000000"]
"""A server summariser (Compact, auto_compact, background compactions) and a tenant quota
the test can reach."""
PENDING = "ctxwarden_background_compactions_pending"
SUCCEEDED = "ctxwarden_background_compactions_succeeded_total"
IN_FLIGHT = "ctxwarden_rpcs_in_flight"
SERVICE = "ctxwarden.v1.ContextService"
SETTLE_SECONDS = 30.0


class Replica(ServerProcess):
    """A server with its console on a free port (``console`` is its base URL)."""

    def __init__(self, url: str, log_dir: Path) -> None:
        args = [*SERVER_ARGS, "--console-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]
        super().__init__(url, log_dir, args)
        self.console = ""
        self.metrics = ""

    def start(self, port: int | None = None) -> None:
        super().start(port)
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        lines: list[str] = []

        def read() -> None:
            lines.extend(stdout.readline() for _ in range(2))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()  # the metrics and console lines follow "listening on" at once
        reader.join(timeout=10)
        metrics, console = [*lines, "", ""][:2]
        assert metrics.startswith("ctxwarden metrics on "), metrics
        assert console.startswith("ctxwarden console on "), console
        self.metrics, self.console = metrics.split()[-1], console.split()[-1]

    def background(self) -> tuple[float, float]:
        """From one scrape of its metrics: the background compactions queued, running or
        waiting to retry, and those it committed since it started."""
        page = httpx.get(f"http://{self.metrics}/metrics", timeout=10).text
        found = {PENDING: 0.0, SUCCEEDED: 0.0}
        for line in page.splitlines():
            name, _, value = line.partition(" ")
            if name in found:
                found[name] = float(value)
        return found[PENDING], found[SUCCEEDED]


ROW = re.compile(
    r'data-testid="session-row" data-archived="(true|false)">\s*<td><a href="/sessions/([^"]+)"'
)
NEXT = re.compile(r'data-testid="next-page" href="/sessions\?[^"]*after=([^"&]+)"')


class Harness:
    """Replicas of one database; ``stub()`` picks one at random for every call, so a
    session's calls wander between replicas as a load balancer would send them."""

    def __init__(self, url: str, log_dir: Path, replicas: int = 1) -> None:
        self.url = url
        self.log_dir = log_dir
        self.rng = random.Random(0)
        self.servers = [Replica(url, log_dir / f"r{i}") for i in range(replicas)]
        self.channels: list[grpc.Channel] = []
        self.stubs: list[Stub] = []
        self.restarts = 0
        self.last = 0
        """The replica that served the last ``stub()`` call."""

    def start(self) -> None:
        for server in self.servers:
            server.log_dir.mkdir(parents=True, exist_ok=True)
            server.start()
        self._connect()

    def _connect(self) -> None:
        for ch in self.channels:
            ch.close()
        self.channels = [grpc.insecure_channel(s.target) for s in self.servers]
        self.stubs = [Stub(ch) for ch in self.channels]

    def stop(self) -> None:
        for ch in self.channels:
            ch.close()
        for server in self.servers:
            server.stop()

    def stub(self) -> Stub:
        self.last = self.rng.randrange(len(self.stubs))
        return self.stubs[self.last]

    def stub_of(self, replica: int) -> Stub:
        """The stub of one replica (the call's replica, as ``stub()`` notes it)."""
        self.last = replica
        return self.stubs[replica]

    def finished(self, replica: int, method: str) -> None:
        """Until ``replica`` handles no ``method`` call (it noticed a cancelled one)."""
        metrics = self.servers[replica].metrics
        wait_for_sample(metrics, IN_FLIGHT, 0, SETTLE_SECONDS, method=f"{SERVICE}/{method}")

    def settle(self) -> list[float]:
        """Until no replica has a background compaction queued, running or waiting to
        retry (the scheduler queues a session within the call that grew it): then
        how many each replica has committed since it started."""
        deadline = time.monotonic() + SETTLE_SECONDS
        committed = []
        for server in self.servers:
            while (state := server.background())[0] > 0:
                assert time.monotonic() < deadline, "background compactions did not settle"
            committed.append(state[1])
        return committed

    def search(self, **params: str) -> dict[str, bool]:
        """The console's session search on a random replica, every page: the IDs
        found, each with whether the page shows it archived."""
        base = self.servers[self.rng.randrange(len(self.servers))].console
        found: dict[str, bool] = {}
        after = ""
        with httpx.Client(base_url=base, timeout=30) as http:
            while True:
                cursor = {"after": after} if after else {}
                page = http.get("/sessions", params={**params, **cursor})
                assert page.status_code == 200, (page.status_code, page.text[:500])
                for archived, sid in ROW.findall(page.text):
                    assert sid not in found, f"{sid} listed twice"
                    found[sid] = archived == "true"
                more = NEXT.search(page.text)
                if more is None:
                    return found
                after = more.group(1)

    def restart(self) -> None:
        """Every replica stops (SIGTERM, a clean drain) and starts again on its port."""
        self.restarts += 1
        for server in self.servers:
            server.restart()
        self._connect()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (args, done.stderr[-2000:])
        return done

    def export_import(self, sid: str, new_sid: str, path: Path) -> None:
        self.cli("export", sid, "--database-url", self.url, "-o", str(path))
        self.cli("import", str(path), "--database-url", self.url, "--session-id", new_sid)

    def age(self, sid: str, column: str, days: int) -> None:
        """Move a session's archive or delete time ``days`` into the past."""
        assert column in ("archive_time_us", "delete_time_us")
        engine = create_engine(sync_url(self.url))
        try:
            with engine.begin() as conn:
                conn.execute(
                    text(f"UPDATE sessions SET {column} = :t WHERE session_id = :s"),
                    {"t": ids.now_us() - days * DAY_US, "s": sid},
                )
        finally:
            engine.dispose()

    def stored(self, sids: list[str]) -> tuple[set[str], list[str]]:
        """Which of ``sids`` have a row in the database (deleted ones included until
        purged), and every fork whose source's row is gone (a purge must never do that)."""
        engine = create_engine(sync_url(self.url))
        try:
            with engine.connect() as conn:
                present: set[str] = set()
                if sids:
                    query = text("SELECT session_id FROM sessions WHERE session_id IN :ids")
                    rows = conn.execute(
                        query.bindparams(bindparam("ids", expanding=True)), {"ids": sids}
                    )
                    present = {str(r.session_id) for r in rows}
                orphans = conn.execute(
                    text(
                        "SELECT c.session_id FROM sessions c LEFT JOIN sessions p"
                        " ON p.session_id = c.parent_key"
                        " WHERE c.parent_key <> '' AND p.session_id IS NULL"
                    )
                )
                return present, [str(r.session_id) for r in orphans]
        finally:
            engine.dispose()

    def lose_connections(self) -> int:
        """The database ends every connection to it but this one (a failover, a proxy
        or an idle timeout would): how many it ended (SQLite has none to end)."""
        if self.url.startswith("sqlite"):
            return 0
        engine = create_engine(sync_url(self.url))
        try:
            with engine.begin() as conn:
                if self.url.startswith("mysql"):
                    ids_ = conn.execute(
                        text(
                            "SELECT id FROM information_schema.processlist"
                            " WHERE db = DATABASE() AND id <> CONNECTION_ID()"
                        )
                    ).scalars()
                    ended = 0
                    for thread in list(ids_):
                        # Gone already (it closed meanwhile) is as good as ended.
                        with contextlib.suppress(DBAPIError):
                            conn.execute(text(f"KILL CONNECTION {int(thread)}"))
                            ended += 1
                    return ended
                return len(
                    conn.execute(
                        text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                        )
                    ).all()
                )
        finally:
            engine.dispose()

    def purge(self) -> str:
        """The retention rules: archived and deleted sessions older than a day."""
        return self.cli(
            "purge",
            "--database-url",
            self.url,
            "--purge-archived-after-days",
            "1",
            "--purge-deleted-after-days",
            "1",
        ).stdout


@contextlib.contextmanager
def running(url: str, tmp: Path, replicas: int = 1) -> Iterator[Harness]:
    """A started harness of ``replicas`` servers on ``url``, stopped afterwards."""
    harness = Harness(url, tmp / "logs", replicas=replicas)
    harness.start()
    try:
        yield harness
    finally:
        harness.stop()
