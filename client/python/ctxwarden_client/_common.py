"""Pieces shared by the sync and async clients: request building and retries."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

import grpc
from google.protobuf import field_mask_pb2

from ctxwarden.v1 import context_service_pb2, message_pb2, session_pb2

from ._errors import CtxwardenError, make_error

DEFAULT_TARGET = "127.0.0.1:50051"
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 2
DEFAULT_MAX_IN_FLIGHT = 32
CHANNEL_OPTIONS = (
    # Model inputs of long sessions are megabytes: allow them, and let them
    # travel in few large HTTP/2 frames.
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.http2.max_frame_size", 16 * 1024 * 1024 - 1),
    ("grpc.http2.lookahead_bytes", 8 * 1024 * 1024),
)
INPUT_CACHE_SESSIONS = 64
NO_FORMAT = context_service_pb2.MODEL_INPUT_FORMAT_UNSPECIFIED
DEFAULT_VIEW = context_service_pb2.MODEL_INPUT_VIEW_UNSPECIFIED


class InputCache:
    """The last model input of recently used sessions, for incremental BuildModelInput.

    The server sends only the messages after those the client already holds
    (ModelInput.messages_offset); this puts the held ones back in front. The
    cached input is updated in place, so the object returned for a session is
    the one the next incremental call for that session changes.
    """

    def __init__(self, capacity: int = INPUT_CACHE_SESSIONS) -> None:
        self._capacity = capacity
        self._inputs: dict[str, context_service_pb2.ModelInput] = {}

    def token(self, session_id: str) -> str:
        held = self._inputs.get(session_id)
        return held.resume_token if held is not None else ""

    def merge(
        self, session_id: str, received: context_service_pb2.ModelInput
    ) -> context_service_pb2.ModelInput:
        offset = received.messages_offset
        held = self._inputs.pop(session_id, None)
        if offset == 0 or held is None or offset > len(held.messages):
            if offset != 0:
                raise ValueError("the server resumed an input this client does not hold")
            merged = received
        else:
            # Copying protobuf messages is slow in Python: keep the held
            # messages, replace everything else.
            del held.messages[offset:]
            held.messages.extend(received.messages)
            for field in received.DESCRIPTOR.fields:
                if field.name != "messages":
                    held.ClearField(field.name)  # type: ignore[arg-type]
            del received.messages[:]
            held.MergeFrom(received)
            held.messages_offset = 0
            merged = held
        self._inputs[session_id] = merged
        while len(self._inputs) > self._capacity:
            del self._inputs[next(iter(self._inputs))]
        return merged

    def forget(self, session_id: str) -> None:
        self._inputs.pop(session_id, None)


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
class RetryPolicy:
    """Retries UNAVAILABLE for every call and DEADLINE_EXCEEDED for safe calls.

    ``retries`` is the number of extra attempts after the first (0 disables).
    """

    retries: int = DEFAULT_RETRIES
    initial_backoff: float = 0.1
    max_backoff: float = 2.0

    def should_retry(self, error: CtxwardenError, attempt: int, safe: bool) -> bool:
        """Whether to retry after ``attempt`` (0-based) failed with ``error``.

        ``safe`` is true for read-only calls and calls carrying a request_id.
        """
        if attempt >= self.retries:
            return False
        if error.code == grpc.StatusCode.UNAVAILABLE:
            return True
        return bool(safe and error.code == grpc.StatusCode.DEADLINE_EXCEEDED)

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt + 1`` (jittered)."""
        ceiling = min(self.max_backoff, self.initial_backoff * (2.0**attempt))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


def normalize_metadata(metadata: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((str(k).lower(), v) for k, v in metadata)


def as_messages(messages: MessagesArg) -> list[message_pb2.Message]:
    if isinstance(messages, message_pb2.Message):
        return [messages]
    return list(messages)


def create_session_request(
    session: session_pb2.Session | None,
    session_id: str,
    request_id: str,
    fields: SessionFields,
) -> context_service_pb2.CreateSessionRequest:
    if session is not None and fields:
        raise TypeError("pass either a Session or session fields as keywords, not both")
    if session is None:
        session = session_pb2.Session(**fields)
    return context_service_pb2.CreateSessionRequest(
        session=session, session_id=session_id, request_id=request_id
    )


def update_session_request(
    session: session_pb2.Session, update_mask: Sequence[str], etag: str
) -> context_service_pb2.UpdateSessionRequest:
    if isinstance(update_mask, str):
        raise TypeError("update_mask must be a sequence of field paths, not a string")
    return context_service_pb2.UpdateSessionRequest(
        session=session,
        update_mask=field_mask_pb2.FieldMask(paths=list(update_mask)),
        etag=etag,
    )


def append_request(
    session_id: str,
    messages: MessagesArg,
    expected_last_seq: int | None,
    request_id: str,
) -> context_service_pb2.AppendMessagesRequest:
    request = context_service_pb2.AppendMessagesRequest(
        session_id=session_id, messages=as_messages(messages), request_id=request_id
    )
    if expected_last_seq is not None:
        request.expected_last_seq = expected_last_seq
    return request


def stream_request(
    session_id_or_request: str | context_service_pb2.AppendMessagesRequest,
    messages: MessagesArg,
    expected_last_seq: int | None,
    request_id: str,
) -> context_service_pb2.AppendMessagesRequest:
    if isinstance(session_id_or_request, context_service_pb2.AppendMessagesRequest):
        if as_messages(messages) or expected_last_seq is not None or request_id:
            raise TypeError("pass either an AppendMessagesRequest or its fields, not both")
        return session_id_or_request
    return append_request(session_id_or_request, messages, expected_last_seq, request_id)


def rollback_request(
    session_id: str, to_seq: int | None, error_message: str, request_id: str
) -> context_service_pb2.RollbackTurnRequest:
    request = context_service_pb2.RollbackTurnRequest(
        session_id=session_id, error_message=error_message, request_id=request_id
    )
    if to_seq is not None:
        request.to_seq = to_seq
    return request


def count_tokens_request(
    model: str,
    messages: MessagesArg,
    tools: Iterable[session_pb2.ToolDefinition],
    text: str,
    tokenizer: str,
) -> context_service_pb2.CountTokensRequest:
    return context_service_pb2.CountTokensRequest(
        model=model,
        tokenizer=tokenizer,
        messages=as_messages(messages),
        tools=list(tools),
        text=text,
    )


def clone_error(error: CtxwardenError) -> CtxwardenError:
    """A fresh exception equal to ``error`` (so one failure can be raised many times)."""
    return make_error(
        error.code,
        error.message,
        reason=error.reason,
        domain=error.domain,
        metadata=error.metadata,
        details=error.details,
    )


def deadline_error(what: str, timeout: float | None) -> CtxwardenError:
    return make_error(
        grpc.StatusCode.DEADLINE_EXCEEDED, f"{what}: no response within {timeout} seconds"
    )


def closed_error() -> CtxwardenError:
    return make_error(grpc.StatusCode.CANCELLED, "the message stream is closed")


def unexpected_response_error() -> CtxwardenError:
    return make_error(
        grpc.StatusCode.INTERNAL, "StreamMessages sent a response with no request outstanding"
    )


def unanswered_error(count: int) -> CtxwardenError:
    return make_error(
        grpc.StatusCode.INTERNAL,
        f"StreamMessages ended with {count} request(s) unanswered",
    )
