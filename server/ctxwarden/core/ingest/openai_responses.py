"""OpenAI Responses: a ``response`` object, its stream events, or input items.

- Output items: a ``message`` gives text blocks (``output_text``, and
  ``refusal`` as text), a ``function_call`` a tool call (``call_id``, name,
  arguments as the JSON text sent), a ``reasoning`` item one thinking block:
  its summary texts joined by a blank line (the ``reasoning_text`` content
  when there is no summary), with the item's ``id``, ``encrypted_content``
  and where its parts begin kept in the block's signature as compact JSON
  ``{"id": ..., "encrypted_content": ...}`` (see
  ``ctxwarden.core.responses_reasoning``), which is what sending the item
  back verbatim takes.
- Status: ``completed`` is TOOL_USE when there are function calls, else
  STOP; ``incomplete`` is LENGTH for ``max_output_tokens`` and ERROR for
  ``content_filter``; ``failed`` is ERROR with the error's message;
  ``cancelled`` is ABORTED.
- Usage: input is ``input_tokens`` less the ``input_tokens_details``
  ``cached_tokens`` (the cache read) and ``cache_write_tokens`` (the cache write).
- Streamed events are assembled as the SDK's ResponseStreamState does: the
  terminal event's response (``response.completed``, ``.incomplete`` or
  ``.failed``) is the result; when it carries no ``output``, the items are
  those of ``response.output_item.done``, or, for items that never got one,
  the ``response.output_item.added`` item with its deltas applied. A stream
  without a terminal event is ABORTED.
- Input items: ``message`` items of role user (``input_text``,
  ``input_image`` with a data URL) and assistant (a string, or
  ``output_text`` parts), ``function_call``, ``function_call_output`` (a
  string, or ``input_text``/``input_image`` items) and ``reasoning``.
  Consecutive assistant-side items (messages, calls, reasoning) form one
  assistant message. A result's tool name comes from its call, when the call
  is among the items.
- Items ctxwarden does not model (built-in tool calls such as
  ``web_search_call``, their outputs, and any other item type; an assistant
  message with annotations or other content; a reasoning item with other
  summary or content types, or with both a summary and content) are PROVIDER
  blocks of family ``openai-responses``, the item's JSON as sent, in the
  assistant message in their place; user and tool-output content parts of
  other types (files, images by URL or file id, ...) are PROVIDER blocks in
  that content.
- Rejected: ``system`` and ``developer`` messages (the system prompt is the
  session's), output messages of another role, and known items of the wrong
  shape.
"""

from __future__ import annotations

from typing import Any

from ctxwarden.core.ingest._common import (
    data_url_image,
    provider_block,
    text_block,
    thinking_block,
    tool_result,
)
from ctxwarden.core.ingest._json import Obj, arguments_json, as_arr, as_obj, bad
from ctxwarden.core.ingest._messages import IngestedTurn, assistant_message, bad_role, turn_of
from ctxwarden.core.ingest.openai_responses_stream import assemble
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role, StopReason, Usage
from ctxwarden.core.responses_reasoning import (
    SEPARATOR,
    parse_reasoning_signature,
    reasoning_signature,
)

PROVIDER = "openai"
FAMILY = "openai-responses"
"""The family of this wire format's PROVIDER blocks."""


def _kept(o: Obj) -> ContentBlock:
    return provider_block(FAMILY, o.value)


def _reasoning(item: Obj) -> ContentBlock:
    summary, content = [], []
    for part in item.opt_arr("summary").objs():
        if part.kind() != "summary_text":
            return _kept(item)
        summary.append(part.string("text"))
    for part in item.opt_arr("content").objs():
        if part.kind() != "reasoning_text" or summary:
            return _kept(item)
        content.append(part.string("text"))
    signature = reasoning_signature(
        item.nonempty_str("id"), item.opt_str("encrypted_content"), summary=summary, content=content
    )
    return thinking_block(SEPARATOR.join(summary or content), signature)


def _function_call(item: Obj) -> ContentBlock:
    return ContentBlock.of_tool_call(
        item.nonempty_str("call_id"),
        item.nonempty_str("name"),
        arguments_json(item.opt_str("arguments"), item.at("arguments")),
    )


def _assistant_text(item: Obj) -> list[ContentBlock]:
    """An assistant message item: a string, or output_text/refusal parts."""
    if isinstance(item.get("content"), str):
        return [text_block(item.string("content"))]
    blocks: list[ContentBlock] = []
    for part in item.arr("content").objs():
        kind = part.kind()
        if kind in ("output_text", "input_text"):
            if part.opt_arr("annotations").value or part.opt_arr("logprobs").value:
                return [_kept(item)]
            blocks.append(text_block(part.string("text")))
        elif kind == "refusal":
            blocks.append(text_block(part.string("refusal")))
        else:
            return [_kept(item)]
    return blocks


def _assistant_item(item: Obj) -> list[ContentBlock] | None:
    """The blocks of an assistant-side item; None when it is not one."""
    kind = item.opt_str("type") or "message"
    if kind == "message" and item.get("role") == "assistant":
        return _assistant_text(item)
    if kind == "function_call":
        return [_function_call(item)]
    if kind == "reasoning":
        return [_reasoning(item)]
    if kind not in _USER_SIDE:
        return [_kept(item)]
    return None


