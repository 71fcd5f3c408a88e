"""What one ``serve --workers N`` worker process shares with its supervisor.

Each worker is an ordinary ``serve`` (its own event loop, hot sessions, group
committer) bound with SO_REUSEPORT to the port the supervisor reserved. It
reports to the supervisor through a pipe (ready: its metrics address) and a
shared status board, one byte a worker, which every worker's health service
reads: the kernel hands a probe's connection to any worker, so each answers for
all of them (app/shared_health.py). The supervisor imports this module without gRPC.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from ctxwarden.app.health_board import NOT_SERVING, SERVING, STARTING, all_serving

if TYPE_CHECKING:
    from grpc_health.v1 import health

__all__ = ["NOT_SERVING", "SERVING", "STARTING", "WorkerLink", "all_serving"]


@dataclass
class WorkerLink:
    index: int
    board: Any  # multiprocessing Array('b'): one status byte a worker
    conn: Connection

    def ready(self, bound: str, metrics_address: str, console_address: str) -> None:
        """Tell the supervisor this worker listens (and where its private metrics are)."""
        self.conn.send(("ready", self.index, bound, metrics_address, console_address))

    def health_servicer(self) -> health.aio.HealthServicer:
        from ctxwarden.app.shared_health import SharedHealth  # gRPC: the worker's side only

        return SharedHealth(self.board, self.index)
