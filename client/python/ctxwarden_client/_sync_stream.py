"""The blocking ``StreamMessages`` helper: a reader thread answers the senders."""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Self

from ._calls import MessagesArg, StateDeltaArg
from ._defaults import DEFAULT_COALESCE_WINDOW, DEFAULT_MESSAGE_VIEW, or_default
from ._errors import CtxwardenError
from ._streaming import (
    Batch,
    Pending,
    deadline_error,
    mergeable,
    stream_failure,
    stream_request,
    unexpected_response_error,
)
from .v1 import context_service_pb2, context_service_pb2_grpc

__all__ = ["MessageStream"]

AppendMessagesRequest = context_service_pb2.AppendMessagesRequest
AppendMessagesResponse = context_service_pb2.AppendMessagesResponse
_Future = concurrent.futures.Future[AppendMessagesResponse]


class MessageStream:
    """A blocking helper over the bidirectional ``StreamMessages`` RPC.

    :meth:`send` writes one AppendMessagesRequest and blocks until its response
    arrives. Several threads may send at once; at most ``max_in_flight``
    requests are unanswered at a time (further senders block). The server ends
    the stream on the first error; every later :meth:`send` raises that error.
    Use as a context manager or call :meth:`close`.

    ``coalesce`` and ``coalesce_window``: as for :class:`AsyncMessageStream`
    (plain appends to one session that queue up while earlier ones are
    unanswered go out as one request; a lone sender is never delayed).
    """

    def __init__(
        self,
        stub: context_service_pb2_grpc.ContextServiceStub,
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
        self._send_timeout = send_timeout
        self._max_in_flight = max_in_flight
        self._slots = threading.Semaphore(max_in_flight)
        self._lock = threading.Lock()
        self._pending: Pending[_Future] = Pending(self._slots, self._lock)
        self._requests: queue.SimpleQueue[AppendMessagesRequest | None] = queue.SimpleQueue()
        self._call = stub.StreamMessages(
            self._request_iterator(), timeout=stream_timeout, metadata=metadata
        )
        self._reader = threading.Thread(
            target=self._read, name="ctxwarden-stream-reader", daemon=True
        )
        self._reader.start()

    # -- background ----------------------------------------------------------

    def _request_iterator(self) -> Iterator[AppendMessagesRequest]:
        held: AppendMessagesRequest | None = None
        while True:
            request = held if held is not None else self._requests.get()
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
                try:
                    following = self._requests.get_nowait()
                except queue.Empty:
                    # Linger only while earlier requests are unanswered.
                    if lingered or not self._pending.in_flight or not self._coalesce_window:
                        break
                    lingered = True
                    time.sleep(self._coalesce_window)
                    continue
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

    def _read(self) -> None:
        error: CtxwardenError | None = None
        try:
            for response in self._call:
                if not self._pending.answer(response):
                    error = unexpected_response_error()
                    self._call.cancel()
                    break
        except Exception as exc:
            error = stream_failure(exc)
        # Unblocks grpc's request-consuming thread.
        self._pending.end(error, lambda: self._requests.put(None))

    # -- API -----------------------------------------------------------------

    def _remaining(self, deadline: float | None) -> float | None:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _submit(
        self, request: AppendMessagesRequest, deadline: float | None, timeout: float | None
    ) -> _Future:
        if not self._slots.acquire(timeout=self._remaining(deadline)):
            raise deadline_error(timeout)
        with self._lock:
            future = self._pending.add(concurrent.futures.Future())
            self._requests.put(request)
        return future

    def _wait(
        self, future: _Future, deadline: float | None, timeout: float | None
    ) -> AppendMessagesResponse:
        try:
            return future.result(self._remaining(deadline))
        except concurrent.futures.TimeoutError:
            raise deadline_error(timeout) from None

    def _deadline_for(self, timeout: float | None) -> tuple[float | None, float | None]:
        effective = or_default(timeout, self._send_timeout)
        return (None if effective is None else time.monotonic() + effective), effective

    def send(
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
        """Sends one append and blocks until its response arrives.

        Pass either a prepared ``AppendMessagesRequest`` or ``session_id`` and
        ``messages`` (plus the optional request fields: ``expected_last_seq``,
        ``request_id``, ``view``, ``state_delta``).
        """
        request = stream_request(
            session_id_or_request, messages, expected_last_seq, request_id, view, state_delta
        )
        deadline, effective = self._deadline_for(timeout)
        future = self._submit(request, deadline, effective)
        return self._wait(future, deadline, effective)

    def send_many(
        self, requests: Iterable[AppendMessagesRequest], *, timeout: float | None = None
    ) -> Iterator[AppendMessagesResponse]:
        """Pipelines ``requests`` (up to ``max_in_flight`` ahead) and yields the
        responses in order. ``timeout`` bounds each request."""
        window: deque[_Future] = deque()
        _, effective = self._deadline_for(timeout)
        for request in requests:
            while len(window) >= self._max_in_flight:
                deadline, _ = self._deadline_for(timeout)
                yield self._wait(window.popleft(), deadline, effective)
            deadline, _ = self._deadline_for(timeout)
            window.append(self._submit(request, deadline, effective))
        while window:
            deadline, _ = self._deadline_for(timeout)
            yield self._wait(window.popleft(), deadline, effective)

    @property
    def closed(self) -> bool:
        return self._pending.ended

    def close(self, timeout: float | None = None) -> None:
        """Ends the request stream and waits for the server to finish it.

        Waits at most ``timeout`` seconds (default: the send timeout), then cancels.
        """
        with self._lock:
            if self._pending.closed:
                return
            self._pending.closed = True
            self._requests.put(None)
        self._reader.join(or_default(timeout, self._send_timeout))
        if self._reader.is_alive():
            self._call.cancel()
            self._reader.join()

    def cancel(self) -> None:
        """Cancels the stream at once; unanswered sends raise CANCELLED."""
        with self._lock:
            self._pending.closed = True
            self._requests.put(None)
        self._call.cancel()
        self._reader.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.cancel()
