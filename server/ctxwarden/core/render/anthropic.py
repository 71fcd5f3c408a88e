"""Anthropic Messages: ``{"system": [...], "messages": [...], "tools": [...]}``.

- ``system`` is one text block (left out when the prompt is empty).
- Roles alternate: consecutive messages that map to the same role are merged
  into one, blocks appended in order. Tool results are ``tool_result`` blocks
  of a user message, so a user text after them joins that message after the
  results (where Anthropic wants text). Every message's ``role`` comes before
  its ``content``, so a merge only appends at the end of the JSON.
- The first message must be a user message: when the input begins with the
  assistant, a user message "(continued)" goes first (FIRST_MESSAGE_INSERTED).
- Tool calls are ``tool_use`` blocks with the arguments parsed; ids are
  rewritten where Anthropic would reject them (see ``anthropic_tool_id``),
  the same way on the ``tool_use`` and its ``tool_result``.
- Thinking goes back only to the model that made it: a thinking block is
  sent as ``thinking`` (with its signature) or ``redacted_thinking`` (data:
  the signature, else the text) when the message's ``model`` is the
  ``model`` being called and it has a signature (redacted: some data).
  Otherwise it is dropped with a THINKING_DROPPED notice: text made by
  another model must not pose as this model's reasoning, and Anthropic
  rejects a thinking block whose signature it did not make.
- Images are base64 ``image`` blocks (JPEG, PNG, GIF, WebP; other types are a
  text placeholder with IMAGE_UNSUPPORTED).
- PROVIDER blocks of family ``anthropic`` (server-tool blocks such as
  ``server_tool_use`` and ``web_search_tool_result``, documents, ...) are sent
  as stored, in their place; those of another family are dropped with
  PROVIDER_CONTENT_DROPPED.
- ``cache_control`` (ephemeral) marks at most four breakpoints: the system
  block, the last tool, the last block of the summary message and the last
  block of the last user message.
"""

from __future__ import annotations

from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role
from ctxwarden.core.render._build import Finish, Job, Media, Renderer, Turns
from ctxwarden.core.render._common import (
    ANTHROPIC_IMAGE_TYPES,
    CONTINUED_TEXT,
    JsonObject,
    Notes,
    b64,
    call_arguments,
    drop_thinking,
    is_summary,
    mime_type,
    other_model,
    same_model,
    tool_entry,
)

PROVIDER = "Anthropic"
FAMILY = "anthropic"


def _cache() -> JsonObject:
    return {"type": "ephemeral"}


def _text(text: str) -> JsonObject:
    return {"type": "text", "text": text}


def _image(block: ContentBlock) -> JsonObject:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": mime_type(block), "data": b64(block.data)},
    }


_MEDIA = Media(PROVIDER, ANTHROPIC_IMAGE_TYPES, _text, _image, FAMILY)
"""Text (non-empty: Anthropic rejects empty text blocks) and image blocks."""


def _thinking(block: ContentBlock) -> JsonObject | None:
    if block.redacted:
        data = block.signature or block.text
        return {"type": "redacted_thinking", "data": data} if data else None
    if not block.signature:
        return None
    return {"type": "thinking", "thinking": block.text, "signature": block.signature}


def _user(message: Message, job: Job) -> list[JsonObject]:
    blocks = _MEDIA.parts(message, job.notes)
    if blocks and is_summary(message):
        blocks[-1]["cache_control"] = _cache()
    return blocks


def _assistant(message: Message, job: Job) -> list[JsonObject]:
    blocks: list[JsonObject] = []
    dropped = 0
    keep = same_model(message, job.model)
    for block in message.content:
        if block.kind is ContentKind.TEXT and block.text:
            blocks.append(_text(block.text))
        elif block.kind is ContentKind.TOOL_CALL:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": job.ids.call(block.tool_call_id),
                    "name": block.tool_name,
                    "input": call_arguments(block, message.seq, job.notes),
                }
            )
        elif block.kind is ContentKind.THINKING:
            rendered = _thinking(block) if keep else None
            if rendered is None:
                dropped += 1
            else:
                blocks.append(rendered)
        elif block.kind is ContentKind.PROVIDER:
            blocks.extend(_MEDIA.provider_items(block, message.seq, job.notes))
    if dropped:
        reason = "no signature to send back" if keep else other_model(message, job.model)
        drop_thinking(message, dropped, reason, job.notes)
    return blocks


def _tool_result(message: Message, job: Job) -> JsonObject:
    out: JsonObject = {"type": "tool_result", "tool_use_id": job.ids.result(message.tool_call_id)}
    content = _MEDIA.parts(message, job.notes)
    if content:
        out["content"] = content
    elif message.is_error:
        # Anthropic rejects an error result without content.
        out["content"] = [_text("(no output)")]
    out["is_error"] = message.is_error
    return out


class AnthropicRenderer(Renderer):
    key = "messages"

    def __init__(self, job: Job) -> None:
        super().__init__(job)
        needs = "Anthropic needs a user message first"
        self._turns = Turns("content", _text(CONTINUED_TEXT), needs)

    def feed(self, message: Message) -> None:
        job, turns = self.job, self._turns
        if message.role is Role.TOOL_RESULT:
            turns.add("user", [_tool_result(message, job)], message, job, self.done)
        elif message.role is Role.USER:
            turns.add("user", _user(message, job), message, job, self.done)
        else:
            turns.add("assistant", _assistant(message, job), message, job, self.done)

    def finish(self) -> Finish:
        turns = self._turns
        rest = [] if turns.open is None else [turns.open]
        changed = None
        if turns.last_user is not None:
            # The breakpoint goes on a copy: a later user turn takes it over.
            index, turn = turns.last_user
            blocks = list(turn["content"])
            blocks[-1] = {**blocks[-1], "cache_control": _cache()}
            marked = {"role": "user", "content": blocks}
            if turn is turns.open:
                rest = [marked]
            else:
                changed = (index, marked)
        return Finish(rest, turns.finish_notes(), changed)

    def frame(self, notes: Notes) -> tuple[JsonObject, JsonObject]:
        job = self.job
        before: JsonObject = {}
        if job.system_prompt:
            before["system"] = [
                {"type": "text", "text": job.system_prompt, "cache_control": _cache()}
            ]
        after: JsonObject = {}
        if job.tools:
            tools = [tool_entry(t, "input_schema", notes) for t in job.tools]
            tools[-1]["cache_control"] = _cache()
            after["tools"] = tools
        return before, after

    def _copy_into(self, other: AnthropicRenderer) -> None:
        other._turns = self._turns.copy()
