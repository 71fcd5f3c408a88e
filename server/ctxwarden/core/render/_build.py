"""The frame a provider renderer builds in: its job, its media and its turns."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Self

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
from ctxwarden.core.view import Notice


@dataclass(frozen=True, slots=True)
class Job:
    """What one rendering takes, and where its notices and rewritten ids go."""

    system_prompt: str
    tools: Sequence[ToolDefinition]
    model: str
    """The model about to be called (thinking goes back only to the model that made it)."""
    notes: Notes
    ids: ToolIds

    def copy(self) -> Job:
        """The same job with its own notices and ids, for a rendering that branches off."""
        return replace(self, notes=self.notes.copy(), ids=self.ids.copy())


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


@dataclass(frozen=True, slots=True)
class Finish:
    """How a rendering ends, without changing the rendering itself."""

    rest: list[JsonObject]
    """Items after the done ones: the open turn, pending moved images, ..."""
    notes: list[Notice]
    """Notices of the ending (after those of the messages)."""
    changed: tuple[int, JsonObject] | None = None
    """A done item that ends differently (Anthropic's cache breakpoint on the last
    user turn): its index and its final form. Items from there on may change in
    a later rendering."""


class Renderer:
    """A provider rendering that grows one message at a time.

    ``feed`` renders a message; items that nothing later can change move to
    ``done`` (the caller takes them from there and serialises each once).
    ``finish`` says how the rendering ends now without changing it, so the
    same renderer can take more messages afterwards: an append renders only
    the new messages. ``frame`` is the body around the item array.
    """

    key: ClassVar[str]
    """The body key of the item array: messages, input or contents."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.done: list[JsonObject] = []

    def feed(self, message: Message) -> None:
        raise NotImplementedError

    def finish(self) -> Finish:
        return Finish([], [])

    def frame(self, notes: Notes) -> tuple[JsonObject, JsonObject]:
        """The body's keys before and after the item array (tool notices on ``notes``)."""
        raise NotImplementedError

    def copy(self) -> Self:
        """An independent renderer in the same state (for messages that may still change)."""
        other = type(self).__new__(type(self))
        other.job = self.job.copy()
        other.done = list(self.done)
        self._copy_into(other)
        return other

    def _copy_into(self, other: Self) -> None:
        """Copy the subclass's own state into ``other``."""


class Turns:
    """Anthropic/Gemini turns: roles alternate, the first turn is the user's.

    Consecutive messages that map to the same role are merged into one turn,
    blocks appended in order, so only the last turn is open; the others are
    done. When the first turn is not the user's, a user "(continued)" turn goes
    first (its notice comes at the end, see ``finish_notes``).
    """

    def __init__(self, blocks_key: str, continued: JsonObject, needs: str) -> None:
        self._key = blocks_key
        self._continued = continued
        self._needs = needs
        self.inserted_seq: int | None = None
        """The seq of the first message, when a "(continued)" turn went before it."""
        self.open: JsonObject | None = None
        self.count = 0
        """Turns so far, the open one included."""
        self.last_user: tuple[int, JsonObject] | None = None
        """The index and the turn of the last user turn."""

    def add(
        self,
        role: str,
        blocks: list[JsonObject],
        message: Message,
        job: Job,
        done: list[JsonObject],
    ) -> None:
        """Append ``message``'s blocks as a ``role`` turn (an omission notice when empty)."""
        if not blocks:
            job.notes.omitted(message)
            return
        if self.open is not None and self.open["role"] == role:
            self.open[self._key].extend(blocks)
            return
        if self.open is None and role != "user":
            continued: JsonObject = {"role": "user", self._key: [dict(self._continued)]}
            done.append(continued)
            self.last_user = (self.count, continued)
            self.inserted_seq = message.seq
            self.count += 1
        elif self.open is not None:
            done.append(self.open)
        self.open = {"role": role, self._key: blocks}
        if role == "user":
            self.last_user = (self.count, self.open)
        self.count += 1

    def finish_notes(self) -> list[Notice]:
        if self.inserted_seq is None:
            return []
        detail = f"{self._needs}; inserted {CONTINUED_TEXT!r}"
        return [Notice(FIRST_MESSAGE_INSERTED, self.inserted_seq, detail)]

    def copy(self) -> Turns:
        other = Turns(self._key, self._continued, self._needs)
        other.inserted_seq = self.inserted_seq
        other.count = self.count
        other.last_user = self.last_user
        if self.open is not None:
            other.open = {"role": self.open["role"], self._key: list(self.open[self._key])}
            if self.last_user is not None and self.last_user[1] is self.open:
                other.last_user = (self.last_user[0], other.open)
        return other
