"""The frame a provider renderer builds in: its job, its media and its turns."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxwarden.core.messages import ContentBlock, ContentKind, Message
from ctxwarden.core.render._common import (
    CONTINUED_TEXT,
    FIRST_MESSAGE_INSERTED,
    JsonObject,
    Notes,
    ToolIds,
    image_placeholder,
    provider_items,
)
from ctxwarden.core.session import ToolDefinition


@dataclass(frozen=True, slots=True)
class Job:
    """What one rendering takes, and where its notices and rewritten ids go."""

    system_prompt: str
    tools: Sequence[ToolDefinition]
    messages: Sequence[Message]
    model: str
    """The model about to be called (thinking goes back only to the model that made it)."""
    notes: Notes
    ids: ToolIds


@dataclass(frozen=True, slots=True)
class Media:
    """How one provider writes the text and image blocks of user content."""

    provider: str
    """The provider's name, for notices."""
    accepted: frozenset[str]
    """The image media types the provider takes."""
    text: Callable[[str], JsonObject]
    image: Callable[[ContentBlock], JsonObject]
    family: str
    """The PROVIDER block family this wire format sends back."""

    def image_or_placeholder(self, block: ContentBlock, seq: int, notes: Notes) -> JsonObject:
        placeholder = image_placeholder(block, self.accepted, self.provider, seq, notes)
        return self.image(block) if placeholder is None else self.text(placeholder)

    def provider_items(self, block: ContentBlock, seq: int, notes: Notes) -> list[JsonObject]:
        return provider_items(block, self.family, self.provider, seq, notes)

    def parts(self, message: Message, notes: Notes) -> list[JsonObject]:
        """The message's non-empty texts, its images (or their placeholders) and
        its provider items of this family, in order."""
        parts: list[JsonObject] = []
        for block in message.content:
            if block.kind is ContentKind.TEXT and block.text:
                parts.append(self.text(block.text))
            elif block.kind is ContentKind.IMAGE:
                parts.append(self.image_or_placeholder(block, message.seq, notes))
            elif block.kind is ContentKind.PROVIDER:
                parts.extend(self.provider_items(block, message.seq, notes))
        return parts


class Turns:
    """Anthropic/Gemini turns: roles alternate, the first turn is the user's.

    Consecutive messages that map to the same role are merged into one turn,
    blocks appended in order. Every turn's ``role`` comes before its blocks,
    so a merge only appends at the end of the JSON.
    """

    def __init__(self, blocks_key: str, notes: Notes) -> None:
        self._key = blocks_key
        self._notes = notes
        self._first_seq: int | None = None
        self.items: list[JsonObject] = []

    def add(self, role: str, blocks: list[JsonObject], message: Message) -> None:
        """Append ``message``'s blocks as a ``role`` turn (an omission notice when empty)."""
        if not blocks:
            self._notes.omitted(message)
            return
        if self._first_seq is None:
            self._first_seq = message.seq
        if self.items and self.items[-1]["role"] == role:
            self.items[-1][self._key].extend(blocks)
        else:
            self.items.append({"role": role, self._key: blocks})

    def user_first(self, continued: JsonObject, needs: str) -> None:
        """When the first turn is not the user's, put a user "(continued)" turn first."""
        if self.items and self.items[0]["role"] != "user":
            self.items.insert(0, {"role": "user", self._key: [continued]})
            self._notes.add(
                FIRST_MESSAGE_INSERTED,
                self._first_seq or 0,
                f"{needs}; inserted {CONTINUED_TEXT!r}",
            )
