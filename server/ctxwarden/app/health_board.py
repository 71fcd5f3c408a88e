"""The status board of ``serve --workers N``: one byte a worker (a multiprocessing
Array), written by each worker's health service, read by all of them and by the
supervisor. No gRPC here: the supervisor imports it."""

from __future__ import annotations

from typing import Any

STARTING, SERVING, NOT_SERVING = 0, 1, 2


def all_serving(board: Any) -> bool:
    return all(value == SERVING for value in board[:])
