"""Google Gemini: a ``GenerateContentResponse``, its stream chunks, or contents.

Keys are read in the REST API's camelCase or in the snake_case of the
google-genai SDK's ``to_json_dict()``; bytes in standard or URL-safe base64.

- The first candidate's parts: ``text`` is text, a ``thought`` part a
  thinking block (its ``thoughtSignature`` the signature), ``functionCall`` a
  tool call (``args`` as compact JSON text). A signature on a part that is
  not a thought becomes a thinking block with no text right before that
  part's block (for an empty text part, alone): the renderer puts it back on
  the part that follows. A function call without an ``id`` gets
  ``gemini_`` and 16 hex digits of SHA-256 of the response id, the call's
  position, name and arguments: the same response always gives the same ids.
- finishReason: ``STOP`` is TOOL_USE when there are function calls, else
  STOP; ``MAX_TOKENS`` LENGTH; ``FINISH_REASON_UNSPECIFIED`` or none
  UNSPECIFIED (ABORTED when a stream ended without one); every other reason
  (safety, recitation, malformed function call, ...) ERROR with the reason
  and ``finishMessage``. No candidate (a blocked prompt) is an ERROR message
  without content naming ``promptFeedback.blockReason``.
- Usage: input is ``promptTokenCount`` less ``cachedContentTokenCount``,
  output ``candidatesTokenCount`` plus ``thoughtsTokenCount``.
- Streamed chunks are joined as google-genai's chat joins them, by appending
  each chunk's first-candidate parts in order; adjacent text parts of the
  same kind (thought or not) are one text when the later carries no
  signature. The last finishReason and usageMetadata count.
- Contents: role ``user`` (``text``, ``inlineData``, ``functionResponse``:
  each response a tool result of its own, in part order) and ``model``. A
  response's ``{"output": text}`` or ``{"error": text}`` (an error result) is
  its text; any other response is kept as its JSON text. Images in its
  ``parts`` are the result's images. A response without an id answers the
  earliest unanswered call of its name among the contents.
- Parts ctxwarden does not model (``executableCode``,
  ``codeExecutionResult``, ``fileData``, ``toolCall``, ``toolResponse``, and
  images in model output) are PROVIDER blocks of family ``google``: the
  whole part as sent (its ``thoughtSignature`` included), in the user or
  model message it is in, or among a function response's ``parts`` in the
  tool result.
- Rejected: parts with none of the data ctxwarden reads or keeps.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ctxwarden.core.ingest._common import (
    IngestedTurn,
    image_block,
    provider_block,
    text_block,
    thinking_block,
    tool_result,
)
from ctxwarden.core.ingest._json import (
    Obj,
    arguments_object,
    as_arr,
    as_obj,
    bad,
    decode_base64,
    dumps,
    unsupported,
)
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role, StopReason, Usage

PROVIDER = "google"
FAMILY = "google"
"""The family of this wire format's PROVIDER blocks."""

_DATA_KEYS = ("text", "inlineData", "functionCall", "functionResponse")
_KEPT_KEYS = (
    "fileData",
    "executableCode",
    "codeExecutionResult",
    "toolCall",
    "toolResponse",
)


def _obj(value: object, path: str) -> Obj:
    return as_obj(value, path, camel=True)


_KEPT = "kept"
"""The kind of a part kept whole as a PROVIDER block."""


def _kept(part: Obj) -> ContentBlock:
    return provider_block(FAMILY, part.value)


def _kind(part: Obj) -> str:
    """The data key of the part, or ``_KEPT`` for data ctxwarden does not model."""
    if any(part.has(key) for key in _KEPT_KEYS):
        return _KEPT
    present = [key for key in _DATA_KEYS if part.get(key) is not None]
    if len(present) != 1:
        shown = ", ".join(sorted(part.value)) or "nothing"
        raise bad(part.path, f"a part needs exactly one of {', '.join(_DATA_KEYS)}; it has {shown}")
    return present[0]


def call_id(response_id: str, index: int, name: str, arguments: str) -> str:
    """The id of a function call that came without one."""
    key = "\x1f".join((response_id, str(index), name, arguments))
    return "gemini_" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def _function_call(part: Obj, response_id: str, index: int) -> ContentBlock:
    call = part.obj("functionCall")
    name = call.nonempty_str("name")
    arguments = arguments_object(call.get("args"), call.at("args"))
    return ContentBlock.of_tool_call(
        call.opt_str("id") or call_id(response_id, index, name, arguments), name, arguments
    )


