"""The asyncio ``StreamMessages`` helper: a reader task answers the senders."""

# ``timeout=`` parameters are per-send waits, part of the public API shared
# with the sync stream, not asyncio cancellation scopes.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeVar

import grpc.aio

from ._calls import MessagesArg, StateDeltaArg
from ._defaults import DEFAULT_COALESCE_WINDOW, DEFAULT_MESSAGE_VIEW, or_default
from ._errors import CtxwardenError
from ._streaming import (
    Batch,
    Pending,
    closed_error,
    deadline_error,
    mergeable,
    stream_failure,
    stream_request,
    unexpected_response_error,
)
from .v1 import context_service_pb2

if TYPE_CHECKING:  # typing-only class from the generated .pyi
    from .v1.context_service_pb2_grpc import ContextServiceAsyncStub

__all__ = ["AsyncMessageStream"]

AppendMessagesRequest = context_service_pb2.AppendMessagesRequest
AppendMessagesResponse = context_service_pb2.AppendMessagesResponse
_Future = asyncio.Future[AppendMessagesResponse]
_Call = grpc.aio.StreamStreamCall[AppendMessagesRequest, AppendMessagesResponse]
_Requests = asyncio.Queue[AppendMessagesRequest | None]
_T = TypeVar("_T")


class AsyncMessageStream:
    """An asyncio helper over the bidirectional ``StreamMessages`` RPC.

    ``await stream.send(...)`` writes one AppendMessagesRequest and waits for
    its response. Many tasks may send concurrently; requests go out in the
    order ``send`` was called and at most ``max_in_flight`` are unanswered at a
    time (further senders wait). The server ends the stream on the first error;
    every later ``send`` raises it. Use ``async with`` or call :meth:`aclose`.

    With ``coalesce`` (the default), plain appends to one session (no
    expected_last_seq, request_id or state_delta) that queue up while earlier
    ones are unanswered go out as one request, waiting at most
    ``coalesce_window`` seconds for company: concurrent senders get the
    throughput of batched appends. A lone sender is never delayed. Each sender
    still gets its own response (its messages, last_seq as of its last message);
    an error fails every request merged with the failing one, and none of their
    messages is stored (the server ends the stream on an error anyway).
    """

    def __init__(
        self,
        get_stub: Callable[[], ContextServiceAsyncStub],
        *,
        metadata: tuple[tuple[str, str], ...],
        send_timeout: float | None,
        stream_timeout: float | None,
        max_in_flight: int,
        coalesce: bool = True,
        coalesce_window: float = DEFAULT_COALESCE_WINDOW,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self._coalesce = coalesce
        self._coalesce_window = max(0.0, coalesce_window)
        self.requests_sent = 0
        """Requests written to the stream so far (fewer than sends when coalesced)."""
        self._get_stub = get_stub
        self._metadata = metadata
        self._send_timeout = send_timeout
        self._stream_timeout = stream_timeout
        self._max_in_flight = max_in_flight
        self._slots = asyncio.Semaphore(max_in_flight)
        # One event loop runs every sender and the reader: no lock is needed.
        self._pending: Pending[_Future] = Pending(self._slots, contextlib.nullcontext())
        self._requests: _Requests | None = None
        self._call: _Call | None = None
        self._reader: asyncio.Task[None] | None = None

    # -- background ----------------------------------------------------------

    def _start(self) -> None:
        if self._call is not None:
            return
        requests: _Requests = asyncio.Queue()
        self._requests = requests
        call = self._call = self._get_stub().StreamMessages(
            self._request_iterator(requests),
            timeout=self._stream_timeout,
            metadata=self._metadata,
        )
        self._reader = asyncio.get_running_loop().create_task(
            self._read(call, requests), name="ctxwarden-stream-reader"
        )

    async def _request_iterator(self, requests: _Requests) -> AsyncIterator[AppendMessagesRequest]:
        held: AppendMessagesRequest | None = None
        while True:
            request = held if held is not None else await requests.get()
            held = None
            if request is None:
                return
            if not self._coalesce or not mergeable(request):
                self._pending.sent([len(request.messages)])
                self.requests_sent += 1
                yield request
                continue
            batch = Batch(request)
            lingered = ending = False
            while not batch.full:
                if requests.empty():
                    # Linger only while earlier requests are unanswered.
                    if lingered or not self._pending.in_flight or not self._coalesce_window:
                        break
                    lingered = True
                    await asyncio.sleep(self._coalesce_window)
                    continue
                following = requests.get_nowait()
                if following is not None and batch.accepts(following):
                    batch.add(following)
                    continue
                held, ending = following, following is None
                break
            self._pending.sent(batch.counts())
            self.requests_sent += 1
            yield batch.request()
            if ending:
                return

    async def _read(self, call: _Call, requests: _Requests) -> None:
        error: CtxwardenError | None = None
        reraise = False
        try:
            while True:
                response = await call.read()
                if not isinstance(response, AppendMessagesResponse):  # grpc.aio.EOF
                    break
                if not self._pending.answer(response):
                    error = unexpected_response_error()
                    call.cancel()
                    break
        except asyncio.CancelledError:
            # Either this task was cancelled (re-raise after cleanup) or the
            # call was cancelled locally, which grpc.aio reports the same way.
            task = asyncio.current_task()
            reraise = task is not None and task.cancelling() > 0
            error = closed_error()
        except Exception as exc:
            error = stream_failure(exc)
        # Lets the request iterator finish.
        self._pending.end(error, lambda: requests.put_nowait(None))
        if reraise:
            raise asyncio.CancelledError

    # -- API -----------------------------------------------------------------

    async def _submit(self, request: AppendMessagesRequest) -> _Future:
        if self._pending.closed and self._pending.error is None:
            raise closed_error()
        self._start()
        assert self._requests is not None
        await self._slots.acquire()
        # No await from here on, so the queue order and the pending order match.
        future = self._pending.add(asyncio.get_running_loop().create_future())
        self._requests.put_nowait(request)
        return future

    async def _within(self, timeout: float | None, step: Awaitable[_T]) -> _T:
        """Awaits ``step``, raising DEADLINE_EXCEEDED after ``timeout`` seconds."""
        try:
            async with asyncio.timeout(timeout):
                return await step
        except TimeoutError:
            raise deadline_error(timeout) from None

    async def _send(self, request: AppendMessagesRequest) -> AppendMessagesResponse:
        return await (await self._submit(request))

    async def send(
        self,
        session_id_or_request: str | AppendMessagesRequest,
        messages: MessagesArg = (),
        *,
        expected_last_seq: int | None = None,
        request_id: str = "",
        view: context_service_pb2.MessageView.ValueType = DEFAULT_MESSAGE_VIEW,
        state_delta: StateDeltaArg = None,
        timeout: float | None = None,
    ) -> AppendMessagesResponse:
        """Sends one append and waits for its response.

        Pass either a prepared ``AppendMessagesRequest`` or ``session_id`` and
        ``messages`` (plus the optional request fields: ``expected_last_seq``,
        ``request_id``, ``view``, ``state_delta``). Waits first for a free slot when
        ``max_in_flight`` requests are unanswered.
        """
        request = stream_request(
            session_id_or_request, messages, expected_last_seq, request_id, view, state_delta
        )
        return await self._within(or_default(timeout, self._send_timeout), self._send(request))

    async def send_many(
        self,
        requests: Iterable[AppendMessagesRequest] | AsyncIterable[AppendMessagesRequest],
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[AppendMessagesResponse]:
        """Pipelines ``requests`` (up to ``max_in_flight`` ahead) and yields the
        responses in order. ``timeout`` bounds each request."""
        effective = or_default(timeout, self._send_timeout)
        window: deque[_Future] = deque()
        async for request in _aiter(requests):
            while len(window) >= self._max_in_flight:
                yield await self._within(effective, window.popleft())
            window.append(await self._within(effective, self._submit(request)))
        while window:
            yield await self._within(effective, window.popleft())

    @property
    def closed(self) -> bool:
        return self._pending.ended

    async def aclose(self, timeout: float | None = None) -> None:
        """Ends the request stream and waits for the server to finish it.

        Waits at most ``timeout`` seconds (default: the send timeout), then cancels.
        """
        if self._pending.closed:
            return
        self._pending.closed = True
        if self._call is None or self._reader is None or self._requests is None:
            return
        self._requests.put_nowait(None)
        done, _ = await asyncio.wait(
            {self._reader}, timeout=or_default(timeout, self._send_timeout)
        )
        if not done:
            self._call.cancel()
            await asyncio.wait({self._reader})

    async def cancel(self) -> None:
        """Cancels the stream at once; unanswered sends raise CANCELLED."""
        self._pending.closed = True
        if self._call is None or self._reader is None:
            return
        self._call.cancel()
        await asyncio.wait({self._reader})

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.aclose()
        else:
            await self.cancel()


async def _aiter(
    items: Iterable[AppendMessagesRequest] | AsyncIterable[AppendMessagesRequest],
) -> AsyncIterator[AppendMessagesRequest]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item
