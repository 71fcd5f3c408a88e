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
- Tool-call ids longer than 40 characters (the API's limit) are replaced
  with a stand-in, consistently for the call and its result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxwarden.core.messages import ContentKind, Message, Role
from ctxwarden.core.render._common import (
    EMPTY_MESSAGE_OMITTED,
    OPENAI_IMAGE_TYPES,
    TOOL_RESULT_IMAGES_MOVED,
    JsonObject,
    Notes,
    ToolIds,
    arguments_text,
    data_url,
    drop_thinking,
    image_placeholder,
    texts,
    tool_schema,
)
from ctxwarden.core.session import ToolDefinition

PROVIDER = "OpenAI Chat Completions"


def _image_part(url: str) -> JsonObject:
    return {"type": "image_url", "image_url": {"url": url}}


def _text_part(text: str) -> JsonObject:
    return {"type": "text", "text": text}


def _user_parts(message: Message, notes: Notes) -> list[JsonObject]:
    parts: list[JsonObject] = []
    for block in message.content:
        if block.kind is ContentKind.TEXT and block.text:
            parts.append(_text_part(block.text))
        elif block.kind is ContentKind.IMAGE:
            placeholder = image_placeholder(block, OPENAI_IMAGE_TYPES, PROVIDER, message.seq, notes)
            parts.append(
                _image_part(data_url(block)) if placeholder is None else _text_part(placeholder)
            )
    return parts


def _user(message: Message, notes: Notes) -> JsonObject | None:
    parts = _user_parts(message, notes)
    if not parts:
        return None
    if len(parts) == 1 and parts[0]["type"] == "text":
        return {"role": "user", "content": parts[0]["text"]}
    return {"role": "user", "content": parts}


def _assistant(message: Message, ids: ToolIds, notes: Notes) -> JsonObject | None:
    thinking = sum(1 for b in message.content if b.kind is ContentKind.THINKING)
    drop_thinking(message, thinking, f"{PROVIDER} cannot take reasoning back", notes)
    text = texts(message.content)
    content: Any = None
    if len(text) == 1:
        content = text[0]
    elif text:
        content = [_text_part(t) for t in text]
    out: JsonObject = {"role": "assistant", "content": content}
    calls = [
        {
            "id": ids.call(b.tool_call_id),
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


def render_openai_chat(
    system_prompt: str,
    tools: Sequence[ToolDefinition],
    messages: Sequence[Message],
    *,
    model: str,
    notes: Notes,
    ids: ToolIds,
) -> JsonObject:
    del model  # nothing here depends on who made a message
    out: list[JsonObject] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    moved: list[JsonObject] = []

    def flush_moved() -> None:
        if moved:
            out.append({"role": "user", "content": list(moved)})
            moved.clear()

    for message in messages:
        if message.role is Role.TOOL_RESULT:
            call_id = ids.result(message.tool_call_id)
            out.append({"role": "tool", "tool_call_id": call_id, "content": message.text})
            images = [b for b in message.content if b.kind is ContentKind.IMAGE]
            if images:
                label = f"[image output of tool call {call_id} ({message.tool_name})]"
                moved.append(_text_part(label))
                for block in images:
                    placeholder = image_placeholder(
                        block, OPENAI_IMAGE_TYPES, PROVIDER, message.seq, notes
                    )
                    moved.append(
                        _image_part(data_url(block))
                        if placeholder is None
                        else _text_part(placeholder)
                    )
                notes.add(
                    TOOL_RESULT_IMAGES_MOVED,
                    message.seq,
                    f"{len(images)} image(s) of tool call {message.tool_call_id!r} sent in a "
                    "user message after the tool messages (tool messages carry text only)",
                )
            continue
        flush_moved()
        rendered = (
            _user(message, notes) if message.role is Role.USER else _assistant(message, ids, notes)
        )
        if rendered is None:
            notes.add(EMPTY_MESSAGE_OMITTED, message.seq, "nothing left to send")
            continue
        out.append(rendered)
    flush_moved()
    body: JsonObject = {"messages": out}
    if tools:
        body["tools"] = [_tool(t, notes) for t in tools]
    return body


def _tool(tool: ToolDefinition, notes: Notes) -> JsonObject:
    function: JsonObject = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool_schema(tool, notes)
    return {"type": "function", "function": function}
