"""OpenAI Responses: ``{"instructions": ..., "input": [...], "tools": [...]}``.

- ``instructions`` is the system prompt (left out when it is empty).
- A user message is ``{"role": "user", "content": [input_text | input_image]}``.
- An assistant message becomes items in block order: each text block an
  ``{"role": "assistant", "content": text}`` message (the SDK's
  EasyInputMessageParam; an ``output_text`` part list is only valid on a
  ResponseOutputMessageParam, which needs the provider's message id and
  status), each tool call a ``function_call`` item.
- A thinking block that holds a Responses reasoning item (what ingest reads
  one into: its ``rs_`` id, encrypted content and summary, see
  ``ctxwarden.core.responses_reasoning``) goes back as that item, verbatim, in
  its place (before the call it led to): a stateless loop (``store: false``)
  keeps its reasoning between tool calls. Other thinking (another provider's)
  is dropped with a THINKING_DROPPED notice.
- A tool result is a ``function_call_output`` whose ``output`` is the text, or,
  when it has images, a list of ``input_text`` and ``input_image`` items (the
  API takes images in tool output, so nothing moves).
- PROVIDER blocks of family ``openai-responses`` are sent as stored, in
  their place: in an assistant message an input item of its own (e.g. a
  ``web_search_call``), in user or tool-result content a content part. Those
  of another family are dropped with PROVIDER_CONTENT_DROPPED.
- call_id longer than 64 characters (the API's limit) gets a stand-in.
"""

from __future__ import annotations

from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role
from ctxwarden.core.render._build import Job, Media, Renderer
from ctxwarden.core.render._common import (
    OPENAI_IMAGE_TYPES,
    JsonObject,
    Notes,
    arguments_text,
    data_url,
    drop_thinking,
    tool_entry,
)
from ctxwarden.core.responses_reasoning import reasoning_item
from ctxwarden.core.session import ToolDefinition

PROVIDER = "OpenAI Responses"
FAMILY = "openai-responses"


def _text(text: str) -> JsonObject:
    return {"type": "input_text", "text": text}


def _image(block: ContentBlock) -> JsonObject:
    return {"type": "input_image", "image_url": data_url(block), "detail": "auto"}


_MEDIA = Media(PROVIDER, OPENAI_IMAGE_TYPES, _text, _image, FAMILY)


def _assistant(message: Message, job: Job) -> list[JsonObject]:
    items: list[JsonObject] = []
    thinking = 0
    for block in message.content:
        if block.kind is ContentKind.TEXT and block.text:
            items.append({"role": "assistant", "content": block.text})
        elif block.kind is ContentKind.TOOL_CALL:
            items.append(
                {
                    "type": "function_call",
                    "call_id": job.ids.call(block.tool_call_id),
                    "name": block.tool_name,
                    "arguments": arguments_text(block),
                }
            )
        elif block.kind is ContentKind.THINKING:
            item = reasoning_item(block.text, block.signature)
            if item is None:
                thinking += 1
            else:
                items.append(item)
        elif block.kind is ContentKind.PROVIDER:
            items.extend(_MEDIA.provider_items(block, message.seq, job.notes))
    drop_thinking(
        message,
        thinking,
        f"not an {PROVIDER} reasoning item (its signature holds no reasoning item id)",
        job.notes,
    )
    return items


_LISTED = frozenset({ContentKind.IMAGE, ContentKind.PROVIDER})
"""Content that makes a function_call_output a list rather than a string."""


def _function_call_output(message: Message, job: Job) -> JsonObject:
    parts = _MEDIA.parts(message, job.notes)
    has_image = any(b.kind in _LISTED for b in message.content)
    output: object = parts if has_image else message.text
    return {
        "type": "function_call_output",
        "call_id": job.ids.result(message.tool_call_id),
        "output": output,
    }


class OpenAIResponsesRenderer(Renderer):
    key = "input"

    def feed(self, message: Message) -> None:
        job = self.job
        if message.role is Role.TOOL_RESULT:
            self.done.append(_function_call_output(message, job))
            return
        if message.role is Role.USER:
            parts = _MEDIA.parts(message, job.notes)
            rendered = [{"role": "user", "content": parts}] if parts else []
        else:
            rendered = _assistant(message, job)
        if not rendered:
            job.notes.omitted(message)
        self.done.extend(rendered)

    def frame(self, notes: Notes) -> tuple[JsonObject, JsonObject]:
        before: JsonObject = {}
        if self.job.system_prompt:
            before["instructions"] = self.job.system_prompt
        after: JsonObject = {}
        if self.job.tools:
            after["tools"] = [_tool(t, notes) for t in self.job.tools]
        return before, after


def _tool(tool: ToolDefinition, notes: Notes) -> JsonObject:
    out: JsonObject = {"type": "function", **tool_entry(tool, "parameters", notes)}
    out["strict"] = False
    return out
