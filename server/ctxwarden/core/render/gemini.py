"""Google Gemini: ``{"systemInstruction": ..., "contents": [...], "tools": [...]}``.

Field names are the REST API's (camelCase), as the google-genai SDK sends them.

- ``systemInstruction`` is ``{"parts": [{"text": ...}]}`` (left out when empty).
- Contents have role ``user`` or ``model``; consecutive contents of the same
  role are merged, parts appended (``role`` comes before ``parts``, so a merge
  only appends at the end of the JSON). When the input begins with the model,
  a user content "(continued)" goes first (FIRST_MESSAGE_INSERTED): Gemini
  wants a function-call turn to follow a user or function-response turn.
- Tool calls are ``functionCall`` parts ``{"id", "name", "args"}``; results
  are ``functionResponse`` parts ``{"id", "name", "response"}`` in a ``user``
  content (the role the SDK's own automatic function calling uses), with
  ``response`` ``{"output": text}`` or, for an error, ``{"error": text}``.
  Images of a tool result go in the function response's ``parts`` as
  ``inlineData`` (Gemini 3's multimodal function responses).
- Thinking goes back only to the model that made it and only with a valid
  (base64) ``thoughtSignature``: a thinking block with text becomes
  ``{"text", "thought": true, "thoughtSignature"}``; one with a signature and
  no text stands for a signature Gemini put on the part after it, so the
  signature goes on the next part of the message (on ``{"text": ""}`` when
  nothing follows). Anything else, and redacted thinking (Gemini has no such
  part), is dropped with THINKING_DROPPED.
- Tools are one ``functionDeclarations`` entry; the schema goes in
  ``parametersJsonSchema`` (full JSON Schema, as the other providers take it;
  ``parameters`` is an OpenAPI subset that rejects e.g. ``additionalProperties``
  on older models and ``$schema``, ``const`` or type lists).
- PROVIDER blocks of family ``google`` (e.g. ``executableCode`` and
  ``codeExecutionResult`` parts) are parts sent as stored, in their place (a
  tool result's go in its function response's ``parts``); those of another
  family are dropped with PROVIDER_CONTENT_DROPPED.
- Images are ``inlineData`` (PNG, JPEG, WebP, HEIC, HEIF; other types are a
  text placeholder with IMAGE_UNSUPPORTED).
"""

from __future__ import annotations

from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role
from ctxwarden.core.render._build import Finish, Job, Media, Renderer, Turns
from ctxwarden.core.render._common import (
    CONTINUED_TEXT,
    GEMINI_IMAGE_TYPES,
    JsonObject,
    Notes,
    b64,
    call_arguments,
    drop_thinking,
    image_placeholder,
    is_base64,
    mime_type,
    other_model,
    same_model,
    tool_entry,
)

PROVIDER = "Gemini"
FAMILY = "google"


def _text(text: str) -> JsonObject:
    return {"text": text}


def _inline(block: ContentBlock) -> JsonObject:
    return {"inlineData": {"mimeType": mime_type(block), "data": b64(block.data)}}


_MEDIA = Media(PROVIDER, GEMINI_IMAGE_TYPES, _text, _inline, FAMILY)


def _model_parts(message: Message, job: Job, names: dict[str, str]) -> list[JsonObject]:
    parts: list[JsonObject] = []
    pending = ""  # a signature waiting for the part that carried it
    dropped = 0
    keep = same_model(message, job.model)

    def emit(part: JsonObject) -> None:
        nonlocal pending
        if pending:
            part["thoughtSignature"] = pending
            pending = ""
        parts.append(part)

    for block in message.content:
        if block.kind is ContentKind.TEXT and block.text:
            emit({"text": block.text})
        elif block.kind is ContentKind.TOOL_CALL:
            call_id = job.ids.call(block.tool_call_id)
            names[call_id] = block.tool_name
            call: JsonObject = {"id": call_id} if call_id else {}
            call["name"] = block.tool_name
            call["args"] = call_arguments(block, message.seq, job.notes)
            emit({"functionCall": call})
        elif block.kind is ContentKind.THINKING:
            if not (keep and not block.redacted and is_base64(block.signature)):
                dropped += 1
            elif block.text:
                if pending:
                    emit({"text": ""})
                parts.append(
                    {"text": block.text, "thought": True, "thoughtSignature": block.signature}
                )
            else:
                if pending:
                    emit({"text": ""})
                pending = block.signature
        elif block.kind is ContentKind.PROVIDER:
            items = _MEDIA.provider_items(block, message.seq, job.notes)
            if items and pending:
                emit({"text": ""})
            parts.extend(items)
    if pending:
        emit({"text": ""})
    if dropped:
        if not keep:
            reason = other_model(message, job.model)
        else:
            reason = "redacted, or no valid (base64) thought signature"
        drop_thinking(message, dropped, reason, job.notes)
    return parts


def _function_response(message: Message, job: Job, names: dict[str, str]) -> JsonObject:
    call_id = job.ids.result(message.tool_call_id)
    text = message.text
    media: list[JsonObject] = []
    for block in message.content:
        if block.kind is ContentKind.IMAGE:
            placeholder = image_placeholder(
                block, GEMINI_IMAGE_TYPES, PROVIDER, message.seq, job.notes
            )
            if placeholder is None:
                media.append(_inline(block))
            else:
                text = f"{text}\n{placeholder}" if text else placeholder
        elif block.kind is ContentKind.PROVIDER:
            media.extend(_MEDIA.provider_items(block, message.seq, job.notes))
    response: JsonObject = {"id": call_id} if call_id else {}
    response["name"] = message.tool_name or names.get(call_id, "")
    response["response"] = {"error" if message.is_error else "output": text}
    if media:
        response["parts"] = media
    return {"functionResponse": response}


class GeminiRenderer(Renderer):
    key = "contents"

    def __init__(self, job: Job) -> None:
        super().__init__(job)
        self._turns = Turns("parts", _text(CONTINUED_TEXT), "Gemini needs a user turn first")
        self._names: dict[str, str] = {}
        """Rendered call id -> tool name, for results that do not name their tool."""

    def feed(self, message: Message) -> None:
        job, turns, names = self.job, self._turns, self._names
        if message.role is Role.TOOL_RESULT:
            turns.add("user", [_function_response(message, job, names)], message, job, self.done)
        elif message.role is Role.USER:
            turns.add("user", _MEDIA.parts(message, job.notes), message, job, self.done)
        else:
            turns.add("model", _model_parts(message, job, names), message, job, self.done)

    def finish(self) -> Finish:
        turns = self._turns
        return Finish([] if turns.open is None else [turns.open], turns.finish_notes())

    def frame(self, notes: Notes) -> tuple[JsonObject, JsonObject]:
        job = self.job
        before: JsonObject = {}
        if job.system_prompt:
            before["systemInstruction"] = {"parts": [_text(job.system_prompt)]}
        after: JsonObject = {}
        if job.tools:
            declarations = [tool_entry(t, "parametersJsonSchema", notes) for t in job.tools]
            after["tools"] = [{"functionDeclarations": declarations}]
        return before, after

    def _copy_into(self, other: GeminiRenderer) -> None:
        other._turns = self._turns.copy()
        other._names = dict(self._names)
