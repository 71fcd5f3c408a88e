"""The ContextService servicer: decode, call the SessionManager, encode."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import grpc
from google.protobuf import empty_pb2
from google.protobuf.duration_pb2 import Duration

from ctxwarden.api.convert import (
    checkpoint_to_pb,
    commit_to_pb,
    handle_to_pb,
    message_from_pb,
    message_to_pb,
    new_encoding_cache,
    provider_error_from_pb,
    trigger_from_pb,
)
from ctxwarden.api.convert_anchors import min_survival_from_pb
from ctxwarden.api.convert_memory import proposed_from_pb
from ctxwarden.api.convert_requests import append_response, message_filter, state_delta_from_pb
from ctxwarden.api.convert_session import session_from_pb, session_to_pb, tool_from_pb
from ctxwarden.api.encoding import EncodingCache
from ctxwarden.api.errors import internal_status, to_status
from ctxwarden.api.forks import ForkHandlers
from ctxwarden.api.guard import RefusedRequest
from ctxwarden.api.handlers import service_handler
from ctxwarden.api.lifecycle_rpcs import LifecycleRpcs
from ctxwarden.api.memory_servicer import MemoryServicer
from ctxwarden.api.model_input_wire import (
    basic_model_input_bytes,
    model_input_bytes_cooperatively,
    resume_offset,
)
from ctxwarden.api.responses import (
    carries_messages,
    check_response_size,
    page_length,
)
from ctxwarden.api.stream import ReadAhead
from ctxwarden.api.tenancy import current_tenant, inner_id
from ctxwarden.api.unary import check_decoded, unary
from ctxwarden.api.unary import idempotency_key as _key
from ctxwarden.api.update_mask import mask_paths
from ctxwarden.api.usage_rpcs import UsageRpcs
from ctxwarden.config import Limits
from ctxwarden.core.errors import CtxwardenError, InvalidArgument
from ctxwarden.core.messages import Message
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.service.append_run import RunRequest
from ctxwarden.service.manager import SessionManager
from ctxwarden.service.results import AppendResult
from ctxwarden.util.loop_slices import stepped
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses_pb

log = logging.getLogger("ctxwarden.rpc")

UPDATABLE = ("title", "system_prompt", "tools", "model", "policy", "pinned_state", "labels")


class ContextServicer(ForkHandlers, LifecycleRpcs, MemoryServicer, UsageRpcs):
    def __init__(
        self, manager: SessionManager, limits: Limits, encodings: EncodingCache | None = None
    ) -> None:
        """``encodings``: this server's cache of message encodings (default: a new
        one with the default budget); it drops the sessions that leave memory."""
        self.manager = manager
        self.limits = limits
        self.encodings = encodings if encodings is not None else new_encoding_cache()
        manager.hot.on_evict(self.encodings.forget)

    # -- sessions -------------------------------------------------------------

    @unary
    async def CreateSession(self, request: pb.CreateSessionRequest, context: Any) -> ses_pb.Session:
        session = session_from_pb(request.session)
        sid = inner_id(request.session_id) if request.session_id else ""
        created = await self.manager.create_session(
            session, sid, _key(request), tenant=current_tenant.get()
        )
        return session_to_pb(created)

    @unary
    async def GetSession(self, request: pb.GetSessionRequest, context: Any) -> ses_pb.Session:
        found = await self.manager.get_session_with_state(inner_id(request.session_id))
        return session_to_pb(found.session, found.user_state, found.project_state)

    @unary
    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: Any
    ) -> pb.ListSessionsResponse:
        parent = request.parent_session_id
        sessions, token = await self.manager.list_sessions(
            request.user_id,
            request.project_id,
            request.page_size,
            request.page_token,
            tenant=current_tenant.get(),
            parent=inner_id(parent, "parent_session_id") if parent else "",
            show_archived=request.show_archived,
        )
        return pb.ListSessionsResponse(
            sessions=[session_to_pb(s) for s in sessions], next_page_token=token
        )

    @unary
    async def UpdateSession(self, request: pb.UpdateSessionRequest, context: Any) -> ses_pb.Session:
        paths = mask_paths(request.update_mask, UPDATABLE)
        session = session_from_pb(request.session)
        session = replace(session, session_id=inner_id(session.session_id, "session.session_id"))
        updated = await self.manager.update_session(session, paths, request.etag)
        return session_to_pb(updated)

    @unary
    async def DeleteSession(
        self, request: pb.DeleteSessionRequest, context: Any
    ) -> empty_pb2.Empty:
        await self.manager.delete_session(inner_id(request.session_id))
        return empty_pb2.Empty()

    # -- messages -------------------------------------------------------------

    def _messages(self, request: pb.AppendMessagesRequest) -> list[Message]:
        limit = self.limits.max_message_bytes
        out = []
        for i, m in enumerate(request.messages):
            size = m.ByteSize()
            if size > limit:
                raise InvalidArgument(
                    f"messages[{i}] is {size} bytes; the limit is {limit} bytes per message",
                    reason=ErrorReason.MESSAGE_TOO_LARGE,
                    field=f"messages[{i}]",
                )
            out.append(message_from_pb(m, f"messages[{i}]"))
        return out

    async def _append(self, request: pb.AppendMessagesRequest) -> bytes:
        check_decoded(request)
        expected = request.expected_last_seq if request.HasField("expected_last_seq") else None
        result = await self.manager.append(
            inner_id(request.session_id),
            self._messages(request),
            expected,
            _key(request),
            state_delta_from_pb(request),
        )
        return append_response(result, request.view)

    @unary
    async def AppendModelOutput(self, request: pb.AppendModelOutputRequest, context: Any) -> bytes:
        check_decoded(request)
        which = request.WhichOneof("output")
        expected = request.expected_last_seq if request.HasField("expected_last_seq") else None
        result = await self.manager.append_model_output(
            inner_id(request.session_id),
            int(request.format),
            response_json=request.response_json if which == "response_json" else None,
            items_json=request.items_json if which == "items_json" else None,
            expected_last_seq=expected,
            key=_key(request),
        )
        return append_response(result, request.view)

    @unary
    async def AppendMessages(self, request: pb.AppendMessagesRequest, context: Any) -> bytes:
        return await self._append(request)

    async def StreamMessages(
        self,
        request_iterator: AsyncIterator[pb.AppendMessagesRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[bytes]:
        """One (encoded) response per request, in order; the first error ends the stream.
        Requests of one session already waiting are written as one (api.stream)."""
        reads = ReadAhead(request_iterator, self.limits.max_request_bytes)
        limit = self.limits.max_request_bytes
        try:
            while run := await reads.next_run(limit):
                # A run is answered as one write when it can be (SessionManager.append_run),
                # else (and from a request that cannot be decoded on) one by one. Written
                # out here, not as a generator of its own: one layer less per answer.
                results = await self._merged(run) if len(run) > 1 else []
                for request, result in zip(run, results, strict=False):
                    response = append_response(result, request.view)
                    check_response_size("AppendMessages", len(response), limit)
                    yield response
                for request in run[len(results) :]:
                    response = await self._append(request)
                    check_response_size("AppendMessages", len(response), limit)
                    yield response
            return
        except (grpc.aio.AbortError, RefusedRequest):
            raise  # the call is answered (read timeout), or the guard answers it in order
        except CtxwardenError as exc:
            code, message, trailer = to_status(exc)
        except Exception:
            log.exception("unhandled error in StreamMessages")
            code, message, trailer = internal_status()
        finally:
            reads.close()
        await context.abort(code, message, trailing_metadata=trailer)

    async def _merged(self, run: list[pb.AppendMessagesRequest]) -> list[AppendResult]:
        """The results of the run's requests up to the first that cannot be decoded,
        written as one ([]: nothing written)."""
        decoded: list[RunRequest] = []
        try:
            sid = inner_id(run[0].session_id)
            for request in run:
                check_decoded(request)
                decoded.append(RunRequest(self._messages(request), _key(request)))
        except CtxwardenError:
            pass  # that request's error is the lone path's
        if len(decoded) < 2:
            return []
        return await self.manager.append_run(sid, decoded) or []

    @unary
    async def ListMessages(
        self, request: pb.ListMessagesRequest, context: Any
    ) -> pb.ListMessagesResponse:
        sid = inner_id(request.session_id)
        wanted = message_filter(request)
        rows, token = await self.manager.list_messages(
            sid, request.page_size, request.page_token, wanted
        )
        messages = [message_to_pb(m) for m in rows]
        keep = page_length(messages)
        if keep < len(messages):  # bounded by bytes too: the rest is the next page
            del messages[keep:]
            token = wanted.token(sid, rows[keep - 1].seq)
        return pb.ListMessagesResponse(messages=messages, next_page_token=token)

    # -- model input and rollback ---------------------------------------------

    @unary
    async def BuildModelInput(self, request: pb.BuildModelInputRequest, context: Any) -> bytes:
        """Returns the encoded ModelInput (see model_input_bytes)."""
        with_messages = carries_messages(request)
        as_of = request.as_of_seq if request.HasField("as_of_seq") else None
        view = await self.manager.build_model_input(
            inner_id(request.session_id),
            request.max_output_tokens,
            request.auto_compact,
            as_of,
            int(request.format),
            refresh_memory=request.refresh_memory,
            count_cache=True,
            report_cache=request.report_cache_prefix,
        )
        if not with_messages:
            if view.rendered is not None and not request.resume_token:
                await stepped(view.rendered.join_steps())  # a big JSON, not in one go
            return basic_model_input_bytes(view, int(request.format), request.resume_token)
        offset = resume_offset(request.resume_token, view) if request.resume_token else 0
        encoded = await model_input_bytes_cooperatively(view, offset, self.encodings)
        sid = view.session.session_id
        if sid not in self.manager.hot:  # it left memory while its input was built
            self.encodings.forget(sid)
        return encoded

    @unary
    async def RollbackTurn(
        self, request: pb.RollbackTurnRequest, context: Any
    ) -> pb.RollbackTurnResponse:
        to_seq = request.to_seq if request.HasField("to_seq") else None
        provider = request.provider_error if request.HasField("provider_error") else None
        expected = request.expected_last_seq if request.HasField("expected_last_seq") else None
        result = await self.manager.rollback(
            inner_id(request.session_id),
            to_seq,
            request.error_message,
            _key(request),
            None if provider is None else provider_error_from_pb(provider),
            expected_last_seq=expected,
        )
        retry = Duration()
        retry.FromNanoseconds(int(result.retry_after_seconds * 1e9))
        return pb.RollbackTurnResponse(
            rolled_back_seqs=list(result.rolled_back_seqs),
            action=int(result.action),  # type: ignore[arg-type]
            retry_after=retry,
            reason=result.reason,
        )

    # -- compaction -------------------------------------------------------------

    @unary
    async def Compact(self, request: pb.CompactRequest, context: Any) -> pb.Compaction:
        trigger = int(request.trigger)
        wanted = trigger_from_pb(trigger)
        if wanted is None:
            raise InvalidArgument(
                f"trigger {trigger} is unknown", reason=ErrorReason.INVALID_TRIGGER, field="trigger"
            )
        checkpoint = await self.manager.compact(
            inner_id(request.session_id),
            request.instructions,
            request.keep_recent_tokens,
            _key(request),
            wanted,
        )
        return checkpoint_to_pb(checkpoint)

    @unary
    async def PrepareCompaction(
        self, request: pb.PrepareCompactionRequest, context: Any
    ) -> pb.CompactionPlan:
        handle = await self.manager.prepare_compaction(
            inner_id(request.session_id),
            request.instructions,
            request.keep_recent_tokens,
            request.summarizer_context_window,
        )
        return handle_to_pb(handle)

    @unary
    async def CommitCompaction(
        self, request: pb.CommitCompactionRequest, context: Any
    ) -> pb.Compaction:
        checkpoint, step = await self.manager.commit_compaction(
            inner_id(request.session_id),
            request.plan_id,
            request.summary,
            request.turn_prefix_summary,
            proposed_from_pb(request.proposed_memories),
            min_survival_from_pb(request.min_anchor_survival),
        )
        return commit_to_pb(checkpoint, step)

    @unary
    async def ListCompactions(
        self, request: pb.ListCompactionsRequest, context: Any
    ) -> pb.ListCompactionsResponse:
        rows, token = await self.manager.list_compactions(
            inner_id(request.session_id), request.page_size, request.page_token
        )
        return pb.ListCompactionsResponse(
            compactions=[checkpoint_to_pb(c) for c in rows], next_page_token=token
        )

    @unary
    async def GetToolOutput(
        self, request: pb.GetToolOutputRequest, context: Any
    ) -> pb.GetToolOutputResponse:
        out = await self.manager.get_tool_output(
            inner_id(request.session_id), request.seq, request.offset, request.limit
        )
        return pb.GetToolOutputResponse(
            content=out.content,
            total_bytes=out.total_bytes,
            total_lines=out.total_lines,
            next_offset=out.next_offset,
        )

    @unary
    async def CountTokens(
        self, request: pb.CountTokensRequest, context: Any
    ) -> pb.CountTokensResponse:
        messages = [message_from_pb(m, f"messages[{i}]") for i, m in enumerate(request.messages)]
        tools = [tool_from_pb(t, f"tools[{i}]") for i, t in enumerate(request.tools)]
        counted = await self.manager.count_tokens(
            request.model,
            request.tokenizer,
            messages,
            tools,
            request.text,
        )
        return pb.CountTokensResponse(
            total_tokens=counted.total,
            message_tokens=counted.per_message,
            tokenizer=counted.tokenizer,
            exact=counted.exact,
            tools_tokens=counted.tools,
            text_tokens=counted.text,
        )

    def handler(self) -> grpc.GenericRpcHandler:
        return service_handler(self)
