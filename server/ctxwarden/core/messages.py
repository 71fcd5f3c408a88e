"""Domain model of sessions and messages, independent of protobuf and SQL."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


class Role(enum.IntEnum):
    USER = 1
    ASSISTANT = 2
    TOOL_RESULT = 3


class StopReason(enum.IntEnum):
    UNSPECIFIED = 0
    STOP = 1
    LENGTH = 2
    TOOL_USE = 3
    ERROR = 4
    ABORTED = 5


FAILED_STOP_REASONS = frozenset({StopReason.ERROR, StopReason.ABORTED})


class MessageState(enum.IntEnum):
    ACTIVE = 1
    ROLLED_BACK = 2


class Visibility(enum.IntEnum):
    """Whether the model sees a message (stored as these integers)."""

    MODEL = 1
    HISTORY_ONLY = 2
    """Stored and listed, never in a model input, a summary or a token count."""


class ContentKind(enum.IntEnum):
    TEXT = 1
    IMAGE = 2
    THINKING = 3
    TOOL_CALL = 4
    PROVIDER = 5
    """A provider's item that ctxwarden does not model, kept as the provider sent it."""


PROVIDER_FAMILIES = ("openai-chat", "openai-responses", "anthropic", "google")
"""The wire formats a PROVIDER block can belong to: its JSON only makes sense
in that one (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages,
Google Gemini)."""


@dataclass(frozen=True, slots=True)
class ContentBlock:
    """One content block. Which fields matter depends on ``kind``.

    TEXT uses ``text``; THINKING uses ``text``, ``signature``, ``redacted``;
    IMAGE uses ``mime_type`` and ``data``; TOOL_CALL uses ``tool_call_id``,
    ``tool_name`` and ``arguments_json``; PROVIDER uses ``family`` (one of
    ``PROVIDER_FAMILIES``) and ``provider_json``, the item's JSON (an object
    or an array) exactly as the provider sent it, sent back verbatim to that
    wire format only.
    """

    kind: ContentKind
    text: str = ""
    mime_type: str = ""
    data: bytes = b""
    signature: str = ""
    redacted: bool = False
    tool_call_id: str = ""
    tool_name: str = ""
    arguments_json: str = ""
    family: str = ""
    provider_json: str = ""

    @staticmethod
    def of_text(text: str) -> ContentBlock:
        return ContentBlock(ContentKind.TEXT, text=text)

    @staticmethod
    def of_provider(family: str, provider_json: str) -> ContentBlock:
        return ContentBlock(ContentKind.PROVIDER, family=family, provider_json=provider_json)

    @staticmethod
    def of_tool_call(call_id: str, name: str, arguments_json: str = "{}") -> ContentBlock:
        return ContentBlock(
            ContentKind.TOOL_CALL,
            tool_call_id=call_id,
            tool_name=name,
            arguments_json=arguments_json,
        )


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0


EMPTY_METADATA: Mapping[str, str] = MappingProxyType({})
"""Shared by every message without metadata (most of them)."""


@dataclass(frozen=True, slots=True)
class Message:
    """A stored message. ``seq`` is 0 until the server assigns it."""

    role: Role
    content: tuple[ContentBlock, ...] = ()
    seq: int = 0
    message_id: str = ""
    stop_reason: StopReason = StopReason.UNSPECIFIED
    usage: Usage | None = None
    model: str = ""
    provider: str = ""
    error_message: str = ""
    tool_call_id: str = ""
    tool_name: str = ""
    is_error: bool = False
    state: MessageState = MessageState.ACTIVE
    token_count: int = 0
    create_time_us: int = 0
    metadata: Mapping[str, str] = field(default_factory=lambda: EMPTY_METADATA)
    counted_with: str = ""
    """Server-side: the tokenizer spec that computed token_count ("" = unknown)."""
    calibration: tuple[float, int] | None = None
    """Server-side: the session's (ratio, samples) right after this message was
    appended, when the message changed it. Kept for exact replay."""
    visibility: Visibility = Visibility.MODEL

    @property
    def history_only(self) -> bool:
        """Stored and listed, but never shown to the model (see Visibility)."""
        return self.visibility is Visibility.HISTORY_ONLY

    @property
    def failed(self) -> bool:
        """An assistant message whose provider call failed or was aborted."""
        return self.role is Role.ASSISTANT and self.stop_reason in FAILED_STOP_REASONS

    @property
    def tool_calls(self) -> tuple[ContentBlock, ...]:
        return tuple(b for b in self.content if b.kind is ContentKind.TOOL_CALL)

    @property
    def text(self) -> str:
        """Concatenated text blocks (for tool results: the output)."""
        return "".join(b.text for b in self.content if b.kind is ContentKind.TEXT)
