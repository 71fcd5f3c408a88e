"""OpenAI Chat Completions: a ``chat.completion``, its chunks, or input messages.

- The first choice is read (``index`` 0 when streamed). Its ``content`` (a
  string or text parts) and ``refusal`` become text blocks, its function
  ``tool_calls`` tool calls with the arguments kept as the JSON text sent.
- finish_reason: ``stop`` is STOP, ``length`` LENGTH, ``tool_calls`` and
  ``function_call`` TOOL_USE, ``content_filter`` ERROR; none is UNSPECIFIED
  (ABORTED when a stream ended without one).
- Usage: input is ``prompt_tokens`` less the ``prompt_tokens_details``
  ``cached_tokens`` (the cache read) and ``cache_write_tokens`` (the cache write).
- Streamed chunks are joined as the SDK's ChatCompletionStreamState joins
  them: strings (content, refusal, a tool call's id, name and arguments, by
  the call's ``index``) are concatenated; the usage of the last chunk that has
  one counts.
- Input messages: ``user`` (a string, or ``text`` and ``image_url`` parts with
  data URLs), ``assistant`` and ``tool``. A tool message gets its tool name
  from the call it answers, when that call is among the items. A user message
  that follows tool messages and holds only the renderer's labelled tool-result
  images (``[image output of tool call ID (NAME)]`` then images) gives those
  images back to the results they belong to.
- User content parts ctxwarden does not model (``file``, ``input_audio``,
  images by URL, any other type) are PROVIDER blocks of family
  ``openai-chat``: the part's JSON as sent, in its place.
- Rejected: ``system`` and ``developer`` messages (the system prompt is the
  session's), custom tool calls, the legacy ``function_call``, audio,
  annotations, and parts other than text and refusal in assistant and tool
  messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ctxwarden.core.ingest._common import (
    data_url_image,
    mapped_stop,
    provider_block,
    text_block,
    tool_result,
    without_empty_text,
)
from ctxwarden.core.ingest._json import Arr, Obj, arguments_json, as_arr, as_obj, bad, unsupported
from ctxwarden.core.ingest._messages import (
    IngestedTurn,
    assistant_message,
    assistant_turn,
    bad_role,
)
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role, StopReason, Usage

PROVIDER = "openai"
FAMILY = "openai-chat"
"""The family of this wire format's PROVIDER blocks."""

_STOP_REASONS = {
    "stop": StopReason.STOP,
    "length": StopReason.LENGTH,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "content_filter": StopReason.ERROR,
}


def _stop(reason: str) -> tuple[StopReason, str]:
    return mapped_stop(_STOP_REASONS, reason, "finish_reason")


def _usage(o: Obj | None) -> Usage | None:
    if o is None:
        return None
    prompt = o.count("prompt_tokens")
    details = o.opt_obj("prompt_tokens_details")
    cached = details.count("cached_tokens") if details is not None else 0
    written = details.count("cache_write_tokens") if details is not None else 0
    out_details = o.opt_obj("completion_tokens_details")
    return Usage(
        input_tokens=max(prompt - cached - written, 0),
        output_tokens=o.count("completion_tokens"),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        total_tokens=o.count("total_tokens"),
        reasoning_tokens=out_details.count("reasoning_tokens") if out_details is not None else 0,
    )


def _reject_extras(o: Obj) -> None:
    if o.has("function_call"):
        raise unsupported(o.at("function_call"), "the legacy function_call")
    if o.has("audio"):
        raise unsupported(o.at("audio"), "audio output")
    if o.opt_arr("annotations").value:
        raise unsupported(o.at("annotations"), "annotations")


def _is_data_url(part: Obj) -> bool:
    url = part.get("image_url")
    return isinstance(url, dict) and str(url.get("url", "")).startswith("data:")