def _model_parts(parts: list[Obj], response_id: str, start: int = 0) -> list[ContentBlock]:
    blocks: list[ContentBlock] = []
    for index, part in enumerate(parts, start):
        kind = _kind(part)
        if kind in (_KEPT, "inlineData"):
            blocks.append(_kept(part))  # an image in model output is kept too
            continue
        signature = part.opt_str("thoughtSignature")
        if part.flag("thought"):
            if kind != "text":
                raise bad(part.at("thought"), "a thought part must be text")
            text = part.string("text")
            if text or signature:
                blocks.append(thinking_block(text, signature))
            continue
        if signature:
            blocks.append(thinking_block("", signature))
        if kind == "text":
            if part.string("text"):
                blocks.append(text_block(part.string("text")))
        elif kind == "functionCall":
            blocks.append(_function_call(part, response_id, index))
        else:
            raise bad(part.at(kind), "a functionResponse part belongs in a user content")
    return blocks


def _usage(o: Obj | None) -> Usage | None:
    if o is None:
        return None
    cached = o.count("cachedContentTokenCount")
    return Usage(
        input_tokens=max(o.count("promptTokenCount") - cached, 0),
        output_tokens=o.count("candidatesTokenCount") + o.count("thoughtsTokenCount"),
        cache_read_tokens=cached,
        total_tokens=o.count("totalTokenCount"),
    )


def _stop(reason: str, message: str, blocks: list[ContentBlock]) -> tuple[StopReason, str]:
    if reason in ("", "FINISH_REASON_UNSPECIFIED"):
        return StopReason.UNSPECIFIED, ""
    if reason == "STOP":
        calls = any(b.kind is ContentKind.TOOL_CALL for b in blocks)
        return (StopReason.TOOL_USE if calls else StopReason.STOP), ""
    if reason == "MAX_TOKENS":
        return StopReason.LENGTH, ""
    return StopReason.ERROR, f"finishReason {reason}" + (f": {message}" if message else "")


@dataclass(slots=True)
class _Candidate:
    parts: list[Obj] = field(default_factory=list)
    finish_reason: str = ""
    finish_message: str = ""


def _candidate(response: Obj, into: _Candidate) -> bool:
    """Add the first candidate of ``response`` to ``into``; False when there is none."""
    first = response.opt_arr("candidates").first_obj()
    if first is None:
        return False
    content = first.opt_obj("content")
    if content is not None:
        into.parts.extend(content.opt_arr("parts").objs())
    if first.opt_str("finishReason"):
        into.finish_reason = first.string("finishReason")
        into.finish_message = first.opt_str("finishMessage")
    return True


def _blocked(response: Obj) -> str:
    feedback = response.opt_obj("promptFeedback")
    reason = feedback.opt_str("blockReason") if feedback is not None else ""
    return f"prompt blocked: {reason}" if reason else "the response has no candidates"


def _turn(
    candidate: _Candidate | None,
    response_id: str,
    model: str,
    usage: Usage | None,
    *,
    streamed: bool,
    blocked: str,
) -> IngestedTurn:
    if candidate is None:
        blocks: list[ContentBlock] = []
        stop = (StopReason.ERROR, blocked)
    else:
        parts = _joined(candidate.parts) if streamed else candidate.parts
        blocks = _model_parts(parts, response_id)
        if streamed and not candidate.finish_reason:
            stop = (StopReason.ABORTED, "the stream ended before a finishReason")
        else:
            stop = _stop(candidate.finish_reason, candidate.finish_message, blocks)
    message = Message(
        Role.ASSISTANT,
        tuple(blocks),
        stop_reason=stop[0],
        error_message=stop[1],
        usage=usage,
        model=model,
        provider=PROVIDER,
    )
    return IngestedTurn((message,), response_id=response_id, streamed=streamed)


def _joined(parts: list[Obj]) -> list[Obj]:
    """Adjacent text parts of one kind as one part (streamed text comes in pieces)."""
    out: list[Obj] = []
    for part in parts:
        prev = out[-1] if out else None
        if (
            prev is not None
            and isinstance(part.get("text"), str)
            and isinstance(prev.get("text"), str)
            and _text_only(part)
            and _text_only(prev, signed=True)
            and part.flag("thought") == prev.flag("thought")
        ):
            merged = dict(prev.value)
            merged[prev.key("text")] = prev.string("text") + part.string("text")
            out[-1] = Obj(merged, prev.path, camel=True)
        else:
            out.append(part)
    return out


def _text_only(part: Obj, *, signed: bool = False) -> bool:
    """A text part with nothing but ``thought`` (and, if ``signed``, a signature)."""
    allowed = {"text", "thought"} | ({"thoughtSignature", "thought_signature"} if signed else set())
    return set(part.value) <= allowed


def ingest_response(body: object, path: str) -> IngestedTurn:
    if isinstance(body, list):
        return _stream(body, path)
    response = _obj(body, path)
    candidate = _Candidate()
    found = _candidate(response, candidate)
    return _turn(
        candidate if found else None,
        response.opt_str("responseId"),
        response.opt_str("modelVersion"),
        _usage(response.opt_obj("usageMetadata")),
        streamed=False,
        blocked=_blocked(response),
    )


