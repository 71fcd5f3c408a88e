"""What one ``serve --workers N`` worker process shares with its supervisor.

Each worker is an ordinary ``serve`` (its own event loop, hot sessions, group
committer) bound with SO_REUSEPORT to the port the supervisor reserved. It
reports to the supervisor through a pipe (ready: its metrics address) and a
shared status board, one byte a worker, which every worker's health service
reads: the kernel hands a probe's connection to any worker, so each answers for
all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from grpc_health.v1 import health, health_pb2

STARTING, SERVING, NOT_SERVING = 0, 1, 2


@dataclass
class WorkerLink:
    index: int
    board: Any  # multiprocessing Array('b'): one status byte a worker
    conn: Connection

    def ready(self, bound: str, metrics_address: str, console_address: str) -> None:
        """Tell the supervisor this worker listens (and where its private metrics are)."""
        self.conn.send(("ready", self.index, bound, metrics_address, console_address))

    def health_servicer(self) -> health.aio.HealthServicer:
        return SharedHealth(self.board, self.index)


class SharedHealth(health.aio.HealthServicer):  # type: ignore[misc]  # grpc_health is untyped
    """grpc.health.v1 whose Check is SERVING only when every worker is serving."""

    def __init__(self, board: Any, index: int) -> None:
        super().__init__()
        self._board = board
        self._index = index

    async def set(self, service: str, status: Any) -> None:
        await super().set(service, status)
        if service == "" and not self._gracefully_shutting_down:
            ok = status == health_pb2.HealthCheckResponse.SERVING
            self._board[self._index] = SERVING if ok else NOT_SERVING

    async def enter_graceful_shutdown(self) -> None:
        self._board[self._index] = NOT_SERVING
        await super().enter_graceful_shutdown()

    async def Check(self, request: Any, context: Any) -> Any:
        reply = await super().Check(request, context)
        if reply.status == health_pb2.HealthCheckResponse.SERVING and not all_serving(self._board):
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.NOT_SERVING)
        return reply


def all_serving(board: Any) -> bool:
    return all(value == SERVING for value in board[:])
