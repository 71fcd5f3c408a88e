"""Domain model of sessions and messages, independent of protobuf and SQL."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import FrozenInstanceError, dataclass, field
from types import MappingProxyType

from ctxwarden.core.content import PROVIDER_FAMILIES, ContentBlock, ContentKind
from ctxwarden.core.fast_replace import replacer

__all__ = [
    "EMPTY_METADATA",
    "FAILED_STOP_REASONS",
    "PROVIDER_FAMILIES",
    "ContentBlock",
    "ContentKind",
    "Message",
    "MessageState",
    "Role",
    "StopReason",
    "Usage",
    "Visibility",
    "pack_message",
]


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


_LANE = 48
_LANE_MAX = (1 << _LANE) - 1
_USAGE_ARGS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
    "reasoning_tokens",
)


class Usage:
    """Token counts a provider reported for one call. Immutable.

    A hot session keeps one per assistant message, so the six counts are one
    int of 48-bit lanes (one object instead of seven) whenever they fit, as every
    valid usage does; a tuple otherwise (validation refuses such a usage).
    ``reasoning_tokens`` are part of ``output_tokens`` (reported apart by some
    providers), never added to them.
    """

    __slots__ = ("_counts",)

    _counts: int | tuple[int, ...]

    def __init__(
        self,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        total_tokens: int = 0,
        reasoning_tokens: int = 0,
    ) -> None:
        # The counts most often 0 in the high lanes keep the int short.
        counts = (
            input_tokens,
            output_tokens,
            total_tokens,
            cache_read_tokens,
            cache_write_tokens,
            reasoning_tokens,
        )
        packed: int | tuple[int, ...] = counts
        if all(type(c) is int and 0 <= c <= _LANE_MAX for c in counts):
            packed = 0
            for c in reversed(counts):
                packed = packed << _LANE | c
        object.__setattr__(self, "_counts", packed)

    def _count(self, lane: int) -> int:
        counts = self._counts
        if isinstance(counts, tuple):
            return counts[lane]
        return counts >> (_LANE * lane) & _LANE_MAX

    @property
    def input_tokens(self) -> int:
        return self._count(0)

    @property
    def output_tokens(self) -> int:
        return self._count(1)

    @property
    def total_tokens(self) -> int:
        return self._count(2)

    @property
    def cache_read_tokens(self) -> int:
        return self._count(3)

    @property
    def cache_write_tokens(self) -> int:
        return self._count(4)

    @property
    def reasoning_tokens(self) -> int:
        return self._count(5)

    def counts(self) -> tuple[int, int, int, int, int, int]:
        """The six counts, in the constructor's order."""
        return (
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.total_tokens,
            self.reasoning_tokens,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Usage):
            return NotImplemented
        return self._counts == other._counts  # one representation per value

    def __hash__(self) -> int:
        return hash(self._counts)

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(_USAGE_ARGS, self.counts(), strict=True))
        return f"Usage({shown})"

    def __reduce__(self) -> tuple[type[Usage], tuple[int, ...]]:
        return Usage, self.counts()

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")


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
    appended, when the message changed it. Stored for exact replay; a hot
    session's copy has None (pack_message)."""
    visibility: Visibility = Visibility.MODEL

    # A message shown as it is stored is its own view entry (core.view.Entry):
    # a hot session keeps no second object for most of its messages.

    @property
    def message(self) -> Message:
        return self

    @property
    def original(self) -> Message:
        return self

    @property
    def notice(self) -> None:
        return None

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


_replace_message = replacer(Message)


def pack_message(message: Message) -> Message:
    """The copy of ``message`` a hot session keeps: long texts compressed, and no
    calibration (only replay reads it, from the stored row); ``message`` itself
    when that is already so."""
    content = tuple(b.packed() for b in message.content)
    if message.calibration is None and all(
        a is b for a, b in zip(content, message.content, strict=True)
    ):
        return message
    return _replace_message(message, content=content, calibration=None)
