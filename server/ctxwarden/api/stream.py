"""StreamMessages' read-ahead: the requests a client already sent, taken in runs.

A task of the call reads the stream into a bounded buffer while the handler
answers; the handler takes the next request (waiting for it) and with it the
requests already buffered that can be written together: the same session,
plain (no state delta, no expected_last_seq), not near the response size
limit. Nothing waits for more requests: a lone request is answered at once.
An error reading the stream (a refused request, a lost client) is raised by
``next_run`` only after every request read before it was taken: the client
gets every earlier answer first.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from google.protobuf.message import Message as PbMessage

from ctxwarden.v1 import context_service_pb2 as pb

MAX_RUN = 64
"""Requests at most in one run (and in the buffer)."""
RESPONSE_MARGIN = 1024
RESPONSE_MARGIN_PER_MESSAGE = 128
"""Bytes an answer may add to its request (seq, ID, counts, times): a request that
could answer with more than the response limit is never merged (alone, its
answer is refused after it was written, and nothing after it is)."""


class ReadAhead:
    """Reads ``requests`` in a task of its own into a buffer of at most
    ``MAX_RUN`` requests and ``max_bytes`` bytes (the first request always fits).
    ``close`` must be called when the call ends: the task never outlives it."""

    def __init__(self, requests: AsyncIterator[Any], max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._items: deque[tuple[Any, int]] = deque()
        self._bytes = 0
        self._ended = False
        self._error: BaseException | None = None
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._task = asyncio.create_task(self._read(requests))

    async def _read(self, requests: AsyncIterator[Any]) -> None:
        try:
            async for request in requests:
                size = request.ByteSize() if isinstance(request, PbMessage) else 0
                while self._items and not self._fits(size):
                    self._room.clear()
                    await self._room.wait()
                self._items.append((request, size))
                self._bytes += size
                self._arrived.set()
        except asyncio.CancelledError:
            self._error = asyncio.CancelledError()
            raise
        except Exception as exc:
            self._error = exc
        finally:
            self._ended = True
            self._arrived.set()

    def _fits(self, size: int) -> bool:
        return len(self._items) < MAX_RUN and self._bytes + size <= self._max_bytes

    def _pop(self) -> Any:
        request, size = self._items.popleft()
        self._bytes -= size
        self._room.set()
        return request

    async def next_run(self, response_limit: int) -> list[Any]:
        """The next request and the buffered ones to write with it ([]: the stream
        ended). Raises the error that ended the reading once nothing read before
        it is left."""
        while not self._items:
            if self._ended:
                if self._error is not None:
                    raise self._error
                return []
            self._arrived.clear()
            await self._arrived.wait()
        first, size = self._items[0]
        run = [self._pop()]
        if not mergeable(first, size, response_limit):
            return run
        while self._items and len(run) < MAX_RUN:
            request, size = self._items[0]
            if not mergeable(request, size, response_limit):
                break  # checked first: a request that could not be decoded has no fields
            if request.session_id != first.session_id:
                break
            run.append(self._pop())
        return run

    def close(self) -> None:
        """Stop reading (the call ends)."""
        self._task.cancel()


def mergeable(request: Any, size: int, response_limit: int) -> bool:
    """Whether ``request`` (``size`` bytes) may be written in a run with others."""
    if not isinstance(request, pb.AppendMessagesRequest):
        return False  # could not be decoded: its error is the lone path's
    if request.HasField("expected_last_seq") or request.HasField("state_delta"):
        return False
    if response_limit <= 0:
        return True
    margin = RESPONSE_MARGIN + RESPONSE_MARGIN_PER_MESSAGE * len(request.messages)
    return size + margin <= response_limit


__all__ = ["MAX_RUN", "ReadAhead", "mergeable"]
