"""asyncio ctxwarden client over ``grpc.aio``."""

# ``timeout=`` parameters are gRPC deadlines (and per-send waits), part of the
# public API shared with the sync client, not asyncio cancellation scopes.
# ruff: noqa: ASYNC109

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Self, Unpack

import grpc
import grpc.aio
from google.protobuf.timestamp_pb2 import Timestamp

from . import _calls, _defaults, _pagination
from ._async_rpc import AsyncRpc
from ._async_stream import AsyncMessageStream
from ._calls import MessagesArg, SessionFields, StateDeltaArg
from ._lifecycle import AsyncLifecycle
from ._memory_client import AsyncMemoryMethods
from .v1 import context_service_pb2, context_service_pb2_grpc, memory_pb2, message_pb2, session_pb2

if TYPE_CHECKING:  # typing-only class from the generated .pyi
    from .v1.context_service_pb2_grpc import ContextServiceAsyncStub

__all__ = ["AsyncClient"]


class AsyncClient(AsyncMemoryMethods, AsyncRpc, AsyncLifecycle):
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
        target: str = _defaults.DEFAULT_TARGET,
        *,
        timeout: float | None = _defaults.DEFAULT_TIMEOUT,
        channel: grpc.aio.Channel | None = None,
        metadata: Iterable[tuple[str, str]] = (),
        retries: int = _defaults.DEFAULT_RETRIES,
    ) -> None:
        super().__init__(timeout, metadata, retries)
        self._target = target
        self._owns_channel = channel is None
        self._channel = channel
        self._stub: ContextServiceAsyncStub | None = (
            None if channel is None else context_service_pb2_grpc.ContextServiceStub(channel)
        )

    # -- lifecycle -----------------------------------------------------------

    def _get_stub(self) -> ContextServiceAsyncStub:
        if self._closed:
            raise RuntimeError("the client is closed")
        if self._stub is None:
            channel = grpc.aio.insecure_channel(self._target, options=_defaults.CHANNEL_OPTIONS)
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

    # -- sessions ------------------------------------------------------------

    async def create_session(
        self,
        session: session_pb2.Session | None = None,
        *,
        session_id: str = "",
        request_id: str = "",
        state: Mapping[str, object] | None = None,
        timeout: float | None = None,
        **session_fields: Unpack[SessionFields],
    ) -> session_pb2.Session:
        """Creates a session from ``session`` or from Session fields as keywords;
        ``state``: its initial JSON object state."""
        call = _calls.create_session(session, session_id, request_id, session_fields, state)
        return await self._call(call, timeout)

    async def get_session(
        self, session_id: str, *, timeout: float | None = None
    ) -> session_pb2.Session:
        return await self._call(_calls.get_session(session_id), timeout)

    async def list_sessions(
        self,
        user_id: str = "",
        project_id: str = "",
        page_size: int = 0,
        *,
        page_token: str = "",
        parent_session_id: str = "",
        show_archived: bool = False,
        timeout: float | None = None,
    ) -> AsyncIterator[session_pb2.Session]:
        """Iterates over sessions, newest first, fetching pages lazily.

        ``page_token`` starts the listing at that page (a ``next_page_token`` of an
        earlier ListSessions with the same filters) instead of the first one;
        ``parent_session_id``: only the forks of that session; ``show_archived``
        lists archived sessions too."""
        async for item in self._pages(
            _pagination.list_sessions(
                user_id, project_id, page_size, page_token, parent_session_id, show_archived
            ),
            timeout,
        ):
            yield item

    async def update_session(
        self,
        session: session_pb2.Session,
        update_mask: Sequence[str],
        etag: str = "",
        *,
        timeout: float | None = None,
    ) -> session_pb2.Session:
        """Updates the ``update_mask`` fields of ``session`` (named by its session_id)."""
        return await self._call(_calls.update_session(session, update_mask, etag), timeout)

    async def fork_session(
        self,
        session_id: str,
        at_seq: int = 0,
        *,
        new_session_id: str = "",
        request_id: str = "",
        timeout: float | None = None,
    ) -> session_pb2.Session:
        """Forks the session as it was just before message ``at_seq`` was appended
        (0: at its end); the fork shares that history and then diverges."""
        call = _calls.fork_session(session_id, at_seq, new_session_id, request_id)
        return await self._call(call, timeout)

    async def delete_session(self, session_id: str, *, timeout: float | None = None) -> None:
        await self._call(_calls.delete_session(session_id), timeout)

    # -- messages ------------------------------------------------------------

    async def append_messages(
        self,
        session_id: str,
        messages: MessagesArg,
        *,
        expected_last_seq: int | None = None,
        request_id: str = "",
        view: context_service_pb2.MessageView.ValueType = _defaults.DEFAULT_MESSAGE_VIEW,
        state_delta: StateDeltaArg = None,
        timeout: float | None = None,
    ) -> context_service_pb2.AppendMessagesResponse:
        """Appends one message or a sequence of messages, durably.

        ``view=MESSAGE_VIEW_BASIC`` leaves the content out of the stored messages
        the response carries (seq, message_id and token_count are still there).
        ``state_delta`` (:func:`state_delta`) changes states atomically with it."""
        call = _calls.append_messages(
            session_id, messages, expected_last_seq, request_id, view, state_delta
        )
        return await self._call(call, timeout)

    async def append_model_output(
        self,
        session_id: str,
        format: context_service_pb2.ModelInputFormat.ValueType,
        *,
        response_json: object = None,
        items_json: object = None,
        expected_last_seq: int | None = None,
        request_id: str = "",
        view: context_service_pb2.MessageView.ValueType = _defaults.DEFAULT_MESSAGE_VIEW,
        timeout: float | None = None,
    ) -> context_service_pb2.AppendMessagesResponse:
        """Appends what the model returned, as the provider returned it.

        ``response_json``: the provider's response body (or the list of the event
        payloads of one streamed call); ``items_json``: input items in that format
        (tool results, user messages). Either as JSON text or as a value
        ``json.dumps`` can write (e.g. an SDK object's ``model_dump()``).
        ``format`` is the provider's ``MODEL_INPUT_FORMAT_*``."""
        call = _calls.append_model_output(
            session_id, format, response_json, items_json, expected_last_seq, request_id, view
        )
        return await self._call(call, timeout)

    def stream_messages(
        self,
        *,
        max_in_flight: int = _defaults.DEFAULT_MAX_IN_FLIGHT,
        timeout: float | None = None,
        stream_timeout: float | None = None,
        coalesce: bool = True,
        coalesce_window: float = _defaults.DEFAULT_COALESCE_WINDOW,
    ) -> AsyncMessageStream:
        """Returns a ``StreamMessages`` helper; the RPC starts on first use.

        ``timeout`` bounds each :meth:`AsyncMessageStream.send` (default: the
        client's timeout); ``stream_timeout`` is the deadline of the whole stream
        (default: none). At most ``max_in_flight`` requests are unanswered at a
        time; further senders wait (back-pressure). ``coalesce`` (default on): plain
        appends to one session that queue up while earlier ones are unanswered go out
        as one request (``coalesce_window``: the longest wait for company, in
        seconds); each send still gets its own response.
        """
        return AsyncMessageStream(
            self._get_stub,
            metadata=self._metadata,
            send_timeout=self._deadline(timeout),
            stream_timeout=stream_timeout,
            max_in_flight=max_in_flight,
            coalesce=coalesce,
            coalesce_window=coalesce_window,
        )

    async def list_messages(
        self,
        session_id: str,
        include_rolled_back: bool = False,
        page_size: int = 0,
        *,
        page_token: str = "",
        newest_first: bool = False,
        after_seq: int | None = None,
        after_time: datetime | Timestamp | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[message_pb2.Message]:
        """Iterates over the session's history in seq order, fetching pages lazily.

        ``page_token`` starts at that page (a ``next_page_token`` of an earlier
        ListMessages with the same other fields) instead of the first one.
        ``newest_first``: newest first; ``after_seq``, ``after_time``: only later ones."""
        pages = _pagination.list_messages(
            session_id,
            include_rolled_back,
            page_size,
            page_token,
            newest_first,
            after_seq,
            after_time,
        )
        async for item in self._pages(pages, timeout):
            yield item

    async def build_model_input(
        self,
        session_id: str,
        max_output_tokens: int = 0,
        *,
        auto_compact: bool = False,
        incremental: bool = False,
        format: context_service_pb2.ModelInputFormat.ValueType = _defaults.NO_FORMAT,
        view: context_service_pb2.ModelInputView.ValueType = _defaults.DEFAULT_VIEW,
        as_of_seq: int | None = None,
        resume_token: str = "",
        refresh_memory: bool = False,
        report_cache_prefix: bool = False,
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
        this session, so copy it if you keep it longer.

        ``as_of_seq`` replays the input exactly as it was just before message
        ``as_of_seq`` was appended. ``resume_token`` (the ``resume_token`` of an
        input you hold) asks for only what changed: the answer's messages then
        start at index ``messages_offset`` of that input, and merging is up to
        you (``incremental`` does it for you; it takes neither of the two).
        ``report_cache_prefix`` sets ``cache_prefix``: what the input shares with
        the previous one of the session and format (the cache ledger)."""
        cache = self._cache_for(incremental)
        call = _calls.build_model_input(
            session_id,
            max_output_tokens,
            auto_compact,
            format,
            view,
            as_of_seq,
            resume_token,
            cache,
            refresh_memory,
            report_cache_prefix,
        )
        return await self._call(call, timeout)

    async def rollback_turn(
        self,
        session_id: str,
        *,
        to_seq: int | None = None,
        error_message: str = "",
        request_id: str = "",
        provider_error: context_service_pb2.ProviderError | None = None,
        expected_last_seq: int | None = None,
        timeout: float | None = None,
    ) -> context_service_pb2.RollbackTurnResponse:
        """Rolls back the trailing failed turn (or everything after ``to_seq``).

        ``provider_error``: the provider's raw error (see :func:`provider_error`),
        classified by its codes and retry headers before ``error_message``.
        ``expected_last_seq``: only if it is the last_seq (else AbortedError)."""
        call = _calls.rollback_turn(
            session_id, to_seq, error_message, request_id, provider_error, expected_last_seq
        )
        return await self._call(call, timeout)

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
        call = _calls.compact(session_id, instructions, keep_recent_tokens, request_id, trigger)
        return await self._call(call, timeout)

    async def prepare_compaction(
        self,
        session_id: str,
        *,
        instructions: str = "",
        keep_recent_tokens: int = 0,
        summarizer_context_window: int = 0,
        timeout: float | None = None,
    ) -> context_service_pb2.CompactionPlan:
        """Plans a compaction whose summary the agent's own LLM writes. With
        ``summarizer_context_window`` (that LLM's window), a history too long
        for one prompt is planned in steps: commit each one and continue with
        the answer's ``next_plan`` until it is unset."""
        call = _calls.prepare_compaction(
            session_id, instructions, keep_recent_tokens, summarizer_context_window
        )
        return await self._call(call, timeout)

    async def commit_compaction(
        self,
        session_id: str,
        plan_id: str,
        summary: str,
        *,
        turn_prefix_summary: str = "",
        proposed_memories: Iterable[memory_pb2.ProposedMemory] = (),
        min_anchor_survival: Iterable[context_service_pb2.AnchorSurvival] = (),
        timeout: float | None = None,
    ) -> context_service_pb2.Compaction:
        """Commits a plan with the LLM's answers (idempotent per plan, so retried);
        with ``min_anchor_survival``, FAILED_PRECONDITION ANCHORS_LOST refuses a
        summary that loses too many anchors (the plan stays valid)."""
        call = _calls.commit_compaction(
            session_id,
            plan_id,
            summary,
            turn_prefix_summary,
            proposed_memories,
            min_anchor_survival,
        )
        return await self._call(call, timeout)

    async def list_compactions(
        self,
        session_id: str,
        page_size: int = 0,
        *,
        page_token: str = "",
        timeout: float | None = None,
    ) -> AsyncIterator[context_service_pb2.Compaction]:
        """Iterates over the session's checkpoints, newest first (from ``page_token``'s page)."""
        pages = _pagination.list_compactions(session_id, page_size, page_token)
        async for item in self._pages(pages, timeout):
            yield item

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
        return await self._call(_calls.get_tool_output(session_id, seq, offset, limit), timeout)

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
        call = _calls.count_tokens(model, messages, tools, text, tokenizer)
        return await self._call(call, timeout)
