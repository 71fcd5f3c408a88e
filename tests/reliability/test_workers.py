"""``ctxwarden serve --workers 2`` on MySQL and PostgreSQL.

Clients on separate connections (the kernel spreads connections over the two
workers) append concurrently to the same few sessions, so each session's hot
copy in one worker goes stale under the other's appends; an append that keeps
losing the version compare-and-set is answered ABORTED CONCURRENT_MODIFICATION
and resent with its request_id, as across replicas. Afterwards every
session is dense (seqs 1..n), holds every acknowledged message exactly once and
nothing else. A worker killed with SIGKILL is restarted and serves again; SIGTERM
drains and stops them all. The supervisor runs without the server's modules. SQLite
refuses more than one worker.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ctxwarden_client import AbortedError, AsyncClient, user
from tests.reliability.harness import error_log_lines, wait_until
from tests.support.databases import SERVER_BACKEND_PARAMS, fresh_database
from tests.support.server import CLI, ServerProcess, migrate_database

CLIENTS = 6
SESSIONS = 3
APPENDS = 6  # per client and session
RESENDS = 20


def _children(pid: int) -> list[int]:
    """The worker processes of supervisor ``pid`` (Linux: /proc)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    out = []
    for child in path.read_text().split():
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        if b"spawn_main" in cmdline:
            out.append(int(child))
    return out


def _mapped(pid: int, names: tuple[str, ...]) -> list[str]:
    """The shared objects of ``names`` mapped into process ``pid`` (Linux: /proc)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return sorted({line.split()[-1] for line in maps.splitlines() if any(n in line for n in names)})


def _scrape(address: str) -> dict[str, float]:
    """The merged /metrics of the supervisor: sample (with labels) -> value."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def _hot_per_worker(metrics_address: str) -> list[float]:
    metrics = _scrape(metrics_address)
    return [metrics.get(f'ctxwarden_hot_sessions{{worker="{w}"}}', 0.0) for w in (0, 1)]


async def _one_more_connection(target: str) -> None:
    """A new session with one message, over a connection of its own."""
    channel = _own_connection(target)
    async with channel, AsyncClient(target, channel=channel) as client:
        session = await client.create_session()
        await client.append_messages(session.session_id, user("spread"))


def _spread(metrics_address: str, target: str) -> int:
    """New connections until both workers hold sessions (the kernel's hash may have
    sent every load connection to one); how many were needed."""
    extra = 0
    while not all(h > 0 for h in _hot_per_worker(metrics_address)) and extra < 40:
        asyncio.run(_one_more_connection(target))
        extra += 1
    return extra


def _serving(target: str) -> bool:
    with grpc.insecure_channel(target) as ch:
        try:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2)
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def _own_connection(target: str) -> grpc.aio.Channel:
    """A channel with its own TCP connection (gRPC shares them between a process's
    channels by default, which would send every client to one worker)."""
    return grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])


async def _append(client: AsyncClient, sid: str, text: str) -> None:
    """One append, resent with its request_id while another worker's concurrent
    append to the session wins the version compare-and-set (as across replicas)."""
    for _ in range(RESENDS):
        try:
            await client.append_messages(sid, user(text), request_id=f"{sid}-{text}")
            return
        except AbortedError as exc:
            if exc.reason != "CONCURRENT_MODIFICATION":
                raise
    raise AssertionError(f"{text}: still CONCURRENT_MODIFICATION after {RESENDS} resends")


async def _client_appends(target: str, n: int, sessions: list[str]) -> dict[str, set[str]]:
    """Client ``n`` appends APPENDS messages to each session, interleaved; what was acked."""
    acked: dict[str, set[str]] = {sid: set() for sid in sessions}
    channel = _own_connection(target)
    async with channel, AsyncClient(target, timeout=30, channel=channel) as client:
        for i in range(APPENDS):
            for sid in sessions:
                text = f"c{n}-m{i}"
                await _append(client, sid, text)
                acked[sid].add(text)
    return acked


