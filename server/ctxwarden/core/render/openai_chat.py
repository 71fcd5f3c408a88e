"""OpenAI Chat Completions: ``{"messages": [...], "tools": [...]}``.

- The system prompt is a leading ``system`` message (none when it is empty).
- A user message whose only content is one text block is a string; anything
  else is a list of ``text`` and ``image_url`` parts (images as data URLs).
- An assistant message is ``content`` (null, one string, or text parts when
  there are several text blocks) plus ``tool_calls`` with the arguments as the
  JSON string stored. Thinking cannot be sent to Chat Completions: dropped,
  with a THINKING_DROPPED notice.
- A tool result is a ``tool`` message with its text. A tool message carries
  text only, so the images of the tool results that answer one assistant
  message follow, after the last of those ``tool`` messages (Chat Completions
  wants them right after the assistant message), in one user message: a label
  text part naming the call, then the images. Each such result gets a
  TOOL_RESULT_IMAGES_MOVED notice.
- PROVIDER blocks of family ``openai-chat`` are content parts sent as
  stored, in their place (user content, or assistant content, which is then
  a part list); those of another family, and any in a tool result, are
  dropped with PROVIDER_CONTENT_DROPPED.
- Tool-call ids longer than 40 characters (the API's limit) are replaced
  with a stand-in, consistently for the call and its result.
"""

from __future__ import annotations

from typing import Any

from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role
from ctxwarden.core.render._build import Finish, Job, Media, Renderer
from ctxwarden.core.render._common import (
    OPENAI_IMAGE_TYPES,
    TOOL_RESULT_IMAGES_MOVED,
    JsonObject,
    Notes,
    arguments_text,
    data_url,
    drop_provider,
    drop_thinking,
    texts,
    tool_entry,
)

PROVIDER = "OpenAI Chat Completions"
FAMILY = "openai-chat"


def _text_part(text: str) -> JsonObject:
    return {"type": "text", "text": text}


def _image_part(block: ContentBlock) -> JsonObject:
    return {"type": "image_url", "image_url": {"url": data_url(block)}}


_MEDIA = Media(PROVIDER, OPENAI_IMAGE_TYPES, _text_part, _image_part, FAMILY)


def _user(message: Message, job: Job) -> JsonObject | None:
    parts = _MEDIA.parts(message, job.notes)
    if not parts:
        return None
    if len(parts) == 1 and parts[0].get("type") == "text" and "text" in parts[0]:
        return {"role": "user", "content": parts[0]["text"]}
    return {"role": "user", "content": parts}


def _assistant(message: Message, job: Job) -> JsonObject | None:
    thinking = sum(1 for b in message.content if b.kind is ContentKind.THINKING)
    drop_thinking(message, thinking, f"{PROVIDER} cannot take reasoning back", job.notes)
    parts: list[JsonObject] = []
    for block in message.content:
        if block.kind is ContentKind.TEXT and block.text:
            parts.append(_text_part(block.text))
        elif block.kind is ContentKind.PROVIDER:
            parts.extend(_MEDIA.provider_items(block, message.seq, job.notes))
    content: Any = None
    text = texts(message.content)
    if len(parts) == 1 and len(text) == 1:
        content = text[0]
    elif parts:
        content = parts
    out: JsonObject = {"role": "assistant", "content": content}
    calls = [
        {
            "id": job.ids.call(b.tool_call_id),
            "type": "function",
            "function": {"name": b.tool_name, "arguments": arguments_text(b)},
        }
        for b in message.tool_calls
    ]
    if calls:
        out["tool_calls"] = calls
    elif content is None:
        return None
    return out


def _tool_message(message: Message, job: Job, moved: list[JsonObject]) -> JsonObject:
    """The ``tool`` message of a result; its images (labelled) go on ``moved``."""
    notes = job.notes
    call_id = job.ids.result(message.tool_call_id)
    images = [b for b in message.content if b.kind is ContentKind.IMAGE]
    for block in message.content:
        if block.kind is ContentKind.PROVIDER:
            drop_provider(block, "a tool message carries text only", message.seq, notes)
    if images:
        label = f"[image output of tool call {call_id} ({message.tool_name})]"
        moved.append(_text_part(label))
        moved.extend(_MEDIA.image_or_placeholder(b, message.seq, notes) for b in images)
        notes.add(
            TOOL_RESULT_IMAGES_MOVED,
            message.seq,
            f"{len(images)} image(s) of tool call {message.tool_call_id!r} sent in a "
            "user message after the tool messages (tool messages carry text only)",
        )
    return {"role": "tool", "tool_call_id": call_id, "content": message.text}


class OpenAIChatRenderer(Renderer):
    key = "messages"

    def __init__(self, job: Job) -> None:
        super().__init__(job)
        self._moved: list[JsonObject] = []
        """Images of the tool results since the last assistant message."""
        if job.system_prompt:
            self.done.append({"role": "system", "content": job.system_prompt})

    def feed(self, message: Message) -> None:
        if message.role is Role.TOOL_RESULT:
            self.done.append(_tool_message(message, self.job, self._moved))
            return
        if self._moved:
            self.done.append(_moved_images(self._moved))
            self._moved = []
        if message.role is Role.USER:
            rendered = _user(message, self.job)
        else:
            rendered = _assistant(message, self.job)
        if rendered is None:
            self.job.notes.omitted(message)
        else:
            self.done.append(rendered)

    def finish(self) -> Finish:
        return Finish([_moved_images(self._moved)] if self._moved else [], [])

    def frame(self, notes: Notes) -> tuple[JsonObject, JsonObject]:
        after: JsonObject = {}
        if self.job.tools:
            after["tools"] = [
                {"type": "function", "function": tool_entry(t, "parameters", notes)}
                for t in self.job.tools
            ]
        return {}, after

    def _copy_into(self, other: OpenAIChatRenderer) -> None:
        other._moved = list(self._moved)


def _moved_images(moved: list[JsonObject]) -> JsonObject:
    return {"role": "user", "content": list(moved)}