def _content(o: Obj, *, images: bool) -> list[ContentBlock]:
    """A message's ``content``: null, a string, or a list of parts."""
    value = o.get("content")
    if value is None:
        return []
    if isinstance(value, str):
        return [text_block(value)]
    blocks: list[ContentBlock] = []
    for part in o.arr("content").objs():
        kind = part.kind()
        if kind == "text":
            blocks.append(text_block(part.string("text")))
        elif kind == "refusal":
            blocks.append(text_block(part.string("refusal")))
        elif kind == "image_url" and images and _is_data_url(part):
            url = part.obj("image_url")
            blocks.append(data_url_image(url.string("url"), url.at("url")))
        elif images:  # user content: files, audio, images by URL, ...
            blocks.append(provider_block(FAMILY, part.value))
        else:
            raise unsupported(part.at("type"), f"a content part of type {kind!r}")
    return blocks


def _tool_call(call: Obj) -> ContentBlock:
    kind = call.opt_str("type") or "function"
    if kind != "function":
        raise unsupported(call.at("type"), f"a tool call of type {kind!r}")
    function = call.obj("function")
    return ContentBlock.of_tool_call(
        call.nonempty_str("id"),
        function.nonempty_str("name"),
        arguments_json(function.opt_str("arguments"), function.at("arguments")),
    )


def _assistant_blocks(message: Obj) -> list[ContentBlock]:
    _reject_extras(message)
    blocks = _content(message, images=False)
    if message.opt_str("refusal"):
        blocks.append(text_block(message.string("refusal")))
    blocks.extend(_tool_call(c) for c in message.opt_arr("tool_calls").objs())
    return without_empty_text(blocks)


def _expect_object(o: Obj, want: str) -> None:
    got = o.opt_str("object")
    if got and got != want:
        raise bad(o.at("object"), f"expected {want!r}, got {got!r}")


def ingest_response(body: object, path: str) -> IngestedTurn:
    if isinstance(body, list):
        return _stream(as_arr(body, path))
    completion = as_obj(body, path)
    _expect_object(completion, "chat.completion")
    choices = completion.arr("choices")
    choice = choices.first_obj()
    if choice is None:
        raise bad(choices.path, "has no choices")
    return assistant_turn(
        _assistant_blocks(choice.obj("message")),
        _stop(choice.opt_str("finish_reason")),
        _usage(completion.opt_obj("usage")),
        model=completion.opt_str("model"),
        provider=PROVIDER,
        response_id=completion.opt_str("id"),
        streamed=False,
    )


@dataclass(slots=True)
class _CallParts:
    path: str
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class _ChunkState:
    content: str = ""
    refusal: str = ""
    calls: dict[int, _CallParts] = field(default_factory=dict)
    finish_reason: str = ""
    usage: Obj | None = None
    model: str = ""
    response_id: str = ""


def _stream(chunks: Arr) -> IngestedTurn:
    state = _ChunkState()
    for chunk in chunks.objs():
        _expect_object(chunk, "chat.completion.chunk")
        state.model = state.model or chunk.opt_str("model")
        state.response_id = state.response_id or chunk.opt_str("id")
        if chunk.has("usage"):
            state.usage = chunk.obj("usage")
        for choice in chunk.opt_arr("choices").objs():
            if choice.count("index") == 0:
                _add_delta(state, choice)
    blocks: list[ContentBlock] = []
    if state.content:
        blocks.append(text_block(state.content))
    if state.refusal:
        blocks.append(text_block(state.refusal))
    for index in sorted(state.calls):
        parts = state.calls[index]
        if not parts.id:
            raise bad(f"{parts.path}.id", "the streamed tool call never got an id")
        if not parts.name:
            raise bad(f"{parts.path}.function.name", "the streamed tool call never got a name")
        arguments = arguments_json(parts.arguments, f"{parts.path}.function.arguments")
        blocks.append(ContentBlock.of_tool_call(parts.id, parts.name, arguments))
    stop = (
        _stop(state.finish_reason)
        if state.finish_reason
        else (StopReason.ABORTED, "the stream ended before a finish_reason")
    )
    return assistant_turn(
        blocks,
        stop,
        _usage(state.usage),
        model=state.model,
        provider=PROVIDER,
        response_id=state.response_id,
        streamed=True,
    )


