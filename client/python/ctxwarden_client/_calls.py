"""The unary RPCs as both clients make them.

Each function here validates its arguments and builds a :class:`Call`: the
request, the stub method that sends it, whether a retry is safe, and how the
response becomes the method's result. :class:`~ctxwarden_client.Client` and
:class:`~ctxwarden_client.AsyncClient` only make (or await) the call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypedDict, TypeVar

import grpc
from google.protobuf import empty_pb2, field_mask_pb2, json_format

from ._input_cache import InputCache
from .v1 import context_service_pb2 as pb
from .v1 import memory_pb2, message_pb2, session_pb2
from .v1.context_service_pb2_grpc import ContextServiceStub

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class SessionFields(TypedDict, total=False):
    """Keyword arguments accepted by ``create_session(**session_fields)``."""

    user_id: str
    project_id: str
    title: str
    system_prompt: str
    tools: Iterable[session_pb2.ToolDefinition]
    model: str
    policy: session_pb2.ContextPolicy
    pinned_state: str
    labels: Mapping[str, str]


MessagesArg = message_pb2.Message | Iterable[message_pb2.Message]


@dataclass(frozen=True)
class Call(Generic[Req, Resp]):
    """One unary RPC: ``method`` picks it from a stub; ``finish`` maps its response.

    ``safe`` is true for read-only calls and calls carrying a request_id: they
    may be retried after DEADLINE_EXCEEDED. The async client gets the
    ``grpc.aio`` flavour of the same method from its stub.
    """

    method: Callable[[ContextServiceStub], grpc.UnaryUnaryMultiCallable[Req, Resp]]
    request: Req
    safe: bool
    finish: Callable[[Resp], Resp] | None = None

    def result(self, response: Resp) -> Resp:
        return response if self.finish is None else self.finish(response)


def as_messages(messages: MessagesArg) -> list[message_pb2.Message]:
    if isinstance(messages, message_pb2.Message):
        return [messages]
    return list(messages)


# -- sessions ----------------------------------------------------------------


def create_session(
    session: session_pb2.Session | None,
    session_id: str,
    request_id: str,
    fields: SessionFields,
    state: Mapping[str, object] | None = None,
) -> Call[pb.CreateSessionRequest, session_pb2.Session]:
    """``state``: the session's initial JSON object state (Session.state)."""
    if session is not None and fields:
        raise TypeError("pass either a Session or session fields as keywords, not both")
    if session is None:
        session = session_pb2.Session(**fields)
    if state is not None:
        copy = session_pb2.Session()
        copy.CopyFrom(session)
        json_format.ParseDict(dict(state), copy.state)
        session = copy
    request = pb.CreateSessionRequest(session=session, session_id=session_id, request_id=request_id)
    return Call(lambda stub: stub.CreateSession, request, safe=bool(request_id))


def get_session(session_id: str) -> Call[pb.GetSessionRequest, session_pb2.Session]:
    request = pb.GetSessionRequest(session_id=session_id)
    return Call(lambda stub: stub.GetSession, request, safe=True)


def update_session(
    session: session_pb2.Session, update_mask: Sequence[str], etag: str
) -> Call[pb.UpdateSessionRequest, session_pb2.Session]:
    if isinstance(update_mask, str):
        raise TypeError("update_mask must be a sequence of field paths, not a string")
    mask = field_mask_pb2.FieldMask(paths=list(update_mask))
    request = pb.UpdateSessionRequest(session=session, update_mask=mask, etag=etag)
    return Call(lambda stub: stub.UpdateSession, request, safe=False)


def delete_session(session_id: str) -> Call[pb.DeleteSessionRequest, empty_pb2.Empty]:
    request = pb.DeleteSessionRequest(session_id=session_id)
    return Call(lambda stub: stub.DeleteSession, request, safe=False)


def archive_session(session_id: str) -> Call[pb.ArchiveSessionRequest, session_pb2.Session]:
    request = pb.ArchiveSessionRequest(session_id=session_id)
    return Call(lambda stub: stub.ArchiveSession, request, safe=True)  # idempotent


def unarchive_session(session_id: str) -> Call[pb.UnarchiveSessionRequest, session_pb2.Session]:
    request = pb.UnarchiveSessionRequest(session_id=session_id)
    return Call(lambda stub: stub.UnarchiveSession, request, safe=True)  # idempotent


def get_usage(session_id: str) -> Call[pb.GetUsageRequest, pb.UsageReport]:
    request = pb.GetUsageRequest(session_id=session_id)
    return Call(lambda stub: stub.GetUsage, request, safe=True)  # a read


# -- messages ----------------------------------------------------------------


