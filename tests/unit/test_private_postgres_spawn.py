"""The private PostgreSQL server's processes start as the ``postgres`` user without a
plain ``fork()`` in the test process.

``subprocess.Popen(user=...)`` forks the whole process instead of ``vfork``-ing it, and
the fork handlers gRPC registers then run in the child: with a ``grpc.aio`` server and
channel busy in the same process (the outage tests), about one such child in three
crashed before ``exec`` (a segmentation fault, the start retried, a faulthandler dump in
the CI log). ``PrivatePostgres.as_user`` wraps the command in ``setpriv`` instead, so the
child is ``vfork``-ed and runs no fork handler."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import subprocess

import grpc
import pytest
from tests.support.postgres import PrivatePostgres

SPAWNS = 60


def _has_postgres_user() -> bool:
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return True


@pytest.mark.skipif(
    os.geteuid() != 0 or not _has_postgres_user(),
    reason="starts processes as the postgres user: needs root and that user",
)
def test_children_started_as_postgres_survive_a_busy_grpc_aio_process() -> None:
    async def run() -> list[int]:
        server = grpc.aio.server()
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        probe: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            "/probe.Probe/Ping"
        )

        async def ping() -> None:
            while True:
                # Unimplemented: the point is the traffic.
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await probe(b"", timeout=0.05)

        pingers = [asyncio.create_task(ping()) for _ in range(4)]

        def spawn() -> int:
            command, user = PrivatePostgres.as_user(["/bin/true"], "postgres")
            return subprocess.run(command, user=user, start_new_session=True).returncode

        try:
            return [await asyncio.to_thread(spawn) for _ in range(SPAWNS)]
        finally:
            for task in pingers:
                task.cancel()
            await channel.close()
            await server.stop(0)

    codes = asyncio.run(run())
    assert codes == [0] * SPAWNS, f"{sum(c != 0 for c in codes)} of {SPAWNS} children died"
