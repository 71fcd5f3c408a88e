"""Token counting interface.

Counts are computed once, when a message is appended, and stored with it;
building the model input only sums stored counts.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Protocol

from ctxwarden.core.images import image_tokens
from ctxwarden.core.messages import ContentKind, Message


class Tokenizer(Protocol):
    @property
    def spec(self) -> str:
        """The spec string that selects this tokenizer, e.g. ``tiktoken:o200k_base``."""
        ...

    @property
    def exact(self) -> bool:
        """True when counts are a real BPE tokenization, False for estimates."""
        ...

    def count(self, text: str) -> int: ...


def utf16_length(text: str) -> int:
    """Length in UTF-16 code units, as JavaScript counts it (an emoji is 2)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


class HeuristicTokenizer:
    """About four characters per token: cheap, deterministic, model-agnostic.

    Characters are UTF-16 code units, like pi-mono's estimate, so cut points
    match it for any text.
    """

    @property
    def spec(self) -> str:
        return "heuristic"

    @property
    def exact(self) -> bool:
        return False

    def count(self, text: str) -> int:
        return math.ceil(utf16_length(text) / 4)


def message_text(message: Message) -> str:
    """The text of a message that a tokenizer is charged for (images excluded)."""
    parts: list[str] = []
    for block in message.content:
        if block.kind is ContentKind.TEXT or block.kind is ContentKind.THINKING:
            parts.append(block.text)
        elif block.kind is ContentKind.TOOL_CALL:
            parts.append(block.tool_name)
            parts.append(block.arguments_json)
        elif block.kind is ContentKind.PROVIDER:
            parts.append(block.provider_json)
    return "".join(parts)


def count_message(
    message: Message, tokenizer: Tokenizer, *, framing: int = 0, image_rule: str = "default"
) -> int:
    """Tokens one message costs: its text (thinking and tool calls included),
    the provider's per-message framing, and each image by the provider's rule."""
    images = sum(
        image_tokens(image_rule, b.data) for b in message.content if b.kind is ContentKind.IMAGE
    )
    return tokenizer.count(message_text(message)) + framing + images


@dataclass(frozen=True, slots=True)
class CountingProfile:
    """Everything that determines a stored token count."""

    tokenizer: Tokenizer
    framing: int = 0
    reply: int = 0
    image_rule: str = "default"
    key: str = field(init=False, repr=False, compare=False)
    """Recorded with each count; a different key means "recount". Made once:
    every hot message points to it."""

    def __post_init__(self) -> None:
        key = self.tokenizer.spec
        if self.framing != 0 or self.image_rule != "default":
            key = f"{key}|{self.framing}|{self.image_rule}"
        object.__setattr__(self, "key", sys.intern(key))

    def message(self, message: Message) -> int:
        return count_message(
            message, self.tokenizer, framing=self.framing, image_rule=self.image_rule
        )


def count_text(text: str, tokenizer: Tokenizer) -> int:
    return tokenizer.count(text) if text else 0