StateDeltaArg = pb.StateDelta | Mapping[str, Mapping[str, object]] | None
"""A StateDelta, or a mapping with any of the keys "session", "user", "project"."""


def as_state_delta(delta: StateDeltaArg) -> pb.StateDelta | None:
    if delta is None or isinstance(delta, pb.StateDelta):
        return delta
    unknown = set(delta) - {"session", "user", "project"}
    if unknown:
        raise TypeError(f"state_delta keys are session, user, project; not {sorted(unknown)}")
    out = pb.StateDelta()
    for name, part in delta.items():
        json_format.ParseDict(dict(part), getattr(out, name))
    return out


def append_request(
    session_id: str,
    messages: MessagesArg,
    expected_last_seq: int | None,
    request_id: str,
    view: pb.MessageView.ValueType,
    state_delta: StateDeltaArg = None,
) -> pb.AppendMessagesRequest:
    request = pb.AppendMessagesRequest(
        session_id=session_id, messages=as_messages(messages), request_id=request_id, view=view
    )
    if expected_last_seq is not None:
        request.expected_last_seq = expected_last_seq
    delta = as_state_delta(state_delta)
    if delta is not None:
        request.state_delta.CopyFrom(delta)
    return request


def append_messages(
    session_id: str,
    messages: MessagesArg,
    expected_last_seq: int | None,
    request_id: str,
    view: pb.MessageView.ValueType,
    state_delta: StateDeltaArg = None,
) -> Call[pb.AppendMessagesRequest, pb.AppendMessagesResponse]:
    request = append_request(session_id, messages, expected_last_seq, request_id, view, state_delta)
    return Call(lambda stub: stub.AppendMessages, request, safe=bool(request_id))


def append_model_output(
    session_id: str,
    format: pb.ModelInputFormat.ValueType,
    response: object,
    items: object,
    expected_last_seq: int | None,
    request_id: str,
    view: pb.MessageView.ValueType,
) -> Call[pb.AppendModelOutputRequest, pb.AppendMessagesResponse]:
    """``response`` or ``items``: JSON text, or a value json.dumps can write."""
    if (response is None) == (items is None):
        raise TypeError("pass exactly one of response_json= or items_json=")
    request = pb.AppendModelOutputRequest(
        session_id=session_id, format=format, request_id=request_id, view=view
    )
    if response is not None:
        request.response_json = _json_text(response)
    else:
        request.items_json = _json_text(items)
    if expected_last_seq is not None:
        request.expected_last_seq = expected_last_seq
    return Call(lambda stub: stub.AppendModelOutput, request, safe=bool(request_id))


def _json_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8")
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def build_model_input(
    session_id: str,
    max_output_tokens: int,
    auto_compact: bool,
    format: pb.ModelInputFormat.ValueType,
    view: pb.ModelInputView.ValueType,
    as_of_seq: int | None,
    resume_token: str,
    cache: InputCache | None,
    refresh_memory: bool = False,
    report_cache_prefix: bool = False,
) -> Call[pb.BuildModelInputRequest, pb.ModelInput]:
    """``cache`` (for incremental calls) supplies the resume token and merges the answer.

    ``resume_token`` is sent as given; the caller then merges the answer itself
    (ModelInput.messages_offset). Replays (``as_of_seq``) are never resumed.
    """
    if cache is not None and (resume_token or as_of_seq is not None):
        raise TypeError(
            "incremental=True keeps the resume token itself: "
            "it cannot be combined with resume_token or as_of_seq"
        )
    request = pb.BuildModelInputRequest(
        session_id=session_id,
        max_output_tokens=max_output_tokens,
        auto_compact=auto_compact,
        format=format,
        view=view,
        resume_token=resume_token,
        refresh_memory=refresh_memory,
        report_cache_prefix=report_cache_prefix,
    )
    if as_of_seq is not None:
        request.as_of_seq = as_of_seq
    if cache is None:
        return Call(lambda stub: stub.BuildModelInput, request, safe=True)
    request.resume_token = cache.token(session_id)
    return Call(
        lambda stub: stub.BuildModelInput,
        request,
        safe=True,
        finish=lambda received: cache.merge(session_id, received),
    )


def rollback_turn(
    session_id: str,
    to_seq: int | None,
    error_message: str,
    request_id: str,
    provider_error: pb.ProviderError | None = None,
    expected_last_seq: int | None = None,
) -> Call[pb.RollbackTurnRequest, pb.RollbackTurnResponse]:
    request = pb.RollbackTurnRequest(
        session_id=session_id, error_message=error_message, request_id=request_id
    )
    if to_seq is not None:
        request.to_seq = to_seq
    if expected_last_seq is not None:
        request.expected_last_seq = expected_last_seq
    if provider_error is not None:
        request.provider_error.CopyFrom(provider_error)
    return Call(lambda stub: stub.RollbackTurn, request, safe=bool(request_id))


