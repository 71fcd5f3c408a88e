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
- ``cache_control`` (ephemeral) marks at most four breakpoints: the system
  block, the last tool, the last block of the summary message and the last
  block of the last user message.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role
from ctxwarden.core.render._common import (
    ANTHROPIC_IMAGE_TYPES,
    CONTINUED_TEXT,
    EMPTY_MESSAGE_OMITTED,
    FIRST_MESSAGE_INSERTED,
    JsonObject,
    Notes,
    ToolIds,
    b64,
    call_arguments,
    drop_thinking,
    image_placeholder,
    is_summary,
    mime_type,
    same_model,
    tool_schema,
)
from ctxwarden.core.session import ToolDefinition

PROVIDER = "Anthropic"


def _cache() -> JsonObject:
    return {"type": "ephemeral"}


def _text(text: str) -> JsonObject:
    return {"type": "text", "text": text}


def _media(block: ContentBlock, seq: int, notes: Notes) -> JsonObject:
    """A text or image block of user content or tool-result content."""
    if block.kind is ContentKind.TEXT:
        return _text(block.text)
    placeholder = image_placeholder(block, ANTHROPIC_IMAGE_TYPES, PROVIDER, seq, notes)
    if placeholder is not None:
        return _text(placeholder)
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": mime_type(block), "data": b64(block.data)},
    }


def _is_media(block: ContentBlock) -> bool:
    """Text (non-empty: Anthropic rejects empty text blocks) or an image."""
    return block.kind is ContentKind.IMAGE or (block.kind is ContentKind.TEXT and bool(block.text))


def _thinking(block: ContentBlock) -> JsonObject | None:
    if block.redacted:
        data = block.signature or block.text
        return {"type": "redacted_thinking", "data": data} if data else None
    if not block.signature:
        return None
    return {"type": "thinking", "thinking": block.text, "signature": block.signature}


def _assistant(message: Message, model: str, ids: ToolIds, notes: Notes) -> list[JsonObject]:
    blocks: list[JsonObject] = []
    dropped = 0
    keep = same_model(message, model)
    for block in message.content:
        if block.kind is ContentKind.TEXT and block.text:
            blocks.append(_text(block.text))
        elif block.kind is ContentKind.TOOL_CALL:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": ids.call(block.tool_call_id),
                    "name": block.tool_name,
                    "input": call_arguments(block, message.seq, notes),
                }
            )
        elif block.kind is ContentKind.THINKING:
            rendered = _thinking(block) if keep else None
            if rendered is None:
                dropped += 1
            else:
                blocks.append(rendered)
    if dropped:
        reason = (
            "no signature to send back"
            if keep
            else f"made by model {message.model or '(unknown)'!r}, not {model or '(unknown)'!r}"
        )
        drop_thinking(message, dropped, reason, notes)
    return blocks


def _tool_result(message: Message, ids: ToolIds, notes: Notes) -> JsonObject:
    out: JsonObject = {"type": "tool_result", "tool_use_id": ids.result(message.tool_call_id)}
    content = [_media(b, message.seq, notes) for b in message.content if _is_media(b)]
    if content:
        out["content"] = content
    elif message.is_error:
        # Anthropic rejects an error result without content.
        out["content"] = [_text("(no output)")]
    out["is_error"] = message.is_error
    return out


def render_anthropic(
    system_prompt: str,
    tools: Sequence[ToolDefinition],
    messages: Sequence[Message],
    *,
    model: str,
    notes: Notes,
    ids: ToolIds,
) -> JsonObject:
    out: list[JsonObject] = []
    first_seq: int | None = None

    def push(role: str, blocks: list[JsonObject], seq: int) -> None:
        nonlocal first_seq
        if first_seq is None:
            first_seq = seq
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for message in messages:
        if message.role is Role.TOOL_RESULT:
            push("user", [_tool_result(message, ids, notes)], message.seq)
            continue
        if message.role is Role.USER:
            blocks = [_media(b, message.seq, notes) for b in message.content if _is_media(b)]
            if blocks and is_summary(message):
                blocks[-1]["cache_control"] = _cache()
        else:
            blocks = _assistant(message, model, ids, notes)
        if not blocks:
            notes.add(EMPTY_MESSAGE_OMITTED, message.seq, "nothing left to send")
            continue
        push("user" if message.role is Role.USER else "assistant", blocks, message.seq)

    if out and out[0]["role"] == "assistant":
        out.insert(0, {"role": "user", "content": [_text(CONTINUED_TEXT)]})
        notes.add(
            FIRST_MESSAGE_INSERTED,
            first_seq or 0,
            f"Anthropic needs a user message first; inserted {CONTINUED_TEXT!r}",
        )
    for rendered in reversed(out):
        if rendered["role"] == "user":
            rendered["content"][-1]["cache_control"] = _cache()
            break

    body: JsonObject = {}
    if system_prompt:
        body["system"] = [{"type": "text", "text": system_prompt, "cache_control": _cache()}]
    body["messages"] = out
    if tools:
        rendered_tools = [_tool(t, notes) for t in tools]
        rendered_tools[-1]["cache_control"] = _cache()
        body["tools"] = rendered_tools
    return body


def _tool(tool: ToolDefinition, notes: Notes) -> JsonObject:
    out: JsonObject = {"name": tool.name}
    if tool.description:
        out["description"] = tool.description
    out["input_schema"] = tool_schema(tool, notes)
    return out
