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
- Images are ``inlineData`` (PNG, JPEG, WebP, HEIC, HEIF; other types are a
  text placeholder with IMAGE_UNSUPPORTED).
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role
from ctxwarden.core.render._common import (
    CONTINUED_TEXT,
    EMPTY_MESSAGE_OMITTED,
    FIRST_MESSAGE_INSERTED,
    GEMINI_IMAGE_TYPES,
    JsonObject,
    Notes,
    ToolIds,
    b64,
    call_arguments,
    drop_thinking,
    image_placeholder,
    is_base64,
    mime_type,
    same_model,
    tool_schema,
)
from ctxwarden.core.session import ToolDefinition

PROVIDER = "Gemini"


def _inline(block: ContentBlock) -> JsonObject:
    return {"inlineData": {"mimeType": mime_type(block), "data": b64(block.data)}}


def _user_parts(message: Message, notes: Notes) -> list[JsonObject]:
    parts: list[JsonObject] = []
    for block in message.content:
        if block.kind is ContentKind.TEXT and block.text:
            parts.append({"text": block.text})
        elif block.kind is ContentKind.IMAGE:
            placeholder = image_placeholder(block, GEMINI_IMAGE_TYPES, PROVIDER, message.seq, notes)
            parts.append(_inline(block) if placeholder is None else {"text": placeholder})
    return parts


def _model_parts(
    message: Message, model: str, ids: ToolIds, names: dict[str, str], notes: Notes
) -> list[JsonObject]:
    parts: list[JsonObject] = []
    pending = ""  # a signature waiting for the part that carried it
    dropped = 0
    keep = same_model(message, model)

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
            call_id = ids.call(block.tool_call_id)
            names[call_id] = block.tool_name
            call: JsonObject = {"id": call_id} if call_id else {}
            call["name"] = block.tool_name
            call["args"] = call_arguments(block, message.seq, notes)
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
    if pending:
        emit({"text": ""})
    if dropped:
        if not keep:
            reason = f"made by model {message.model or '(unknown)'!r}, not {model or '(unknown)'!r}"
        else:
            reason = "redacted, or no valid (base64) thought signature"
        drop_thinking(message, dropped, reason, notes)
    return parts


def _function_response(
    message: Message, ids: ToolIds, names: dict[str, str], notes: Notes
) -> JsonObject:
    call_id = ids.result(message.tool_call_id)
    text = message.text
    media: list[JsonObject] = []
    for block in message.content:
        if block.kind is ContentKind.IMAGE:
            placeholder = image_placeholder(block, GEMINI_IMAGE_TYPES, PROVIDER, message.seq, notes)
            if placeholder is None:
                media.append(_inline(block))
            else:
                text = f"{text}\n{placeholder}" if text else placeholder
    response: JsonObject = {"id": call_id} if call_id else {}
    response["name"] = message.tool_name or names.get(call_id, "")
    response["response"] = {"error" if message.is_error else "output": text}
    if media:
        response["parts"] = media
    return {"functionResponse": response}


def render_gemini(
    system_prompt: str,
    tools: Sequence[ToolDefinition],
    messages: Sequence[Message],
    *,
    model: str,
    notes: Notes,
    ids: ToolIds,
) -> JsonObject:
    contents: list[JsonObject] = []
    names: dict[str, str] = {}
    first_seq: int | None = None

    def push(role: str, parts: list[JsonObject], seq: int) -> None:
        nonlocal first_seq
        if first_seq is None:
            first_seq = seq
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for message in messages:
        if message.role is Role.TOOL_RESULT:
            push("user", [_function_response(message, ids, names, notes)], message.seq)
            continue
        if message.role is Role.USER:
            parts = _user_parts(message, notes)
        else:
            parts = _model_parts(message, model, ids, names, notes)
        if not parts:
            notes.add(EMPTY_MESSAGE_OMITTED, message.seq, "nothing left to send")
            continue
        push("user" if message.role is Role.USER else "model", parts, message.seq)

    if contents and contents[0]["role"] == "model":
        contents.insert(0, {"role": "user", "parts": [{"text": CONTINUED_TEXT}]})
        notes.add(
            FIRST_MESSAGE_INSERTED,
            first_seq or 0,
            f"Gemini needs a user turn first; inserted {CONTINUED_TEXT!r}",
        )

    body: JsonObject = {}
    if system_prompt:
        body["systemInstruction"] = {"parts": [{"text": system_prompt}]}
    body["contents"] = contents
    if tools:
        declarations = [_declaration(t, notes) for t in tools]
        body["tools"] = [{"functionDeclarations": declarations}]
    return body


def _declaration(tool: ToolDefinition, notes: Notes) -> JsonObject:
    out: JsonObject = {"name": tool.name}
    if tool.description:
        out["description"] = tool.description
    out["parametersJsonSchema"] = tool_schema(tool, notes)
    return out
