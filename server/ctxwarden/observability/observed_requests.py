"""A request stream that shows the RPC observer each message it yields.

A plain async iterator that reads with ``context.read()``, not an async
generator over grpc's request iterator (itself one): a unary method served as
client-streaming (api/reads.py) reads one message and drops its stream, and
every dropped, unfinished async generator costs the event loop a wake-up and a
task that closes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc


class ObservedRequests:
    """The call's request messages, each passed to ``on_request`` as it is read."""

    __slots__ = ("_context", "_on_request")

    def __init__(self, context: Any, on_request: Callable[[Any], None]) -> None:
        self._context = context
        self._on_request = on_request

    def __aiter__(self) -> ObservedRequests:
        return self

    async def __anext__(self) -> Any:
        request = await self._context.read()
        if request is grpc.aio.EOF:
            raise StopAsyncIteration
        self._on_request(request)
        return request
