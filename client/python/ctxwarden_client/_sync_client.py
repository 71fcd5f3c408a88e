"""Blocking ctxwarden client over ``grpc``."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from . import _calls, _defaults, _pagination
from ._calls import Call, MessagesArg, SessionFields, StateDeltaArg
from ._client_base import ClientBase
from ._lifecycle import SyncLifecycle
from ._memory_client import MemoryMethods
from ._pagination import Pages
from ._retry import retry_delay
from ._sync_stream import MessageStream
from .v1 import context_service_pb2, context_service_pb2_grpc, memory_pb2, message_pb2, session_pb2

__all__ = ["Client"]

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_Item = TypeVar("_Item")


class Client(MemoryMethods, ClientBase, SyncLifecycle):
    """Blocking client for ``ctxwarden.v1.ContextService``.

    ``timeout`` is the default deadline in seconds of every call (``None``: no
    deadline); each method takes ``timeout=`` to override it. ``retries`` is how
    many times a failed call is retried: UNAVAILABLE always, DEADLINE_EXCEEDED
    only for read-only calls and calls carrying a ``request_id`` (0 disables).
    When ``channel`` is given it is used as is and not closed by :meth:`close`.
    """

    def __init__(
        self,
        target: str = _defaults.DEFAULT_TARGET,
        *,
        timeout: float | None = _defaults.DEFAULT_TIMEOUT,
        channel: grpc.Channel | None = None,
        metadata: Iterable[tuple[str, str]] = (),
        retries: int = _defaults.DEFAULT_RETRIES,
    ) -> None:
        super().__init__(timeout, metadata, retries)
        self._owns_channel = channel is None
        self._channel = (
            grpc.insecure_channel(target, options=_defaults.CHANNEL_OPTIONS)
            if channel is None
            else channel
        )
        self._stub = context_service_pb2_grpc.ContextServiceStub(self._channel)

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

    def _call(self, call: Call[_Req, _Resp], timeout: float | None) -> _Resp:
        rpc = call.method(self._stub)
        attempt = 0
        while True:
            try:
                response = rpc(
                    call.request, timeout=self._deadline(timeout), metadata=self._metadata
                )
            except grpc.RpcError as exc:
                delay = retry_delay(self._retry, exc, attempt, call.safe)
            else:
                return call.result(response)
            time.sleep(delay)
            attempt += 1

    def _pages(self, pages: Pages[Any, Any, _Item], timeout: float | None) -> Iterator[_Item]:
        while (call := pages.next_call()) is not None:
            yield from pages.items(self._call(call, timeout))

    # -- sessions ------------------------------------------------------------

    def create_session(
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
        return self._call(call, timeout)

    def get_session(self, session_id: str, *, timeout: float | None = None) -> session_pb2.Session:
        return self._call(_calls.get_session(session_id), timeout)

    def list_sessions(
        self,
        user_id: str = "",
        project_id: str = "",
        page_size: int = 0,
        *,
        page_token: str = "",
        parent_session_id: str = "",
        show_archived: bool = False,
        timeout: float | None = None,
    ) -> Iterator[session_pb2.Session]:
        """Iterates over sessions, newest first, fetching pages lazily.

        ``page_token`` starts the listing at that page (a ``next_page_token`` of an
        earlier ListSessions with the same filters) instead of the first one;
        ``parent_session_id``: only the forks of that session; ``show_archived``
        lists archived sessions too."""
        yield from self._pages(
            _pagination.list_sessions(
                user_id, project_id, page_size, page_token, parent_session_id, show_archived
            ),
            timeout,
        )

    def update_session(
        self,
        session: session_pb2.Session,
        update_mask: Sequence[str],
        etag: str = "",
        *,
        timeout: float | None = None,
    ) -> session_pb2.Session:
        """Updates the ``update_mask`` fields of ``session`` (named by its session_id)."""
        return self._call(_calls.update_session(session, update_mask, etag), timeout)

    def fork_session(
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
        return self._call(call, timeout)

    def delete_session(self, session_id: str, *, timeout: float | None = None) -> None:
        self._call(_calls.delete_session(session_id), timeout)

    # -- messages ------------------------------------------------------------

    def append_messages(
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
        return self._call(call, timeout)

    def append_model_output(
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
        return self._call(call, timeout)

    def stream_messages(
        self,
        *,
        max_in_flight: int = _defaults.DEFAULT_MAX_IN_FLIGHT,
        timeout: float | None = None,
        stream_timeout: float | None = None,
        coalesce: bool = True,
        coalesce_window: float = _defaults.DEFAULT_COALESCE_WINDOW,
    ) -> MessageStream:
        """Opens a ``StreamMessages`` stream.

        ``timeout`` bounds each :meth:`MessageStream.send` (default: the client's
        timeout); ``stream_timeout`` is the deadline of the whole stream (default:
        none). At most ``max_in_flight`` requests are unanswered at a time.
        ``coalesce`` (default on): plain appends to one session that queue up while
        earlier ones are unanswered go out as one request (``coalesce_window``: the
        longest wait for company, in seconds); each send still gets its own response.
        """
        return MessageStream(
            self._stub,
            metadata=self._metadata,
            send_timeout=self._deadline(timeout),
            stream_timeout=stream_timeout,
            max_in_flight=max_in_flight,
            coalesce=coalesce,
            coalesce_window=coalesce_window,
        )

    def list_messages(
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
    ) -> Iterator[message_pb2.Message]:
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
        yield from self._pages(pages, timeout)

    def build_model_input(
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
        return self._call(call, timeout)

    def rollback_turn(
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
        return self._call(call, timeout)

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
        call = _calls.compact(session_id, instructions, keep_recent_tokens, request_id, trigger)
        return self._call(call, timeout)

    def prepare_compaction(
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
        return self._call(call, timeout)

    def commit_compaction(
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
        return self._call(call, timeout)

    def list_compactions(
        self,
        session_id: str,
        page_size: int = 0,
        *,
        page_token: str = "",
        timeout: float | None = None,
    ) -> Iterator[context_service_pb2.Compaction]:
        """Iterates over the session's checkpoints, newest first (from ``page_token``'s page)."""
        yield from self._pages(
            _pagination.list_compactions(session_id, page_size, page_token), timeout
        )

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
        return self._call(_calls.get_tool_output(session_id, seq, offset, limit), timeout)

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
        call = _calls.count_tokens(model, messages, tools, text, tokenizer)
        return self._call(call, timeout)
