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
  without content naming ``promptFeedback.blockReason``. A document with none
  of a response's fields (``candidates``, ``promptFeedback``,
  ``usageMetadata``, ``modelVersion``, ``responseId``; a stream: in no chunk),
  e.g. another provider's response, is refused.
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
  ``parts`` are the result's images. A response without an id (the API's
  usual form) answers the earliest unanswered call of its name among the
  contents, else the session's open call of its name (``open_calls``: the
  calls still waiting for a result), as the API pairs them; two open calls of
  that name are ambiguous, and refused (send ids).
- Parts ctxwarden does not model (``executableCode``,
  ``codeExecutionResult``, ``fileData``, ``toolCall``, ``toolResponse``, and
  images in model output) are PROVIDER blocks of family ``google``: the
  whole part as sent (its ``thoughtSignature`` included), in the user or
  model message it is in, or among a function response's ``parts`` in the
  tool result.
- Rejected: parts with none of the data ctxwarden reads or keeps.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.ingest._common import text_block, tool_result
from ctxwarden.core.ingest._json import Obj, as_arr, as_obj, bad, dumps, unsupported
from ctxwarden.core.ingest._messages import (
    IngestedTurn,
    assistant_message,
    assistant_turn,
    user_messages,
)
from ctxwarden.core.ingest.gemini_parts import KEPT, call_id, image, kept, model_parts, part_kind
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, StopReason, Usage

PROVIDER = "google"


def _usage(o: Obj | None) -> Usage | None:
    if o is None:
        return None
    cached = o.count("cachedContentTokenCount")
    return Usage(
        input_tokens=max(o.count("promptTokenCount") - cached, 0),
        output_tokens=o.count("candidatesTokenCount") + o.count("thoughtsTokenCount"),
        cache_read_tokens=cached,
        total_tokens=o.count("totalTokenCount"),
        reasoning_tokens=o.count("thoughtsTokenCount"),
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
        blocks = model_parts(parts, response_id)
        if streamed and not candidate.finish_reason:
            stop = (StopReason.ABORTED, "the stream ended before a finishReason")
        else:
            stop = _stop(candidate.finish_reason, candidate.finish_message, blocks)
    return assistant_turn(
        blocks,
        stop,
        usage,
        model=model,
        provider=PROVIDER,
        response_id=response_id,
        streamed=streamed,
    )


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


_FIELDS = ("candidates", "promptFeedback", "usageMetadata", "modelVersion", "responseId")
"""A GenerateContentResponse carries at least one of these (a blocked prompt
has no candidates, but promptFeedback)."""


def _is_gemini(response: Obj) -> bool:
    return any(response.has(key) for key in _FIELDS)


def _not_gemini(path: str, document: object) -> InvalidArgument:
    keys = sorted(document) if isinstance(document, dict) else []
    shown = ", ".join(keys[:10]) + (", ..." if len(keys) > 10 else "") if keys else "nothing"
    return bad(
        path,
        f"this is no Gemini GenerateContentResponse: it has none of {', '.join(_FIELDS)} "
        f"(it has {shown}). Another provider's response goes with that provider's format "
        "(AppendModelOutput.format)",
    )


def ingest_response(body: object, path: str) -> IngestedTurn:
    if isinstance(body, list):
        return _stream(body, path)
    response = as_obj(body, path, camel=True)
    if not _is_gemini(response):
        raise _not_gemini(path, body)
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
    if chunks.value and not any(_is_gemini(chunk) for chunk in chunks.objs()):
        raise _not_gemini(path, chunks.value[0])
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


@dataclass(slots=True)
class _Calls:
    """The function calls responses answer: those of the contents (to name and
    pair their responses), then the session's open calls."""

    names: dict[str, str] = field(default_factory=dict)
    unanswered: list[tuple[str, str]] = field(default_factory=list)  # (id, name)
    open: list[tuple[str, str]] = field(default_factory=list)
    """The session's open calls (id, name) no response of these contents answered yet."""

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
            self.open = [c for c in self.open if c[0] != given]
            return given
        return self._open_call(response, name)

    def _open_call(self, response: Obj, name: str) -> str:
        """The session's one open call named ``name``, for a response without an id."""
        matches = [call for call, call_name in self.open if call_name == name]
        if len(matches) == 1:
            self.open = [c for c in self.open if c[0] != matches[0]]
            return matches[0]
        if matches:
            shown = ", ".join(matches[:_SHOWN_IDS]) + (", ..." if len(matches) > _SHOWN_IDS else "")
            raise bad(
                response.at("id"),
                f"a functionResponse without an id answers the open call named {name!r}, and "
                f"the session has {len(matches)} ({shown}): send the id of the call it answers "
                "in functionResponse.id (the tool call id AppendModelOutput returned for it)",
            )
        raise bad(
            response.at("id"),
            f"a functionResponse without an id must answer a functionCall named {name!r} "
            "among these contents or among the session's open calls (tool calls still "
            "waiting for a result); there is none",
        )


_SHOWN_IDS = 5


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
        kind = part_kind(media)
        if kind == KEPT:
            images.append(kept(media))
        elif kind == "inlineData":
            images.append(image(media))
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


def _user(parts: list[Obj], calls: _Calls) -> Iterator[ContentBlock | Message]:
    for part in parts:
        kind = part_kind(part)
        if kind == "functionResponse":
            yield _function_response(part, calls)
        elif kind == "text":
            yield text_block(part.string("text"))
        elif kind == "inlineData":
            yield image(part)
        elif kind == KEPT:
            yield kept(part)
        else:
            raise bad(part.at(kind), "a functionCall part belongs in a model content")


def ingest_items(
    items: object, path: str, model: str, open_calls: Sequence[tuple[str, str]] = ()
) -> tuple[Message, ...]:
    """``open_calls``: the session's tool calls waiting for a result, (id, name) in
    call order; a response without an id answers the one of its name."""
    messages: list[Message] = []
    calls = _Calls(open=list(open_calls))
    for content in as_arr(items, path, camel=True).objs():
        role = content.opt_str("role") or "user"
        parts = list(content.opt_arr("parts").objs())
        if role == "model":
            for start, group in _messages(parts):
                blocks = model_parts(group, content.path, start)
                for block in blocks:
                    if block.kind is ContentKind.TOOL_CALL:
                        calls.add(block)
                messages.append(assistant_message(blocks, model=model, provider=PROVIDER))
        elif role == "user":
            messages.extend(user_messages(_user(parts, calls)))
        else:
            raise unsupported(content.at("role"), f"a content of role {role!r}")
    return tuple(messages)


__all__ = ["call_id", "ingest_items", "ingest_response"]
