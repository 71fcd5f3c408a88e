"""The health service of a ``serve --workers N`` worker: SERVING only when every
worker is (see worker_link.py; kept apart so the supervisor never imports gRPC)."""

from __future__ import annotations

from typing import Any

from grpc_health.v1 import health, health_pb2

from ctxwarden.app.health_board import NOT_SERVING, SERVING, all_serving


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