def _add_delta(state: _ChunkState, choice: Obj) -> None:
    if choice.opt_str("finish_reason"):
        state.finish_reason = choice.string("finish_reason")
    delta = choice.opt_obj("delta")
    if delta is None:
        return
    _reject_extras(delta)
    state.content += delta.opt_str("content")
    state.refusal += delta.opt_str("refusal")
    for call in delta.opt_arr("tool_calls").objs():
        index = call.count("index")
        parts = state.calls.setdefault(index, _CallParts(call.path))
        kind = call.opt_str("type")
        if kind and kind != "function":
            raise unsupported(call.at("type"), f"a tool call of type {kind!r}")
        parts.id += call.opt_str("id")
        function = call.opt_obj("function")
        if function is not None:
            parts.name += function.opt_str("name")
            parts.arguments += function.opt_str("arguments")


# -- input messages -------------------------------------------------------------

_LABEL_HEAD = "[image output of tool call "


def _moved_images(
    parts: Arr, pending: dict[str, int], messages: list[Message]
) -> dict[int, tuple[str, list[ContentBlock]]] | None:
    """The images of a user message made of labelled tool-result images, by the
    index of the result they belong to; None when it is an ordinary message."""
    out: dict[int, tuple[str, list[ContentBlock]]] = {}
    current: list[ContentBlock] | None = None
    for part in parts.objs():
        kind = part.get("type")
        if kind == "text":
            label = _label(part.string("text"), pending)
            if label is None:
                return None
            index, name = label
            if index in out:
                return None
            current = []
            out[index] = (name, current)
        elif kind == "image_url" and current is not None:
            url = part.obj("image_url")
            current.append(data_url_image(url.string("url"), url.at("url")))
        else:
            return None
    if not out or any(not images for _, images in out.values()):
        return None
    if any(b.kind is ContentKind.IMAGE for i in out for b in messages[i].content):
        return None
    return out


def _label(text: str, pending: dict[str, int]) -> tuple[int, str] | None:
    """(result index, tool name) of a label naming one of the pending results."""
    if not (text.startswith(_LABEL_HEAD) and text.endswith(")]")):
        return None
    rest = text[len(_LABEL_HEAD) : -2]
    best: tuple[int, str] | None = None
    best_len = -1
    for call_id, index in pending.items():
        if rest.startswith(f"{call_id} (") and len(call_id) > best_len:
            best, best_len = (index, rest[len(call_id) + 2 :]), len(call_id)
    return best


def ingest_items(items: object, path: str, model: str) -> tuple[Message, ...]:
    messages: list[Message] = []
    names: dict[str, str] = {}
    pending: dict[str, int] = {}  # tool messages right before: call id -> index
    for item in as_arr(items, path).objs():
        role = item.string("role")
        if role == "tool":
            call_id = item.nonempty_str("tool_call_id")
            content = _content(item, images=False)
            pending[call_id] = len(messages)
            messages.append(tool_result(call_id, content, name=names.get(call_id, "")))
            continue
        if role == "user" and pending and isinstance(item.get("content"), list):
            moved = _moved_images(item.arr("content"), pending, messages)
            if moved is not None:
                for index, (name, images) in moved.items():
                    result = messages[index]
                    messages[index] = replace(
                        result, content=(*result.content, *images), tool_name=name
                    )
                pending = {}
                continue
        pending = {}
        if role == "user":
            messages.append(Message(Role.USER, tuple(_content(item, images=True))))
        elif role == "assistant":
            blocks = _assistant_blocks(item)
            names.update((b.tool_call_id, b.tool_name) for b in blocks if b.tool_call_id)
            messages.append(assistant_message(blocks, model=model, provider=PROVIDER))
        else:
            raise bad_role(item.at("role"), role)
    return tuple(messages)


__all__ = ["ingest_items", "ingest_response"]