# -- compaction and tools ----------------------------------------------------


def compact(
    session_id: str,
    instructions: str,
    keep_recent_tokens: int,
    request_id: str,
    trigger: pb.CompactionTrigger.ValueType,
) -> Call[pb.CompactRequest, pb.Compaction]:
    request = pb.CompactRequest(
        session_id=session_id,
        instructions=instructions,
        keep_recent_tokens=keep_recent_tokens,
        request_id=request_id,
        trigger=trigger,
    )
    return Call(lambda stub: stub.Compact, request, safe=bool(request_id))


def prepare_compaction(
    session_id: str, instructions: str, keep_recent_tokens: int, summarizer_context_window: int = 0
) -> Call[pb.PrepareCompactionRequest, pb.CompactionPlan]:
    request = pb.PrepareCompactionRequest(
        session_id=session_id,
        instructions=instructions,
        keep_recent_tokens=keep_recent_tokens,
        summarizer_context_window=summarizer_context_window,
    )
    return Call(lambda stub: stub.PrepareCompaction, request, safe=True)


def commit_compaction(
    session_id: str,
    plan_id: str,
    summary: str,
    turn_prefix_summary: str,
    proposed_memories: Iterable[memory_pb2.ProposedMemory] = (),
    min_anchor_survival: Iterable[pb.AnchorSurvival] = (),
) -> Call[pb.CommitCompactionRequest, pb.Compaction]:
    request = pb.CommitCompactionRequest(
        session_id=session_id,
        plan_id=plan_id,
        summary=summary,
        turn_prefix_summary=turn_prefix_summary,
        proposed_memories=list(proposed_memories),
        min_anchor_survival=list(min_anchor_survival),
    )
    # Idempotent per plan, so safe to retry.
    return Call(lambda stub: stub.CommitCompaction, request, safe=True)


def get_tool_output(
    session_id: str, seq: int, offset: int, limit: int
) -> Call[pb.GetToolOutputRequest, pb.GetToolOutputResponse]:
    request = pb.GetToolOutputRequest(session_id=session_id, seq=seq, offset=offset, limit=limit)
    return Call(lambda stub: stub.GetToolOutput, request, safe=True)


def fork_session(
    session_id: str, at_seq: int, new_session_id: str, request_id: str
) -> Call[pb.ForkSessionRequest, session_pb2.Session]:
    request = pb.ForkSessionRequest(
        session_id=session_id,
        at_seq=at_seq,
        new_session_id=new_session_id,
        request_id=request_id,
    )
    return Call(lambda stub: stub.ForkSession, request, safe=bool(request_id))


def count_tokens(
    model: str,
    messages: MessagesArg,
    tools: Iterable[session_pb2.ToolDefinition],
    text: str,
    tokenizer: str,
) -> Call[pb.CountTokensRequest, pb.CountTokensResponse]:
    request = pb.CountTokensRequest(
        model=model,
        tokenizer=tokenizer,
        messages=as_messages(messages),
        tools=list(tools),
        text=text,
    )
    return Call(lambda stub: stub.CountTokens, request, safe=True)


# -- long-term memory ------------------------------------------------------------


def create_memory(
    memory: memory_pb2.Memory,
) -> Call[memory_pb2.CreateMemoryRequest, memory_pb2.Memory]:
    request = memory_pb2.CreateMemoryRequest(memory=memory)
    # With a key it is an upsert (the same outcome when repeated); without one a
    # retry could store the memory twice.
    return Call(lambda stub: stub.CreateMemory, request, safe=bool(memory.key))


def get_memory(memory_id: str) -> Call[memory_pb2.GetMemoryRequest, memory_pb2.Memory]:
    request = memory_pb2.GetMemoryRequest(memory_id=memory_id)
    return Call(lambda stub: stub.GetMemory, request, safe=True)


def update_memory(
    memory: memory_pb2.Memory, update_mask: Sequence[str], etag: str
) -> Call[memory_pb2.UpdateMemoryRequest, memory_pb2.Memory]:
    request = memory_pb2.UpdateMemoryRequest(
        memory=memory, update_mask=field_mask_pb2.FieldMask(paths=list(update_mask)), etag=etag
    )
    return Call(lambda stub: stub.UpdateMemory, request, safe=bool(etag))


def delete_memory(memory_id: str) -> Call[memory_pb2.DeleteMemoryRequest, empty_pb2.Empty]:
    request = memory_pb2.DeleteMemoryRequest(memory_id=memory_id)
    return Call(lambda stub: stub.DeleteMemory, request, safe=False)