def _stream(body: list[Any], path: str) -> IngestedTurn:
    chunks = as_arr(body, path, camel=True)
    candidate = _Candidate()
    found = False
    response_id = model = ""
    usage: Obj | None = None
    last: Obj | None = None
    for chunk in chunks.objs():
        last = chunk
        found = _candidate(chunk, candidate) or found
        response_id = response_id or chunk.opt_str("responseId")
        model = model or chunk.opt_str("modelVersion")
        usage = chunk.opt_obj("usageMetadata") or usage
    return _turn(
        candidate if found or last is None else None,
        response_id,
        model,
        _usage(usage),
        streamed=True,
        blocked=_blocked(last) if last is not None else "",
    )


# -- contents -------------------------------------------------------------------


def _image(part: Obj) -> ContentBlock:
    blob = part.obj("inlineData")
    return image_block(blob.string("mimeType"), decode_base64(blob.string("data"), blob.at("data")))


@dataclass(slots=True)
class _Calls:
    """The function calls of the contents, to name and pair their responses."""

    names: dict[str, str] = field(default_factory=dict)
    unanswered: list[tuple[str, str]] = field(default_factory=list)  # (id, name)

    def add(self, block: ContentBlock) -> None:
        self.names[block.tool_call_id] = block.tool_name
        self.unanswered.append((block.tool_call_id, block.tool_name))

    def answer(self, response: Obj) -> str:
        given = response.opt_str("id")
        name = response.opt_str("name")
        for i, (call, call_name) in enumerate(self.unanswered):
            if call == given or (not given and call_name == name):
                del self.unanswered[i]
                return call
        if given:
            return given
        raise bad(
            response.at("id"),
            f"a functionResponse without an id must answer a functionCall named {name!r} "
            "among these contents",
        )


def _function_response(part: Obj, calls: _Calls) -> Message:
    response = part.obj("functionResponse")
    call = calls.answer(response)
    name = response.opt_str("name") or calls.names.get(call, "")
    payload = response.opt_obj("response")
    is_error = False
    if payload is None:
        text = ""
    elif set(payload.value) == {"output"} and isinstance(payload.get("output"), str):
        text = payload.string("output")
    elif set(payload.value) == {"error"} and isinstance(payload.get("error"), str):
        text, is_error = payload.string("error"), True
    else:
        text = dumps(payload.value)
    images: list[ContentBlock] = []
    for media in response.opt_arr("parts").objs():
        kind = _kind(media)
        if kind == _KEPT:
            images.append(_kept(media))
        elif kind == "inlineData":
            images.append(_image(media))
        else:
            raise bad(media.path, f"a function response part must be inlineData, not {kind}")
    return tool_result(call, [text_block(text), *images], name=name, is_error=is_error)


def _messages(parts: list[Obj]) -> list[tuple[int, list[Obj]]]:
    """A model content's parts by assistant message, with the index each starts at.

    An empty text part with a signature is how the renderer ends a message
    whose last block is a signature; more parts after it (a merged next
    message) are another message.
    """
    out: list[tuple[int, list[Obj]]] = []
    start = 0
    for i, part in enumerate(parts):
        ends = (
            part.get("text") == ""
            and not part.flag("thought")
            and bool(part.opt_str("thoughtSignature"))
        )
        if ends and i + 1 < len(parts):
            out.append((start, parts[start : i + 1]))
            start = i + 1
    out.append((start, parts[start:]))
    return out


def ingest_items(items: object, path: str, model: str) -> tuple[Message, ...]:
    messages: list[Message] = []
    calls = _Calls()
    for content in as_arr(items, path, camel=True).objs():
        role = content.opt_str("role") or "user"
        parts = list(content.opt_arr("parts").objs())
        if role == "model":
            for start, group in _messages(parts):
                blocks = _model_parts(group, content.path, start)
                for block in blocks:
                    if block.kind is ContentKind.TOOL_CALL:
                        calls.add(block)
                messages.append(
                    Message(Role.ASSISTANT, tuple(blocks), model=model, provider=PROVIDER)
                )
        elif role == "user":
            run: list[ContentBlock] = []
            for part in parts:
                kind = _kind(part)
                if kind == "functionResponse":
                    if run:
                        messages.append(Message(Role.USER, tuple(run)))
                        run = []
                    messages.append(_function_response(part, calls))
                elif kind == "text":
                    run.append(text_block(part.string("text")))
                elif kind == "inlineData":
                    run.append(_image(part))
                elif kind == _KEPT:
                    run.append(_kept(part))
                else:
                    raise bad(part.at(kind), "a functionCall part belongs in a model content")
            if run:
                messages.append(Message(Role.USER, tuple(run)))
        else:
            raise unsupported(content.at("role"), f"a content of role {role!r}")
    return tuple(messages)


__all__ = ["call_id", "ingest_items", "ingest_response"]
