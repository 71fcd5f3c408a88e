"""What every provider reader shares: the result type and block builders."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.ingest._json import bad, unsupported
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role, StopReason, Usage


@dataclass(frozen=True, slots=True)
class IngestedTurn:
    """What one provider call returned, as ctxwarden messages."""

    messages: tuple[Message, ...]
    """Normally one assistant message (with no content when the call failed)."""
    response_id: str = ""
    """The provider's id of the response ("" when it sent none): chatcmpl-...,
    resp_..., msg_..., or Gemini's responseId."""
    streamed: bool = False
    """Whether it was assembled from streamed events."""


def text_block(text: str) -> ContentBlock:
    return ContentBlock.of_text(text)


def image_block(mime_type: str, data: bytes) -> ContentBlock:
    return ContentBlock(ContentKind.IMAGE, mime_type=mime_type, data=data)


def thinking_block(text: str, signature: str, *, redacted: bool = False) -> ContentBlock:
    return ContentBlock(ContentKind.THINKING, text=text, signature=signature, redacted=redacted)


def provider_block(family: str, value: Any, *, drop: tuple[str, ...] = ()) -> ContentBlock:
    """An item ctxwarden does not model, kept whole: its compact JSON (key order
    kept, as the renderers write it), without the keys in ``drop``."""
    if drop and isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in drop}
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return ContentBlock.of_provider(family, text)


def tool_result(
    call_id: str,
    content: list[ContentBlock],
    *,
    name: str = "",
    is_error: bool = False,
) -> Message:
    """A tool result; always at least one (possibly empty) text block, so that
    a result without output is still a valid message."""
    if not any(b.kind is ContentKind.TEXT for b in content):
        content = [text_block(""), *content]
    return Message(
        Role.TOOL_RESULT,
        tuple(content),
        tool_call_id=call_id,
        tool_name=name,
        is_error=is_error,
    )


def merge_text(blocks: list[ContentBlock], text: str) -> None:
    """Append streamed text: to the last block when it is text, else as a new block."""
    if blocks and blocks[-1].kind is ContentKind.TEXT:
        blocks[-1] = text_block(blocks[-1].text + text)
    else:
        blocks.append(text_block(text))


def without_empty_text(blocks: list[ContentBlock]) -> list[ContentBlock]:
    """Assistant content without empty text blocks (streams start with them;
    they carry nothing, and no provider takes them back)."""
    return [b for b in blocks if b.kind is not ContentKind.TEXT or b.text]


def assistant_turn(
    blocks: list[ContentBlock],
    stop: tuple[StopReason, str],
    usage: Usage | None,
    *,
    model: str,
    provider: str,
    response_id: str,
    streamed: bool,
) -> IngestedTurn:
    """One call's answer: an assistant message with ``stop`` as (reason, error message)."""
    message = Message(
        Role.ASSISTANT,
        tuple(without_empty_text(blocks)),
        stop_reason=stop[0],
        error_message=stop[1],
        usage=usage,
        model=model,
        provider=provider,
    )
    return IngestedTurn((message,), response_id=response_id, streamed=streamed)


def assistant_message(blocks: list[ContentBlock], *, model: str, provider: str) -> Message:
    """An assistant message read from input items."""
    return Message(
        Role.ASSISTANT, tuple(without_empty_text(blocks)), model=model, provider=provider
    )


def user_messages(entries: Iterable[ContentBlock | Message]) -> list[Message]:
    """A user content's blocks as user messages, split around the tool results
    (messages of their own) among them, in order."""
    messages: list[Message] = []
    run: list[ContentBlock] = []
    for entry in entries:
        if isinstance(entry, Message):
            if run:
                messages.append(Message(Role.USER, tuple(run)))
                run = []
            messages.append(entry)
        else:
            run.append(entry)
    if run:
        messages.append(Message(Role.USER, tuple(run)))
    return messages


def bad_role(path: str, role: str) -> InvalidArgument:
    """The error for an input message of a role that cannot be read."""
    if role in ("system", "developer"):
        return bad(path, f"a {role} message cannot be stored: the system prompt is the session's")
    return unsupported(path, f"a message of role {role!r}")
