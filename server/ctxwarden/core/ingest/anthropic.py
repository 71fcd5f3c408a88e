"""Anthropic Messages: a ``message``, its stream events, or input messages.

- Content: ``text`` is text, ``tool_use`` a tool call (its ``input`` as
  compact JSON text), ``thinking`` a thinking block with its signature and
  ``redacted_thinking`` a redacted thinking block whose signature is the
  block's ``data`` (what the renderer sends back).
- stop_reason: ``end_turn``, ``stop_sequence`` and ``pause_turn`` are STOP,
  ``max_tokens`` and ``model_context_window_exceeded`` LENGTH, ``tool_use``
  TOOL_USE, ``refusal`` ERROR; none is UNSPECIFIED (ABORTED when a stream
  ended without one).
- Usage: ``input_tokens`` (uncached already), ``output_tokens``,
  ``cache_read_input_tokens`` and ``cache_creation_input_tokens``; Anthropic
  reports no total.
- Streamed events are accumulated as the SDK's MessageStream does:
  ``message_start`` gives the message, ``content_block_start`` appends a
  block, text/thinking deltas are appended, ``signature_delta`` sets the
  signature, a tool call's ``input_json_delta`` texts are joined and parsed
  (its start ``input`` stands when there are none), and ``message_delta``
  sets the stop reason and overwrites the usage counts it carries.
- Input messages: ``user`` content (a string, or ``text``, base64 ``image``
  and ``tool_result`` blocks; each tool result is a message of its own, in
  block order) and ``assistant`` content. ``cache_control`` is ignored. A
  result's tool name comes from its call, when the call is among the items.
- Blocks ctxwarden does not model (server tools and their results such as
  ``server_tool_use`` and ``web_search_tool_result``, documents, search
  results, text with citations, images by URL or file, any other type) are
  PROVIDER blocks of family ``anthropic``: the block's JSON as sent, less
  ``cache_control``. Streamed, a ``server_tool_use``'s ``input_json_delta``
  texts are its ``input`` and ``citations_delta`` citations are appended to
  the text block's ``citations``, as the SDK does.
- Rejected: a block without a ``type``, and known blocks of the wrong shape.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

from ctxwarden.core.ingest._common import (
    image_block,
    mapped_stop,
    provider_block,
    text_block,
    thinking_block,
    tool_result,
)
from ctxwarden.core.ingest._json import (
    Obj,
    arguments_json,
    arguments_object,
    as_arr,
    as_obj,
    bad,
    decode_base64,
    dumps,
    unsupported,
)
from ctxwarden.core.ingest._messages import IngestedTurn, assistant_message, turn_of, user_messages
from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason, Usage

PROVIDER = "anthropic"
FAMILY = "anthropic"
"""The family of this wire format's PROVIDER blocks."""
_NOT_KEPT = ("cache_control",)


def _kept(block: Obj) -> ContentBlock:
    return provider_block(FAMILY, block.value, drop=_NOT_KEPT)


_STOP_REASONS = {
    "end_turn": StopReason.STOP,
    "stop_sequence": StopReason.STOP,
    "pause_turn": StopReason.STOP,
    "max_tokens": StopReason.LENGTH,
    "model_context_window_exceeded": StopReason.LENGTH,
    "tool_use": StopReason.TOOL_USE,
    "refusal": StopReason.ERROR,
}


def _stop(reason: str) -> tuple[StopReason, str]:
    return mapped_stop(_STOP_REASONS, reason, "stop_reason")


def _usage(o: Obj | None) -> Usage | None:
    if o is None:
        return None
    return Usage(
        input_tokens=o.count("input_tokens"),
        output_tokens=o.count("output_tokens"),
        cache_read_tokens=o.count("cache_read_input_tokens"),
        cache_write_tokens=o.count("cache_creation_input_tokens"),
    )


def _text(block: Obj) -> ContentBlock:
    if block.opt_arr("citations").value:
        block.string("text")
        return _kept(block)
    return text_block(block.string("text"))


def _assistant_block(block: Obj, arguments: str | None = None) -> ContentBlock:
    kind = block.kind()
    if kind == "text":
        return _text(block)
    if kind == "tool_use":
        if arguments is None:
            arguments = arguments_object(block.get("input"), block.at("input"))
        return ContentBlock.of_tool_call(
            block.nonempty_str("id"), block.nonempty_str("name"), arguments
        )
    if kind == "thinking":
        return thinking_block(block.string("thinking"), block.opt_str("signature"))
    if kind == "redacted_thinking":
        return thinking_block("", block.nonempty_str("data"), redacted=True)
    return _kept(block)


def ingest_response(body: object, path: str) -> IngestedTurn:
    if isinstance(body, list):
        return _stream(body, path)
    message = as_obj(body, path)
    kind = message.opt_str("type")
    if kind and kind != "message":
        raise bad(message.at("type"), f"expected 'message', got {kind!r}")
    blocks = [_assistant_block(b) for b in message.arr("content").objs()]
    return turn_of(
        message,
        blocks,
        _stop(message.opt_str("stop_reason")),
        _usage(message.opt_obj("usage")),
        provider=PROVIDER,
        streamed=False,
    )


