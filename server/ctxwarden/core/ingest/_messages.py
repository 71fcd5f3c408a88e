"""What every provider reader returns: the result type and message builders."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.ingest._common import without_empty_text
from ctxwarden.core.ingest._json import Obj, bad, unsupported
from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason, Usage


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


def turn_of(
    source: Obj,
    blocks: list[ContentBlock],
    stop: tuple[StopReason, str],
    usage: Usage | None,
    *,
    provider: str,
    streamed: bool,
) -> IngestedTurn:
    """``assistant_turn`` with the ``model`` and ``id`` of ``source`` (the
    response object)."""
    return assistant_turn(
        blocks,
        stop,
        usage,
        model=source.opt_str("model"),
        provider=provider,
        response_id=source.opt_str("id"),
        streamed=streamed,
    )


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