_USER_SIDE = frozenset({"message", "function_call_output"})
"""Item types read as user or tool-result messages; every other type that is
not modelled is kept, as a PROVIDER block of the assistant message."""


def _output(items: list[Obj]) -> list[ContentBlock]:
    blocks: list[ContentBlock] = []
    for item in items:
        found = _assistant_item(item)
        if found is None:
            kind = item.opt_str("type") or "message"
            if kind == "message":
                raise bad(
                    item.at("role"),
                    f"an output message must be the assistant's, got {item.get('role')!r}",
                )
            raise bad(item.at("type"), f"an output item cannot be of type {kind!r}")
        blocks.extend(found)
    return blocks


def _usage(o: Obj | None) -> Usage | None:
    if o is None:
        return None
    details = o.opt_obj("input_tokens_details")
    cached = details.count("cached_tokens") if details is not None else 0
    written = details.count("cache_write_tokens") if details is not None else 0
    out_details = o.opt_obj("output_tokens_details")
    return Usage(
        input_tokens=max(o.count("input_tokens") - cached - written, 0),
        output_tokens=o.count("output_tokens"),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        total_tokens=o.count("total_tokens"),
        reasoning_tokens=out_details.count("reasoning_tokens") if out_details is not None else 0,
    )


def _stop(response: Obj, blocks: list[ContentBlock]) -> tuple[StopReason, str]:
    status = response.opt_str("status")
    if status == "completed":
        calls = any(b.kind is ContentKind.TOOL_CALL for b in blocks)
        return (StopReason.TOOL_USE if calls else StopReason.STOP), ""
    if status == "incomplete":
        details = response.opt_obj("incomplete_details")
        reason = details.opt_str("reason") if details is not None else ""
        if reason == "max_output_tokens":
            return StopReason.LENGTH, ""
        return StopReason.ERROR, f"incomplete: {reason or 'no reason given'}"
    if status == "failed":
        error = response.opt_obj("error")
        message = error.opt_str("message") if error is not None else ""
        return StopReason.ERROR, message or "the response failed"
    if status == "cancelled":
        return StopReason.ABORTED, "the response was cancelled"
    return StopReason.UNSPECIFIED, ""


def _turn(
    response: Obj, items: list[Obj], *, streamed: bool, stop: tuple[StopReason, str] | None = None
) -> IngestedTurn:
    blocks = _output(items)
    return turn_of(
        response,
        blocks,
        stop or _stop(response, blocks),
        _usage(response.opt_obj("usage")),
        provider=PROVIDER,
        streamed=streamed,
    )


def ingest_response(body: object, path: str) -> IngestedTurn:
    if isinstance(body, list):
        return _stream(body, path)
    response = as_obj(body, path)
    kind = response.opt_str("object")
    if kind and kind != "response":
        raise bad(response.at("object"), f"expected 'response', got {kind!r}")
    return _turn(response, list(response.arr("output").objs()), streamed=False)


def _stream(body: list[Any], path: str) -> IngestedTurn:
    response, items, stop = assemble(body, path)
    return _turn(response, items, streamed=True, stop=stop)


# -- input items ------------------------------------------------------------------


def _input_parts(item: Obj, key: str, *, text_type: str) -> list[ContentBlock]:
    if isinstance(item.get(key), str):
        return [text_block(item.string(key))]
    blocks: list[ContentBlock] = []
    for part in item.arr(key).objs():
        kind = part.kind()
        if kind == text_type:
            blocks.append(text_block(part.string("text")))
        elif kind == "input_image" and part.opt_str("image_url").startswith("data:"):
            blocks.append(data_url_image(part.string("image_url"), part.at("image_url")))
        else:  # files, images by URL or file id, ...
            blocks.append(_kept(part))
    return blocks


def ingest_items(items: object, path: str, model: str) -> tuple[Message, ...]:
    messages: list[Message] = []
    names: dict[str, str] = {}
    assistant: list[ContentBlock] | None = None
    for item in as_arr(items, path).objs():
        blocks = _assistant_item(item)
        if blocks is not None:
            assistant = [*(assistant or []), *blocks]
            names.update((b.tool_call_id, b.tool_name) for b in blocks if b.tool_call_id)
            continue
        if assistant is not None:
            messages.append(assistant_message(assistant, model=model, provider=PROVIDER))
            assistant = None
        kind = item.opt_str("type") or "message"
        if kind == "function_call_output":
            call_id = item.nonempty_str("call_id")
            content = _input_parts(item, "output", text_type="input_text")
            messages.append(tool_result(call_id, content, name=names.get(call_id, "")))
        elif kind == "message":
            role = item.string("role")
            if role != "user":
                raise bad_role(item.at("role"), role)
            parts = _input_parts(item, "content", text_type="input_text")
            messages.append(Message(Role.USER, tuple(parts)))
    if assistant is not None:
        messages.append(assistant_message(assistant, model=model, provider=PROVIDER))
    return tuple(messages)


__all__ = ["ingest_items", "ingest_response", "parse_reasoning_signature", "reasoning_signature"]