_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def _stream(body: list[Any], path: str) -> IngestedTurn:
    events = as_arr(body, path)
    message: Obj | None = None
    blocks: list[tuple[dict[str, Any], str]] = []
    json_parts: dict[int, list[str]] = {}
    stop_reason: str | None = None
    usage: dict[str, Any] = {}
    error = ""
    for event in events.objs():
        kind = event.kind()
        if kind == "ping":
            continue
        if kind == "error":
            detail = event.opt_obj("error")
            error = (detail.opt_str("message") if detail else "") or "the stream reported an error"
            break
        if message is None:
            if kind != "message_start":
                raise bad(event.at("type"), f"expected message_start first, got {kind!r}")
            message = event.obj("message")
            start_usage = message.opt_obj("usage")
            usage = dict(start_usage.value) if start_usage is not None else {}
            blocks = [(copy.deepcopy(b.value), b.path) for b in message.opt_arr("content").objs()]
            continue
        if kind == "content_block_start":
            block = event.obj("content_block")
            blocks.append((copy.deepcopy(block.value), block.path))
        elif kind == "content_block_delta":
            index = event.count("index")
            if index >= len(blocks):
                raise bad(event.at("index"), f"content block {index} was not started")
            _delta(blocks[index][0], event.obj("delta"), json_parts.setdefault(index, []))
        elif kind == "message_delta":
            delta = event.obj("delta")
            stop_reason = delta.opt_str("stop_reason") or stop_reason
            counts = event.opt_obj("usage")
            if counts is not None:
                for key in _USAGE_KEYS:
                    if counts.get(key) is not None:
                        usage[key] = counts.get(key)
    if message is None:
        raise bad(path, "the stream has no message_start event")
    content = _streamed_content(blocks, json_parts)
    if error:
        stop = (StopReason.ERROR, error)
    elif stop_reason:
        stop = _stop(stop_reason)
    else:
        stop = (StopReason.ABORTED, "the stream ended before a stop_reason")
    return turn_of(
        message, content, stop, _usage(Obj(usage, path)), provider=PROVIDER, streamed=True
    )


def _streamed_content(
    blocks: list[tuple[dict[str, Any], str]], json_parts: dict[int, list[str]]
) -> list[ContentBlock]:
    """The streamed blocks, with their joined ``input_json_delta`` texts."""
    content: list[ContentBlock] = []
    for index, (value, block_path) in enumerate(blocks):
        block = as_obj(value, block_path)
        arguments = None
        if block.get("type") == "tool_use" and json_parts.get(index):
            text = "".join(json_parts[index])
            arguments = dumps(json.loads(arguments_json(text, f"{block_path}.input")))
        elif json_parts.get(index):  # server_tool_use, mcp_tool_use, ...
            text = "".join(json_parts[index])
            value["input"] = json.loads(arguments_json(text, f"{block_path}.input"))
        content.append(_assistant_block(block, arguments))
    return content


def _delta(block: dict[str, Any], delta: Obj, json_parts: list[str]) -> None:
    kind = delta.kind()
    if kind == "text_delta" and block.get("type") == "text":
        block["text"] = str(block.get("text", "")) + delta.string("text")
    elif kind == "thinking_delta" and block.get("type") == "thinking":
        block["thinking"] = str(block.get("thinking", "")) + delta.string("thinking")
    elif kind == "signature_delta" and block.get("type") == "thinking":
        block["signature"] = delta.string("signature")
    elif kind == "input_json_delta":
        json_parts.append(delta.string("partial_json"))
    elif kind == "citations_delta" and block.get("type") == "text":
        citations = block.get("citations")
        if not isinstance(citations, list):
            citations = block["citations"] = []
        citations.append(copy.deepcopy(delta.obj("citation").value))


# -- input messages -------------------------------------------------------------


_IMAGE_KEYS = frozenset({"type", "source", "cache_control"})


def _media(block: Obj) -> ContentBlock:
    kind = block.kind()
    if kind == "text":
        return _text(block)
    if kind == "image":
        source = block.obj("source")
        if source.opt_str("type") != "base64" or set(block.value) - _IMAGE_KEYS:
            return _kept(block)
        return image_block(
            source.string("media_type"), decode_base64(source.string("data"), source.at("data"))
        )
    return _kept(block)


def _tool_result(block: Obj, names: dict[str, str]) -> Message:
    call_id = block.nonempty_str("tool_use_id")
    value = block.get("content")
    if value is None:
        content: list[ContentBlock] = []
    elif isinstance(value, str):
        content = [text_block(value)]
    else:
        content = [_media(b) for b in block.arr("content").objs()]
    return tool_result(
        call_id, content, name=names.get(call_id, ""), is_error=block.flag("is_error")
    )


def _user(item: Obj, names: dict[str, str]) -> Iterator[ContentBlock | Message]:
    for block in item.arr("content").objs():
        if block.kind() == "tool_result":
            yield _tool_result(block, names)
        else:
            yield _media(block)


def ingest_items(items: object, path: str, model: str) -> tuple[Message, ...]:
    messages: list[Message] = []
    names: dict[str, str] = {}
    for item in as_arr(items, path).objs():
        role = item.string("role")
        value = item.get("content")
        if role == "assistant":
            if isinstance(value, str):
                blocks = [text_block(value)]
            else:
                blocks = [_assistant_block(b) for b in item.arr("content").objs()]
            names.update((b.tool_call_id, b.tool_name) for b in blocks if b.tool_call_id)
            messages.append(assistant_message(blocks, model=model, provider=PROVIDER))
        elif role == "user":
            if isinstance(value, str):
                messages.append(Message(Role.USER, (text_block(value),)))
            else:
                messages.extend(user_messages(_user(item, names)))
        else:
            raise unsupported(item.at("role"), f"a message of role {role!r}")
    return tuple(messages)


__all__ = ["ingest_items", "ingest_response"]
