"""A private 3-node Galera cluster for the cluster tests, run by ``scripts/galera.sh``.

The tests drive the same script an operator would use (start, kill, rejoin, status), so
the script is tested too. Every node is a ``mariadbd`` child of the script with its own
data directory under ``base_dir`` and its own loopback ports; nothing touches the server
behind ``CTXWARDEN_TEST_MYSQL_URL``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pymysql
import pymysql.connections
import pymysql.cursors

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "galera.sh"
ENV = "CTXWARDEN_TEST_GALERA"
"""Set (to anything but empty) to run the cluster tests; CI sets it."""
NODES = (1, 2, 3)


class GaleraCluster:
    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.ports: dict[int, int] = {}

    def _run(self, *args: str, timeout: float = 180.0) -> str:
        done = subprocess.run(
            [str(SCRIPT), args[0], str(self.base_dir), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"galera.sh {' '.join(args)} failed ({done.returncode}):\n"
                f"{done.stdout}\n{done.stderr}"
            )
        return done.stdout

    def start(self, *nodes: int) -> None:
        """Start the cluster (or rejoin ``nodes``); returns when they are Synced."""
        self._run("start", *map(str, nodes))
        if not self.ports:
            for n, url in zip(NODES, self._run("urls").split(), strict=True):
                self.ports[n] = int(url.rsplit(":", 1)[1].split("/", 1)[0])

    def kill(self, *nodes: int) -> None:
        """SIGKILL nodes (a crash: no shutdown, no goodbye to the group)."""
        self._run("kill", *map(str, nodes))

    def stop(self) -> None:
        self._run("stop")

    def status(self) -> dict[int, str]:
        """node -> "Synced 3", "down", ... (the script's status column)."""
        out: dict[int, str] = {}
        for line in self._run("status").splitlines():
            name, _addr, _pid, state = line.split(" ", 3)
            out[int(name.removeprefix("node"))] = state
        return out

    def url(self, node: int, database: str) -> str:
        return f"mysql+aiomysql://root@127.0.0.1:{self.ports[node]}/{database}"

    def connect(
        self, node: int, database: str | None = None
    ) -> pymysql.connections.Connection[pymysql.cursors.Cursor]:
        return pymysql.connect(
            host="127.0.0.1",
            port=self.ports[node],
            user="root",
            password="",
            database=database,
            autocommit=True,
            connect_timeout=5,
        )

    def execute(self, node: int, sql: str, database: str | None = None) -> list[tuple[object, ...]]:
        conn = self.connect(node, database)
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())
        finally:
            conn.close()

    def create_database(self) -> str:
        name = f"ctxw_{os.getpid()}_{secrets.token_hex(3)}"
        self.execute(1, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        return name

    def close(self) -> None:
        """Remove the cluster: no clean shutdown needed for data about to be deleted."""
        try:
            self.kill(*NODES)
        finally:
            shutil.rmtree(self.base_dir, ignore_errors=True)
