"""Blocking ctxwarden client over ``grpc``."""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import Self, TypeVar, Unpack

import grpc

from ctxwarden.v1 import context_service_pb2, context_service_pb2_grpc, message_pb2, session_pb2

from . import _common
from ._common import MessagesArg, RetryPolicy, SessionFields
from ._errors import CtxwardenError, error_from_rpc_error

__all__ = ["Client", "MessageStream"]

AppendMessagesRequest = context_service_pb2.AppendMessagesRequest
AppendMessagesResponse = context_service_pb2.AppendMessagesResponse

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")


class Client:
    """Blocking client for ``ctxwarden.v1.ContextService``.

    ``timeout`` is the default deadline in seconds of every call (``None``: no
    deadline); each method takes ``timeout=`` to override it. ``retries`` is how
    many times a failed call is retried: UNAVAILABLE always, DEADLINE_EXCEEDED
    only for read-only calls and calls carrying a ``request_id`` (0 disables).
    When ``channel`` is given it is used as is and not closed by :meth:`close`.
    """

    def __init__(
        self,
        target: str = _common.DEFAULT_TARGET,
        *,
        timeout: float | None = _common.DEFAULT_TIMEOUT,
        channel: grpc.Channel | None = None,
        metadata: Iterable[tuple[str, str]] = (),
        retries: int = _common.DEFAULT_RETRIES,
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self._owns_channel = channel is None
        self._channel = (
            grpc.insecure_channel(target, options=_common.CHANNEL_OPTIONS)
            if channel is None
            else channel
        )
        self._stub = context_service_pb2_grpc.ContextServiceStub(self._channel)
        self._timeout = timeout
        self._metadata = _common.normalize_metadata(metadata)
        self._retry = RetryPolicy(retries)
        self._inputs = _common.InputCache()
        self._closed = False

    # -- lifecycle -----------------------------------------------------------

    def close(self) -> None:
        """Closes the channel (unless it was passed in). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def channel(self) -> grpc.Channel:
        """The underlying ``grpc.Channel``."""
        return self._channel

    # -- plumbing ------------------------------------------------------------

    def _deadline(self, timeout: float | None) -> float | None:
        return self._timeout if timeout is None else timeout

    def _call(
        self,
        rpc: grpc.UnaryUnaryMultiCallable[_Req, _Resp],
        request: _Req,
        *,
        timeout: float | None,
        safe: bool,
    ) -> _Resp:
        attempt = 0
        while True:
            try:
                return rpc(request, timeout=self._deadline(timeout), metadata=self._metadata)
            except grpc.RpcError as exc:
                error = error_from_rpc_error(exc)
                if not self._retry.should_retry(error, attempt, safe):
                    raise error from exc
            time.sleep(self._retry.backoff(attempt))
            attempt += 1

    # -- sessions ------------------------------------------------------------

    def create_session(
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
        return self._call(self._stub.CreateSession, request, timeout=timeout, safe=bool(request_id))

    def get_session(self, session_id: str, *, timeout: float | None = None) -> session_pb2.Session:
        request = context_service_pb2.GetSessionRequest(session_id=session_id)
        return self._call(self._stub.GetSession, request, timeout=timeout, safe=True)

    def list_sessions(
        self,
        user_id: str = "",
        project_id: str = "",
        page_size: int = 0,
        *,
        timeout: float | None = None,
    ) -> Iterator[session_pb2.Session]:
        """Iterates over sessions, newest first, fetching pages lazily."""
        page_token = ""
        while True:
            request = context_service_pb2.ListSessionsRequest(
                user_id=user_id, project_id=project_id, page_size=page_size, page_token=page_token
            )
            page = self._call(self._stub.ListSessions, request, timeout=timeout, safe=True)
            yield from page.sessions
            page_token = page.next_page_token
            if not page_token:
                return

    def update_session(
        self,
        session: session_pb2.Session,
        update_mask: Sequence[str],
        etag: str = "",
        *,
        timeout: float | None = None,
    ) -> session_pb2.Session:
        """Updates the ``update_mask`` fields of ``session`` (named by its session_id)."""
        request = _common.update_session_request(session, update_mask, etag)
        return self._call(self._stub.UpdateSession, request, timeout=timeout, safe=False)

    def delete_session(self, session_id: str, *, timeout: float | None = None) -> None:
        request = context_service_pb2.DeleteSessionRequest(session_id=session_id)
        self._call(self._stub.DeleteSession, request, timeout=timeout, safe=False)

    # -- messages ------------------------------------------------------------

    def append_messages(
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
        return self._call(
            self._stub.AppendMessages, request, timeout=timeout, safe=bool(request_id)
        )

    def stream_messages(
        self,
        *,
        max_in_flight: int = _common.DEFAULT_MAX_IN_FLIGHT,
        timeout: float | None = None,
        stream_timeout: float | None = None,
    ) -> MessageStream:
        """Opens a ``StreamMessages`` stream.

        ``timeout`` bounds each :meth:`MessageStream.send` (default: the client's
        timeout); ``stream_timeout`` is the deadline of the whole stream (default:
        none). At most ``max_in_flight`` requests are unanswered at a time.
        """
        return MessageStream(
            self._stub,
            metadata=self._metadata,
            send_timeout=self._deadline(timeout),
            stream_timeout=stream_timeout,
            max_in_flight=max_in_flight,
        )

    def list_messages(
        self,
        session_id: str,
        include_rolled_back: bool = False,
        page_size: int = 0,
        *,
        timeout: float | None = None,
    ) -> Iterator[message_pb2.Message]:
        """Iterates over the session's history in seq order, fetching pages lazily."""
        page_token = ""
        while True:
            request = context_service_pb2.ListMessagesRequest(
                session_id=session_id,
                page_size=page_size,
                page_token=page_token,
                include_rolled_back=include_rolled_back,
            )
            page = self._call(self._stub.ListMessages, request, timeout=timeout, safe=True)
            yield from page.messages
            page_token = page.next_page_token
            if not page_token:
                return

    def build_model_input(
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
        received = self._call(self._stub.BuildModelInput, request, timeout=timeout, safe=True)
        if not incremental:
            return received
        return self._inputs.merge(session_id, received)

    def rollback_turn(
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
        return self._call(self._stub.RollbackTurn, request, timeout=timeout, safe=bool(request_id))

    # -- compaction ----------------------------------------------------------

    def compact(
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
        return self._call(self._stub.Compact, request, timeout=timeout, safe=bool(request_id))

    def prepare_compaction(
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
        return self._call(self._stub.PrepareCompaction, request, timeout=timeout, safe=True)

    def commit_compaction(
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
        return self._call(self._stub.CommitCompaction, request, timeout=timeout, safe=True)

    def list_compactions(
        self, session_id: str, page_size: int = 0, *, timeout: float | None = None
    ) -> Iterator[context_service_pb2.Compaction]:
        """Iterates over the session's checkpoints, newest first."""
        page_token = ""
        while True:
            request = context_service_pb2.ListCompactionsRequest(
                session_id=session_id, page_size=page_size, page_token=page_token
            )
            page = self._call(self._stub.ListCompactions, request, timeout=timeout, safe=True)
            yield from page.compactions
            page_token = page.next_page_token
            if not page_token:
                return

    def get_tool_output(
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
        return self._call(self._stub.GetToolOutput, request, timeout=timeout, safe=True)

    def count_tokens(
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
        return self._call(self._stub.CountTokens, request, timeout=timeout, safe=True)


class MessageStream:
    """A blocking helper over the bidirectional ``StreamMessages`` RPC.

    :meth:`send` writes one AppendMessagesRequest and blocks until its response
    arrives. Several threads may send at once; at most ``max_in_flight``
    requests are unanswered at a time (further senders block). The server ends
    the stream on the first error; every later :meth:`send` raises that error.
    Use as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        stub: context_service_pb2_grpc.ContextServiceStub,
        *,
        metadata: tuple[tuple[str, str], ...],
        send_timeout: float | None,
        stream_timeout: float | None,
        max_in_flight: int,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self._send_timeout = send_timeout
        self._max_in_flight = max_in_flight
        self._slots = threading.Semaphore(max_in_flight)
        self._lock = threading.Lock()
        self._requests: queue.SimpleQueue[AppendMessagesRequest | None] = queue.SimpleQueue()
        self._pending: deque[concurrent.futures.Future[AppendMessagesResponse]] = deque()
        self._error: CtxwardenError | None = None
        self._closed = False
        self._call = stub.StreamMessages(
            self._request_iterator(), timeout=stream_timeout, metadata=metadata
        )
        self._reader = threading.Thread(
            target=self._read, name="ctxwarden-stream-reader", daemon=True
        )
        self._reader.start()

    # -- background ----------------------------------------------------------

    def _request_iterator(self) -> Iterator[AppendMessagesRequest]:
        while True:
            request = self._requests.get()
            if request is None:
                return
            yield request

    def _read(self) -> None:
        error: CtxwardenError | None = None
        try:
            for response in self._call:
                with self._lock:
                    future = self._pending.popleft() if self._pending else None
                if future is None:
                    error = _common.unexpected_response_error()
                    self._call.cancel()
                    break
                self._slots.release()
                future.set_result(response)
        except grpc.RpcError as exc:
            error = error_from_rpc_error(exc)
        except Exception as exc:  # pragma: no cover - defensive
            error = CtxwardenError(f"StreamMessages failed: {exc!r}")
        with self._lock:
            if error is None:
                error = (
                    _common.unanswered_error(len(self._pending))
                    if self._pending
                    else _common.closed_error()
                )
            self._error = error
            pending = list(self._pending)
            self._pending.clear()
            self._requests.put(None)  # unblock grpc's request-consuming thread
        for future in pending:
            self._slots.release()
            future.set_exception(_common.clone_error(error))

    # -- API -----------------------------------------------------------------

    def _remaining(self, deadline: float | None) -> float | None:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _submit(
        self, request: AppendMessagesRequest, deadline: float | None, timeout: float | None
    ) -> concurrent.futures.Future[AppendMessagesResponse]:
        remaining = self._remaining(deadline)
        if not self._slots.acquire(timeout=remaining):
            raise _common.deadline_error("StreamMessages send", timeout)
        with self._lock:
            if self._error is not None or self._closed:
                self._slots.release()
                if self._error is not None:
                    raise _common.clone_error(self._error)
                raise _common.closed_error()
            future: concurrent.futures.Future[AppendMessagesResponse] = concurrent.futures.Future()
            self._pending.append(future)
            self._requests.put(request)
        return future

    def _wait(
        self,
        future: concurrent.futures.Future[AppendMessagesResponse],
        deadline: float | None,
        timeout: float | None,
    ) -> AppendMessagesResponse:
        try:
            return future.result(self._remaining(deadline))
        except concurrent.futures.TimeoutError:
            raise _common.deadline_error("StreamMessages send", timeout) from None

    def _deadline_for(self, timeout: float | None) -> tuple[float | None, float | None]:
        effective = self._send_timeout if timeout is None else timeout
        return (None if effective is None else time.monotonic() + effective), effective

    def send(
        self,
        session_id_or_request: str | AppendMessagesRequest,
        messages: MessagesArg = (),
        *,
        expected_last_seq: int | None = None,
        request_id: str = "",
        timeout: float | None = None,
    ) -> AppendMessagesResponse:
        """Sends one append and blocks until its response arrives.

        Pass either a prepared ``AppendMessagesRequest`` or ``session_id`` and
        ``messages`` (plus the optional request fields).
        """
        request = _common.stream_request(
            session_id_or_request, messages, expected_last_seq, request_id
        )
        deadline, effective = self._deadline_for(timeout)
        future = self._submit(request, deadline, effective)
        return self._wait(future, deadline, effective)

    def send_many(
        self, requests: Iterable[AppendMessagesRequest], *, timeout: float | None = None
    ) -> Iterator[AppendMessagesResponse]:
        """Pipelines ``requests`` (up to ``max_in_flight`` ahead) and yields the
        responses in order. ``timeout`` bounds each request."""
        window: deque[concurrent.futures.Future[AppendMessagesResponse]] = deque()
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
        return self._closed or self._error is not None

    def close(self, timeout: float | None = None) -> None:
        """Ends the request stream and waits for the server to finish it.

        Waits at most ``timeout`` seconds (default: the send timeout), then cancels.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._requests.put(None)
        wait = self._send_timeout if timeout is None else timeout
        self._reader.join(wait)
        if self._reader.is_alive():
            self._call.cancel()
            self._reader.join()

    def cancel(self) -> None:
        """Cancels the stream at once; unanswered sends raise CANCELLED."""
        with self._lock:
            self._closed = True
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
