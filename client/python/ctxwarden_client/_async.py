"""asyncio ctxwarden client over ``grpc.aio``."""

# ``timeout=`` parameters are gRPC deadlines (and per-send waits), part of the
# public API shared with the sync client, not asyncio cancellation scopes.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeVar, Unpack

import grpc
import grpc.aio

from ctxwarden.v1 import context_service_pb2, context_service_pb2_grpc, message_pb2, session_pb2

from . import _common
from ._common import MessagesArg, RetryPolicy, SessionFields
from ._errors import CtxwardenError, error_from_rpc_error

__all__ = ["AsyncClient", "AsyncMessageStream"]

AppendMessagesRequest = context_service_pb2.AppendMessagesRequest
AppendMessagesResponse = context_service_pb2.AppendMessagesResponse

if TYPE_CHECKING:  # typing-only class from the generated .pyi
    from ctxwarden.v1.context_service_pb2_grpc import ContextServiceAsyncStub

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")


class AsyncClient:
    """asyncio client for ``ctxwarden.v1.ContextService`` (``grpc.aio``).

    Same methods as :class:`ctxwarden_client.Client`, as coroutines; the list
    methods return async iterators. ``timeout`` is the default deadline in
    seconds of every call (``None``: no deadline), overridable per call with
    ``timeout=``. ``retries`` is how many times a failed call is retried:
    UNAVAILABLE always, DEADLINE_EXCEEDED only for read-only calls and calls
    carrying a ``request_id`` (0 disables). The channel is created on first use
    (inside the running event loop); a ``channel`` passed in is used as is and
    not closed by :meth:`close`.
    """

    def __init__(
        self,
        target: str = _common.DEFAULT_TARGET,
        *,
        timeout: float | None = _common.DEFAULT_TIMEOUT,
        channel: grpc.aio.Channel | None = None,
        metadata: Iterable[tuple[str, str]] = (),
        retries: int = _common.DEFAULT_RETRIES,
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self._target = target
        self._owns_channel = channel is None
        self._channel = channel
        self._stub: ContextServiceAsyncStub | None = (
            None if channel is None else context_service_pb2_grpc.ContextServiceStub(channel)
        )
        self._timeout = timeout
        self._metadata = _common.normalize_metadata(metadata)
        self._retry = RetryPolicy(retries)
        self._inputs = _common.InputCache()
        self._closed = False

    # -- lifecycle -----------------------------------------------------------

    def _get_stub(self) -> ContextServiceAsyncStub:
        if self._closed:
            raise RuntimeError("the client is closed")
        if self._stub is None:
            channel = grpc.aio.insecure_channel(self._target, options=_common.CHANNEL_OPTIONS)
            self._channel = channel
            self._stub = context_service_pb2_grpc.ContextServiceStub(channel)
        return self._stub

    @property
    def channel(self) -> grpc.aio.Channel:
        """The underlying ``grpc.aio.Channel`` (created on first use)."""
        self._get_stub()
        assert self._channel is not None
        return self._channel

    async def close(self) -> None:
        """Closes the channel (unless it was passed in). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_channel and self._channel is not None:
            await self._channel.close()

    async def __aenter__(self) -> Self:
        self._get_stub()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- plumbing ------------------------------------------------------------

    def _deadline(self, timeout: float | None) -> float | None:
        return self._timeout if timeout is None else timeout

    async def _call(
        self,
        rpc: grpc.aio.UnaryUnaryMultiCallable[_Req, _Resp],
        request: _Req,
        *,
        timeout: float | None,
        safe: bool,
    ) -> _Resp:
        attempt = 0
        while True:
            try:
                return await rpc(request, timeout=self._deadline(timeout), metadata=self._metadata)
            except grpc.RpcError as exc:
                error = error_from_rpc_error(exc)
                if not self._retry.should_retry(error, attempt, safe):
                    raise error from exc
            await asyncio.sleep(self._retry.backoff(attempt))
            attempt += 1

    # -- sessions ------------------------------------------------------------

    async def create_session(
        self,
        session: session_pb2.Session | None = None,
        *,
        session_id: str = "",
        request_id: str = "",
        timeout: float | None = None,
        **session_fields: Unpack[SessionFields],
    ) -> session_pb2.Session:
        """Creates a session from ``session`` or from Session fields as keywords."""
        request = _common.create_session_request(session, session_id, request_id, session_fields)
        return await self._call(
            self._get_stub().CreateSession, request, timeout=timeout, safe=bool(request_id)
        )

    async def get_session(
        self, session_id: str, *, timeout: float | None = None
    ) -> session_pb2.Session:
        request = context_service_pb2.GetSessionRequest(session_id=session_id)
        return await self._call(self._get_stub().GetSession, request, timeout=timeout, safe=True)

    async def list_sessions(
        self,
        user_id: str = "",
        project_id: str = "",
        page_size: int = 0,
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[session_pb2.Session]:
        """Iterates over sessions, newest first, fetching pages lazily."""
        page_token = ""
        while True:
            request = context_service_pb2.ListSessionsRequest(
                user_id=user_id, project_id=project_id, page_size=page_size, page_token=page_token
            )
            page = await self._call(
                self._get_stub().ListSessions, request, timeout=timeout, safe=True
            )
            for session in page.sessions:
                yield session
            page_token = page.next_page_token
            if not page_token:
                return

    async def update_session(
        self,
        session: session_pb2.Session,
        update_mask: Sequence[str],
        etag: str = "",
        *,
        timeout: float | None = None,
    ) -> session_pb2.Session:
        """Updates the ``update_mask`` fields of ``session`` (named by its session_id)."""
        request = _common.update_session_request(session, update_mask, etag)
        return await self._call(
            self._get_stub().UpdateSession, request, timeout=timeout, safe=False
        )

    async def delete_session(self, session_id: str, *, timeout: float | None = None) -> None:
        request = context_service_pb2.DeleteSessionRequest(session_id=session_id)
        await self._call(self._get_stub().DeleteSession, request, timeout=timeout, safe=False)

    # -- messages ------------------------------------------------------------

    async def append_messages(
        self,
        session_id: str,
        messages: MessagesArg,
        *,
        expected_last_seq: int | None = None,
        request_id: str = "",
        timeout: float | None = None,
    ) -> context_service_pb2.AppendMessagesResponse:
        """Appends one message or a sequence of messages, durably."""
        request = _common.append_request(session_id, messages, expected_last_seq, request_id)
        return await self._call(
            self._get_stub().AppendMessages, request, timeout=timeout, safe=bool(request_id)
        )

    def stream_messages(
        self,
        *,
        max_in_flight: int = _common.DEFAULT_MAX_IN_FLIGHT,
        timeout: float | None = None,
        stream_timeout: float | None = None,
    ) -> AsyncMessageStream:
        """Returns a ``StreamMessages`` helper; the RPC starts on first use.

        ``timeout`` bounds each :meth:`AsyncMessageStream.send` (default: the
        client's timeout); ``stream_timeout`` is the deadline of the whole stream
        (default: none). At most ``max_in_flight`` requests are unanswered at a
        time; further senders wait (back-pressure).
        """
        return AsyncMessageStream(
            self._get_stub,
            metadata=self._metadata,
            send_timeout=self._deadline(timeout),
            stream_timeout=stream_timeout,
            max_in_flight=max_in_flight,
        )

    async def list_messages(
        self,
        session_id: str,
        include_rolled_back: bool = False,
        page_size: int = 0,
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[message_pb2.Message]:
        """Iterates over the session's history in seq order, fetching pages lazily."""
        page_token = ""
        while True:
            request = context_service_pb2.ListMessagesRequest(
                session_id=session_id,
                page_size=page_size,
                page_token=page_token,
                include_rolled_back=include_rolled_back,
            )
            page = await self._call(
                self._get_stub().ListMessages, request, timeout=timeout, safe=True
            )
            for message in page.messages:
                yield message
            page_token = page.next_page_token
            if not page_token:
                return

    async def build_model_input(
        self,
        session_id: str,
        max_output_tokens: int = 0,
        *,
        auto_compact: bool = False,
        incremental: bool = False,
        format: context_service_pb2.ModelInputFormat.ValueType = _common.NO_FORMAT,
        view: context_service_pb2.ModelInputView.ValueType = _common.DEFAULT_VIEW,
        timeout: float | None = None,
    ) -> context_service_pb2.ModelInput:
        """Returns exactly what to send to the model next (compacting first with
        ``auto_compact`` when the input would cross the threshold).

        ``format`` (e.g. ``MODEL_INPUT_FORMAT_OPENAI_CHAT``) also renders it into
        ``rendered_json``; the native ``messages`` then stay empty unless ``view``
        is ``MODEL_INPUT_VIEW_FULL``.

        ``incremental``: the client keeps the session's last input and the
        server sends only the messages it does not hold yet (a few KB instead
        of the whole history). The result is the same complete input; it is
        the cached object, updated in place by the next incremental call for
        this session, so copy it if you keep it longer."""
        request = context_service_pb2.BuildModelInputRequest(
            session_id=session_id,
            max_output_tokens=max_output_tokens,
            auto_compact=auto_compact,
            format=format,
            view=view,
        )
        if incremental:
            request.resume_token = self._inputs.token(session_id)
        received = await self._call(
            self._get_stub().BuildModelInput, request, timeout=timeout, safe=True
        )
        if not incremental:
            return received
        return self._inputs.merge(session_id, received)

    async def rollback_turn(
        self,
        session_id: str,
        *,
        to_seq: int | None = None,
        error_message: str = "",
        request_id: str = "",
        timeout: float | None = None,
    ) -> context_service_pb2.RollbackTurnResponse:
        """Rolls back the trailing failed turn (or everything after ``to_seq``)."""
        request = _common.rollback_request(session_id, to_seq, error_message, request_id)
        return await self._call(
            self._get_stub().RollbackTurn, request, timeout=timeout, safe=bool(request_id)
        )

    # -- compaction ----------------------------------------------------------

    async def compact(
        self,
        session_id: str,
        *,
        instructions: str = "",
        keep_recent_tokens: int = 0,
        request_id: str = "",
        trigger: context_service_pb2.CompactionTrigger.ValueType = (
            context_service_pb2.COMPACTION_TRIGGER_UNSPECIFIED
        ),
        timeout: float | None = None,
    ) -> context_service_pb2.Compaction:
        """Compacts with the server's summariser (needs ``serve --summarizer``)."""
        request = context_service_pb2.CompactRequest(
            session_id=session_id,
            instructions=instructions,
            keep_recent_tokens=keep_recent_tokens,
            request_id=request_id,
            trigger=trigger,
        )
        return await self._call(
            self._get_stub().Compact, request, timeout=timeout, safe=bool(request_id)
        )

    async def prepare_compaction(
        self,
        session_id: str,
        *,
        instructions: str = "",
        keep_recent_tokens: int = 0,
        timeout: float | None = None,
    ) -> context_service_pb2.CompactionPlan:
        """Plans a compaction whose summary the agent's own LLM writes."""
        request = context_service_pb2.PrepareCompactionRequest(
            session_id=session_id,
            instructions=instructions,
            keep_recent_tokens=keep_recent_tokens,
        )
        return await self._call(
            self._get_stub().PrepareCompaction, request, timeout=timeout, safe=True
        )

    async def commit_compaction(
        self,
        session_id: str,
        plan_id: str,
        summary: str,
        *,
        turn_prefix_summary: str = "",
        timeout: float | None = None,
    ) -> context_service_pb2.Compaction:
        """Commits a plan with the LLM's answers (idempotent per plan, so retried)."""
        request = context_service_pb2.CommitCompactionRequest(
            session_id=session_id,
            plan_id=plan_id,
            summary=summary,
            turn_prefix_summary=turn_prefix_summary,
        )
        return await self._call(
            self._get_stub().CommitCompaction, request, timeout=timeout, safe=True
        )

    async def list_compactions(
        self, session_id: str, page_size: int = 0, *, timeout: float | None = None
    ) -> AsyncIterator[context_service_pb2.Compaction]:
        """Iterates over the session's checkpoints, newest first."""
        page_token = ""
        while True:
            request = context_service_pb2.ListCompactionsRequest(
                session_id=session_id, page_size=page_size, page_token=page_token
            )
            page = await self._call(
                self._get_stub().ListCompactions, request, timeout=timeout, safe=True
            )
            for item in page.compactions:
                yield item
            page_token = page.next_page_token
            if not page_token:
                return

    async def get_tool_output(
        self,
        session_id: str,
        seq: int,
        *,
        offset: int = 0,
        limit: int = 0,
        timeout: float | None = None,
    ) -> context_service_pb2.GetToolOutputResponse:
        """Reads a byte range of a stored tool result (e.g. one the input truncated)."""
        request = context_service_pb2.GetToolOutputRequest(
            session_id=session_id, seq=seq, offset=offset, limit=limit
        )
        return await self._call(self._get_stub().GetToolOutput, request, timeout=timeout, safe=True)

    async def count_tokens(
        self,
        model: str = "",
        *,
        messages: MessagesArg = (),
        tools: Iterable[session_pb2.ToolDefinition] = (),
        text: str = "",
        tokenizer: str = "",
        timeout: float | None = None,
    ) -> context_service_pb2.CountTokensResponse:
        """Counts the tokens of messages, tool definitions and text with a model's tokenizer.

        ``tokenizer`` overrides the model's ("heuristic", "tiktoken:o200k_base", ...).
        """
        request = _common.count_tokens_request(model, messages, tools, text, tokenizer)
        return await self._call(self._get_stub().CountTokens, request, timeout=timeout, safe=True)


class AsyncMessageStream:
    """An asyncio helper over the bidirectional ``StreamMessages`` RPC.

    ``await stream.send(...)`` writes one AppendMessagesRequest and waits for
    its response. Many tasks may send concurrently; requests go out in the
    order ``send`` was called and at most ``max_in_flight`` are unanswered at a
    time (further senders wait). The server ends the stream on the first error;
    every later ``send`` raises it. Use ``async with`` or call :meth:`aclose`.
    """

    def __init__(
        self,
        get_stub: Callable[[], ContextServiceAsyncStub],
        *,
        metadata: tuple[tuple[str, str], ...],
        send_timeout: float | None,
        stream_timeout: float | None,
        max_in_flight: int,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self._get_stub = get_stub
        self._metadata = metadata
        self._send_timeout = send_timeout
        self._stream_timeout = stream_timeout
        self._max_in_flight = max_in_flight
        self._slots: asyncio.Semaphore | None = None
        self._requests: asyncio.Queue[AppendMessagesRequest | None] | None = None
        self._pending: deque[asyncio.Future[AppendMessagesResponse]] = deque()
        self._call: (
            grpc.aio.StreamStreamCall[AppendMessagesRequest, AppendMessagesResponse] | None
        ) = None
        self._reader: asyncio.Task[None] | None = None
        self._error: CtxwardenError | None = None
        self._closed = False

    # -- background ----------------------------------------------------------

    def _start(self) -> None:
        if self._call is not None:
            return
        slots = self._slots = asyncio.Semaphore(self._max_in_flight)
        requests: asyncio.Queue[AppendMessagesRequest | None] = asyncio.Queue()
        self._requests = requests
        call = self._call = self._get_stub().StreamMessages(
            self._request_iterator(requests),
            timeout=self._stream_timeout,
            metadata=self._metadata,
        )
        self._reader = asyncio.get_running_loop().create_task(
            self._read(call, slots, requests), name="ctxwarden-stream-reader"
        )

    @staticmethod
    async def _request_iterator(
        requests: asyncio.Queue[AppendMessagesRequest | None],
    ) -> AsyncIterator[AppendMessagesRequest]:
        while True:
            request = await requests.get()
            if request is None:
                return
            yield request

    async def _read(
        self,
        call: grpc.aio.StreamStreamCall[AppendMessagesRequest, AppendMessagesResponse],
        slots: asyncio.Semaphore,
        requests: asyncio.Queue[AppendMessagesRequest | None],
    ) -> None:
        error: CtxwardenError | None = None
        reraise = False
        try:
            while True:
                response = await call.read()
                if not isinstance(response, AppendMessagesResponse):  # grpc.aio.EOF
                    break
                if not self._pending:
                    error = _common.unexpected_response_error()
                    call.cancel()
                    break
                future = self._pending.popleft()
                slots.release()
                if not future.done():
                    future.set_result(response)
        except grpc.RpcError as exc:
            error = error_from_rpc_error(exc)
        except asyncio.CancelledError:
            # Either this task was cancelled (re-raise after cleanup) or the
            # call was cancelled locally, which grpc.aio reports the same way.
            task = asyncio.current_task()
            reraise = task is not None and task.cancelling() > 0
            error = _common.closed_error()
        except Exception as exc:  # pragma: no cover - defensive
            error = CtxwardenError(f"StreamMessages failed: {exc!r}")
        if error is None:
            error = (
                _common.unanswered_error(len(self._pending))
                if self._pending
                else _common.closed_error()
            )
        self._error = error
        requests.put_nowait(None)  # let the request iterator finish
        while self._pending:
            future = self._pending.popleft()
            slots.release()
            if not future.done():
                future.set_exception(_common.clone_error(error))
        if reraise:
            raise asyncio.CancelledError

    # -- API -----------------------------------------------------------------

    async def _submit(
        self, request: AppendMessagesRequest
    ) -> asyncio.Future[AppendMessagesResponse]:
        if self._closed and self._error is None:
            raise _common.closed_error()
        self._start()
        assert self._slots is not None
        assert self._requests is not None
        await self._slots.acquire()
        # No await from here on, so the queue order and the pending order match.
        if self._error is not None or self._closed:
            self._slots.release()
            if self._error is not None:
                raise _common.clone_error(self._error)
            raise _common.closed_error()
        future: asyncio.Future[AppendMessagesResponse] = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        self._requests.put_nowait(request)
        return future

    def _timeout(self, timeout: float | None) -> float | None:
        return self._send_timeout if timeout is None else timeout

    async def send(
        self,
        session_id_or_request: str | AppendMessagesRequest,
        messages: MessagesArg = (),
        *,
        expected_last_seq: int | None = None,
        request_id: str = "",
        timeout: float | None = None,
    ) -> AppendMessagesResponse:
        """Sends one append and waits for its response.

        Pass either a prepared ``AppendMessagesRequest`` or ``session_id`` and
        ``messages`` (plus the optional request fields). Waits first for a free
        slot when ``max_in_flight`` requests are unanswered.
        """
        request = _common.stream_request(
            session_id_or_request, messages, expected_last_seq, request_id
        )
        effective = self._timeout(timeout)
        try:
            async with asyncio.timeout(effective):
                future = await self._submit(request)
                return await future
        except TimeoutError:
            raise _common.deadline_error("StreamMessages send", effective) from None

    async def send_many(
        self,
        requests: Iterable[AppendMessagesRequest] | AsyncIterable[AppendMessagesRequest],
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[AppendMessagesResponse]:
        """Pipelines ``requests`` (up to ``max_in_flight`` ahead) and yields the
        responses in order. ``timeout`` bounds each request."""
        effective = self._timeout(timeout)
        window: deque[asyncio.Future[AppendMessagesResponse]] = deque()

        async def wait(future: asyncio.Future[AppendMessagesResponse]) -> AppendMessagesResponse:
            try:
                async with asyncio.timeout(effective):
                    return await future
            except TimeoutError:
                raise _common.deadline_error("StreamMessages send", effective) from None

        async def submit(request: AppendMessagesRequest) -> asyncio.Future[AppendMessagesResponse]:
            try:
                async with asyncio.timeout(effective):
                    return await self._submit(request)
            except TimeoutError:
                raise _common.deadline_error("StreamMessages send", effective) from None

        async def iterate() -> AsyncIterator[AppendMessagesRequest]:
            if isinstance(requests, AsyncIterable):
                async for request in requests:
                    yield request
            else:
                for request in requests:
                    yield request

        async for request in iterate():
            while len(window) >= self._max_in_flight:
                yield await wait(window.popleft())
            window.append(await submit(request))
        while window:
            yield await wait(window.popleft())

    @property
    def closed(self) -> bool:
        return self._closed or self._error is not None

    async def aclose(self, timeout: float | None = None) -> None:
        """Ends the request stream and waits for the server to finish it.

        Waits at most ``timeout`` seconds (default: the send timeout), then cancels.
        """
        if self._closed:
            return
        self._closed = True
        if self._call is None or self._reader is None or self._requests is None:
            return
        self._requests.put_nowait(None)
        wait = self._send_timeout if timeout is None else timeout
        done, _ = await asyncio.wait({self._reader}, timeout=wait)
        if not done:
            self._call.cancel()
            await asyncio.wait({self._reader})

    async def cancel(self) -> None:
        """Cancels the stream at once; unanswered sends raise CANCELLED."""
        self._closed = True
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
