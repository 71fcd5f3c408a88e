"""The real parts the whole-API model test drives: one or two ``ctxwarden serve`` replicas
over one database, the CLI (export, import, purge) and direct SQL to age rows (the
retention rules' clock)."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import grpc
from sqlalchemy import create_engine, text

from ctxwarden.store.urls import sync_url
from ctxwarden.util import ids
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.support.server import CLI, ServerProcess

Stub = pb_grpc.ContextServiceStub
DAY_US = 86_400_000_000
SERVER_ARGS = ["--summarizer", "extractive", "--max-stored-bytes-per-tenant", "50000000"]
"""A server summariser (Compact, auto_compact) and a tenant quota the test can reach."""


class Harness:
    """Replicas of one database; ``stub()`` picks one at random for every call, so a
    session's calls wander between replicas as a load balancer would send them."""

    def __init__(self, url: str, log_dir: Path, replicas: int = 1) -> None:
        self.url = url
        self.log_dir = log_dir
        self.rng = random.Random(0)
        self.servers = [
            ServerProcess(url, log_dir=log_dir / f"r{i}", extra_args=list(SERVER_ARGS))
            for i in range(replicas)
        ]
        self.channels: list[grpc.Channel] = []
        self.stubs: list[Stub] = []
        self.restarts = 0

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
        return self.rng.choice(self.stubs)

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
