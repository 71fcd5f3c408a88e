"""Helpers that build ``ctxwarden.v1.Message`` protos with less ceremony.

    from ctxwarden_client import assistant, tool_call, tool_result, user

    msgs = [
        user("List the files"),
        assistant(tool_calls=[tool_call("call_1", "ls", {"path": "."})]),
        tool_result("call_1", "a.txt\\nb.txt", tool_name="ls"),
    ]

Every builder returns a plain generated protobuf message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from .v1 import context_service_pb2, message_pb2, session_pb2

__all__ = [
    "assistant",
    "image",
    "tool_call",
    "tool_definition",
    "tool_result",
    "usage",
    "user",
]

Message = message_pb2.Message
ContentBlock = message_pb2.ContentBlock


def _json_text(value: Mapping[str, object] | str) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def image(data: bytes, mime_type: str = "image/png") -> message_pb2.ImageContent:
    """An inline image (raw bytes, not base64)."""
    return message_pb2.ImageContent(mime_type=mime_type, data=data)


def tool_call(
    id: str,
    name: str,
    arguments: Mapping[str, object] | str = "",
) -> message_pb2.ToolCall:
    """A tool call; ``arguments`` is a JSON-serialisable mapping or JSON text."""
    return message_pb2.ToolCall(id=id, name=name, arguments_json=_json_text(arguments))


def tool_definition(
    name: str,
    description: str = "",
    parameters: Mapping[str, object] | str = "",
) -> session_pb2.ToolDefinition:
    """A tool offered to the model; ``parameters`` is a JSON Schema mapping or text."""
    return session_pb2.ToolDefinition(
        name=name, description=description, parameters_json=_json_text(parameters)
    )


def usage(
    input_tokens: int = 0,
    output_tokens: int = 0,
    *,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    total_tokens: int | None = None,
) -> message_pb2.Usage:
    """Provider token usage; ``total_tokens`` defaults to input + output."""
    return message_pb2.Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read_tokens,
        cache_write_tokens=cache_write_tokens,
        total_tokens=input_tokens + output_tokens if total_tokens is None else total_tokens,
    )


def user(
    text: str,
    *,
    message_id: str = "",
    images: Iterable[message_pb2.ImageContent | tuple[str, bytes]] = (),
    metadata: Mapping[str, str] | None = None,
) -> message_pb2.Message:
    """A user message: the text (when non-empty) followed by the images.

    ``images`` holds ``ImageContent`` protos (see :func:`image`) or
    ``(mime_type, data)`` tuples.
    """
    content: list[message_pb2.ContentBlock] = []
    if text:
        content.append(ContentBlock(text=message_pb2.TextContent(text=text)))
    for img in images:
        if isinstance(img, tuple):
            mime_type, data = img
            img = image(data, mime_type)
        content.append(ContentBlock(image=img))
    return Message(
        role=message_pb2.ROLE_USER, content=content, message_id=message_id, metadata=metadata
    )


def assistant(
    text: str = "",
    *,
    tool_calls: Iterable[message_pb2.ToolCall] = (),
    thinking: str = "",
    thinking_signature: str = "",
    stop_reason: message_pb2.StopReason.ValueType | None = None,
    usage: message_pb2.Usage | None = None,
    error_message: str = "",
    message_id: str = "",
    model: str = "",
    provider: str = "",
    metadata: Mapping[str, str] | None = None,
) -> message_pb2.Message:
    """An assistant message: thinking, then text, then tool calls.

    ``stop_reason`` defaults to ``STOP_REASON_TOOL_USE`` when ``tool_calls`` are
    given, else ``STOP_REASON_ERROR`` when ``error_message`` is given, else
    ``STOP_REASON_STOP``.
    """
    calls = list(tool_calls)
    content: list[message_pb2.ContentBlock] = []
    if thinking or thinking_signature:
        content.append(
            ContentBlock(
                thinking=message_pb2.ThinkingContent(
                    thinking=thinking, signature=thinking_signature
                )
            )
        )
    if text:
        content.append(ContentBlock(text=message_pb2.TextContent(text=text)))
    content.extend(ContentBlock(tool_call=call) for call in calls)
    if stop_reason is None:
        if calls:
            stop_reason = message_pb2.STOP_REASON_TOOL_USE
        elif error_message:
            stop_reason = message_pb2.STOP_REASON_ERROR
        else:
            stop_reason = message_pb2.STOP_REASON_STOP
    return Message(
        role=message_pb2.ROLE_ASSISTANT,
        content=content,
        stop_reason=stop_reason,
        usage=usage,
        error_message=error_message,
        message_id=message_id,
        model=model,
        provider=provider,
        metadata=metadata,
    )


def tool_result(
    tool_call_id: str,
    text: str,
    *,
    tool_name: str = "",
    is_error: bool = False,
    message_id: str = "",
    metadata: Mapping[str, str] | None = None,
) -> message_pb2.Message:
    """The output of the tool call ``tool_call_id``."""
    return Message(
        role=message_pb2.ROLE_TOOL_RESULT,
        content=[ContentBlock(text=message_pb2.TextContent(text=text))],
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        is_error=is_error,
        message_id=message_id,
        metadata=metadata,
    )


def provider_error(
    http_status: int,
    body: str | bytes | Mapping[str, object] = "",
    headers: Mapping[str, str] | None = None,
) -> context_service_pb2.ProviderError:
    """A model provider's error as received, for ``rollback_turn(provider_error=...)``:
    the HTTP status (0: no response), the body (text, bytes or parsed JSON) and the
    response headers (e.g. ``dict(response.headers)``)."""
    if isinstance(body, bytes):
        text = body.decode("utf-8", "replace")
    elif isinstance(body, str):
        text = body
    else:
        text = json.dumps(body, separators=(",", ":"))
    return context_service_pb2.ProviderError(
        http_status=http_status, body=text, headers=dict(headers or {})
    )


def history_only(
    message: message_pb2.Message | None = None,
    *,
    role: message_pb2.Role.ValueType = message_pb2.ROLE_USER,
    metadata: Mapping[str, str] | None = None,
    message_id: str = "",
) -> message_pb2.Message:
    """A message the model never sees (``MESSAGE_VISIBILITY_HISTORY_ONLY``): stored
    and listed, left out of every model input, summary and token count.

    ``history_only(assistant("..."))`` marks a copy of a built message;
    ``history_only(metadata={...})`` is an item with no content, only metadata
    (``role`` defaults to user)."""
    if message is None:
        message = Message(role=role, message_id=message_id, metadata=metadata)
    else:
        copy = Message()
        copy.CopyFrom(message)
        message = copy
        if metadata:
            message.metadata.update(metadata)
        if message_id:
            message.message_id = message_id
    message.visibility = message_pb2.MESSAGE_VISIBILITY_HISTORY_ONLY
    return message


def state_delta(
    session: Mapping[str, object] | None = None,
    *,
    user: Mapping[str, object] | None = None,
    project: Mapping[str, object] | None = None,
) -> context_service_pb2.StateDelta:
    """Changes of JSON object states for ``append_messages(state_delta=...)``: the
    session's own, the one shared by the user's sessions in the project, and the
    one shared by the project's sessions. A key set to ``None`` is deleted, any
    other key is set."""
    delta = context_service_pb2.StateDelta()
    for name, part in (("session", session), ("user", user), ("project", project)):
        if part is not None:
            getattr(delta, name).update(dict(part))
    return delta