async def _load(target: str) -> dict[str, set[str]]:
    async with AsyncClient(target) as admin:
        sessions = [(await admin.create_session()).session_id for _ in range(SESSIONS)]
    results = await asyncio.gather(*(_client_appends(target, n, sessions) for n in range(CLIENTS)))
    merged: dict[str, set[str]] = {sid: set() for sid in sessions}
    for acked in results:
        for sid, texts in acked.items():
            merged[sid] |= texts
    return merged


async def _stored(target: str, session_id: str) -> list[tuple[int, str]]:
    async with AsyncClient(target) as client:
        return [
            (m.seq, m.content[0].text.text)
            async for m in client.list_messages(session_id, page_size=500)
        ]


@pytest.mark.parametrize("kind", SERVER_BACKEND_PARAMS)
def test_two_workers_lose_nothing_and_survive_a_killed_worker(kind: str, tmp_path: Path) -> None:
    with fresh_database(kind, tmp_path, "workers") as url:
        migrate_database(url)
        args = ["--workers", "2", "--metrics-listen", "127.0.0.1:0"]
        server = ServerProcess(url, log_dir=tmp_path, extra_args=args)
        server.start(port=0)
        try:
            assert server.proc is not None and server.proc.stdout is not None
            metrics_address = server.proc.stdout.readline().split()[-1]
            supervisor = server.proc.pid
            workers = _children(supervisor)
            assert len(workers) == 2, workers
            # The supervisor is a fresh interpreter without the server's modules
            # (app/supervise.py): no gRPC, no protobuf; its workers have both.
            assert _mapped(supervisor, ("cygrpc", "_upb")) == []
            assert _mapped(workers[0], ("cygrpc",)) != []
            acked = asyncio.run(_load(server.target))
            for sid, texts in acked.items():
                stored = asyncio.run(_stored(server.target, sid))
                assert [seq for seq, _ in stored] == list(range(1, len(stored) + 1)), sid
                assert sorted(t for _, t in stored) == sorted(texts), sid
                assert len(texts) == CLIENTS * APPENDS
            extra = _spread(metrics_address, server.target)
            assert all(h > 0 for h in _hot_per_worker(metrics_address)), "one worker idle"
            metrics = _scrape(metrics_address)
            # Counters are summed over the workers; gauges are one series a worker.
            appended = metrics["ctxwarden_messages_appended_total"]
            assert appended == SESSIONS * CLIENTS * APPENDS + extra
            assert metrics["ctxwarden_workers"] == metrics["ctxwarden_workers_serving"] == 2

            os.kill(workers[0], signal.SIGKILL)
            asyncio.run(
                wait_until(
                    lambda: (
                        len(_children(supervisor)) == 2 and workers[0] not in _children(supervisor)
                    ),
                    30,
                    "the killed worker to be restarted",
                )
            )
            asyncio.run(wait_until(lambda: _serving(server.target), 30, "SERVING again"))

            async def one_append() -> int:
                async with AsyncClient(server.target) as client:
                    session = await client.create_session()
                    reply = await client.append_messages(session.session_id, user("after"))
                    return int(reply.messages[0].seq)

            assert asyncio.run(one_append()) == 1
            assert _scrape(metrics_address)["ctxwarden_worker_restarts_total"] == 1
            assert server.proc.poll() is None, "a worker's death must not stop the server"
        finally:
            code = server.stop()
        assert code == 0
        assert not Path(f"/proc/{supervisor}").exists()
        for pid in workers[1:]:
            assert (
                not Path(f"/proc/{pid}/cmdline").exists()
                or not Path(f"/proc/{pid}/cmdline").read_bytes()
            ), "a worker outlived the supervisor"
        log = server.log_text()
        assert "worker 0" in log and "restarting" in log
        assert not [line for line in error_log_lines(log) if "worker" not in line]


def test_sqlite_refuses_more_than_one_worker(tmp_path: Path) -> None:
    done = subprocess.run(
        [*CLI, "serve", "--workers", "2", "--database-url", f"sqlite:///{tmp_path / 'x.db'}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "SQLite" in lines[0] and "--workers 1" in lines[0], done.stderr
    assert not (tmp_path / "x.db").exists()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
