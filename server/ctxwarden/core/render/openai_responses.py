"""OpenAI Responses: ``{"instructions": ..., "input": [...], "tools": [...]}``.

- ``instructions`` is the system prompt (left out when it is empty).
- A user message is ``{"role": "user", "content": [input_text | input_image]}``.
- An assistant message becomes items in block order: each text block an
  ``{"role": "assistant", "content": text}`` message (the SDK's
  EasyInputMessageParam; an ``output_text`` part list is only valid on a
  ResponseOutputMessageParam, which needs the provider's message id and
  status), each tool call a ``function_call`` item.
- Reasoning items need the provider's ``rs_`` item id, which ctxwarden does
  not keep: thinking is dropped with a THINKING_DROPPED notice.
- A tool result is a ``function_call_output`` whose ``output`` is the text, or,
  when it has images, a list of ``input_text`` and ``input_image`` items (the
  API takes images in tool output, so nothing moves).
- call_id longer than 64 characters (the API's limit) gets a stand-in.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxwarden.core.messages import ContentKind, Message, Role
from ctxwarden.core.render._common import (
    EMPTY_MESSAGE_OMITTED,
    OPENAI_IMAGE_TYPES,
    JsonObject,
    Notes,
    ToolIds,
    arguments_text,
    data_url,
    drop_thinking,
    image_placeholder,
    tool_schema,
)
from ctxwarden.core.session import ToolDefinition

PROVIDER = "OpenAI Responses"


def _text(text: str) -> JsonObject:
    return {"type": "input_text", "text": text}


def _parts(message: Message, notes: Notes) -> list[JsonObject]:
    parts: list[JsonObject] = []
    for block in message.content:
        if block.kind is ContentKind.TEXT and block.text:
            parts.append(_text(block.text))
        elif block.kind is ContentKind.IMAGE:
            placeholder = image_placeholder(block, OPENAI_IMAGE_TYPES, PROVIDER, message.seq, notes)
            if placeholder is None:
                parts.append(
                    {"type": "input_image", "image_url": data_url(block), "detail": "auto"}
                )
            else:
                parts.append(_text(placeholder))
    return parts


def _assistant(message: Message, ids: ToolIds, notes: Notes) -> list[JsonObject]:
    items: list[JsonObject] = []
    thinking = 0
    for block in message.content:
        if block.kind is ContentKind.TEXT and block.text:
            items.append({"role": "assistant", "content": block.text})
        elif block.kind is ContentKind.TOOL_CALL:
            items.append(
                {
                    "type": "function_call",
                    "call_id": ids.call(block.tool_call_id),
                    "name": block.tool_name,
                    "arguments": arguments_text(block),
                }
            )
        elif block.kind is ContentKind.THINKING:
            thinking += 1
    drop_thinking(
        message,
        thinking,
        f"{PROVIDER} reasoning items need the provider's item id, which is not stored",
        notes,
    )
    return items


def render_openai_responses(
    system_prompt: str,
    tools: Sequence[ToolDefinition],
    messages: Sequence[Message],
    *,
    model: str,
    notes: Notes,
    ids: ToolIds,
) -> JsonObject:
    del model  # nothing here depends on who made a message
    items: list[JsonObject] = []
    for message in messages:
        if message.role is Role.TOOL_RESULT:
            parts = _parts(message, notes)
            has_image = any(b.kind is ContentKind.IMAGE for b in message.content)
            output: object = parts if has_image else message.text
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": ids.result(message.tool_call_id),
                    "output": output,
                }
            )
            continue
        if message.role is Role.USER:
            parts = _parts(message, notes)
            rendered = [{"role": "user", "content": parts}] if parts else []
        else:
            rendered = _assistant(message, ids, notes)
        if not rendered:
            notes.add(EMPTY_MESSAGE_OMITTED, message.seq, "nothing left to send")
        items.extend(rendered)
    body: JsonObject = {}
    if system_prompt:
        body["instructions"] = system_prompt
    body["input"] = items
    if tools:
        body["tools"] = [_tool(t, notes) for t in tools]
    return body


def _tool(tool: ToolDefinition, notes: Notes) -> JsonObject:
    out: JsonObject = {"type": "function", "name": tool.name}
    if tool.description:
        out["description"] = tool.description
    out["parameters"] = tool_schema(tool, notes)
    out["strict"] = False
    return out
