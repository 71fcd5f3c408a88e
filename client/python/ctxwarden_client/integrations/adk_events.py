"""Google ADK events <-> ctxwarden messages, exactly.

An event is stored as ADK's own database service stores it (``model_dump(mode="json",
exclude_none=True)``, rebuilt with ``Event.model_validate``), split in two: the
content that ctxwarden models goes into content blocks (``text`` parts as text,
``function_call`` parts with an id as tool calls, ``inline_data`` images as images,
and an event whose only part is a ``function_response`` with an id as a tool result
with the response as JSON text), and the rest of the event (author, ids, actions,
timestamps, other parts) is a JSON envelope in the message metadata under
:data:`ENVELOPE_KEY`. An event by the user is a USER message, any other an
ASSISTANT message. An event with nothing for the model (only a state delta, only
thoughts, ...) is a history-only message: stored and listed, never in a model input.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from google.adk.events.event import Event

from ..v1 import message_pb2 as m

__all__ = ["ENVELOPE_KEY", "event_timestamp", "from_message", "to_message"]

ENVELOPE_KEY = "ctxwarden.adk_event"


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _part_block(part: dict[str, Any]) -> tuple[m.ContentBlock, dict[str, Any]] | None:
    """(block, the part without what the block holds), or None: the part stays whole."""
    if part.get("thought"):
        return None
    if set(part) == {"text"} and isinstance(part["text"], str):
        return m.ContentBlock(text=m.TextContent(text=part["text"])), {"$": "text"}
    call = part.get("function_call")
    if (
        set(part) == {"function_call"}
        and isinstance(call, dict)
        and call.get("id")
        and isinstance(call.get("name"), str)
        and call["name"]
    ):
        args = call.get("args", {})
        tool = m.ToolCall(id=call["id"], name=call["name"], arguments_json=_dumps(args))
        rest = {k: v for k, v in call.items() if k not in ("id", "name", "args")}
        return m.ContentBlock(tool_call=tool), {"$": "call", "rest": rest, "args": "args" in call}
    blob = part.get("inline_data")
    if set(part) == {"inline_data"} and isinstance(blob, dict):
        mime = blob.get("mime_type", "")
        data = blob.get("data")
        if isinstance(mime, str) and mime.startswith("image/") and isinstance(data, str):
            raw = base64.urlsafe_b64decode(data)
            if raw and base64.urlsafe_b64encode(raw).decode() == data:
                rest = {k: v for k, v in blob.items() if k != "data"}
                image = m.ImageContent(mime_type=mime, data=raw)
                return m.ContentBlock(image=image), {"$": "image", "rest": rest}
    return None


def to_message(event: Event) -> m.Message:
    """The ctxwarden message of one event."""
    data: dict[str, Any] = event.model_dump(exclude_none=True, mode="json")
    content = data.get("content") or {}
    parts = content.get("parts") or []
    message = m.Message(role=m.ROLE_USER if event.author == "user" else m.ROLE_ASSISTANT)
    response = parts[0].get("function_response") if len(parts) == 1 else None
    if isinstance(response, dict) and response.get("id") and set(parts[0]) == {"function_response"}:
        message.role = m.ROLE_TOOL_RESULT
        message.tool_call_id = response["id"]
        message.tool_name = str(response.get("name") or "")
        message.content.add(text=m.TextContent(text=_dumps(response.get("response", {}))))
        rest = {k: v for k, v in response.items() if k != "response"}
        content["parts"] = [{"$": "response", "rest": rest, "has": "response" in response}]
    else:
        template: list[object] = []
        for part in parts:
            found = _part_block(part)
            if found is None:
                template.append({"$": "part", "part": part})
            else:
                message.content.append(found[0])
                template.append(found[1])
        if parts:
            content["parts"] = template
    if not message.content:
        message.visibility = m.MESSAGE_VISIBILITY_HISTORY_ONLY
    message.metadata[ENVELOPE_KEY] = _dumps(data)
    return message


def _fill(template: list[dict[str, Any]], message: m.Message) -> list[dict[str, Any]]:
    blocks = iter(message.content)
    parts: list[dict[str, Any]] = []
    for part in template:
        kind = part.get("$")
        if kind == "part":
            parts.append(part["part"])
        elif kind == "response":
            response = dict(part["rest"])
            text = next(blocks).text.text
            if part["has"]:
                response["response"] = json.loads(text)
            parts.append({"function_response": response})
        elif kind == "text":
            parts.append({"text": next(blocks).text.text})
        elif kind == "call":
            call = next(blocks).tool_call
            value = {**part["rest"], "id": call.id, "name": call.name}
            if part["args"]:
                value["args"] = json.loads(call.arguments_json or "{}")
            parts.append({"function_call": value})
        elif kind == "image":
            image = next(blocks).image
            data = base64.urlsafe_b64encode(image.data).decode()
            parts.append({"inline_data": {**part["rest"], "data": data}})
        else:
            raise ValueError(f"unknown part template {kind!r}")
    return parts


def from_message(message: m.Message) -> Event | None:
    """The event a message was made from; None for a message without an envelope."""
    raw = message.metadata.get(ENVELOPE_KEY)
    if not raw:
        return None
    data = json.loads(raw)
    content = data.get("content")
    if isinstance(content, dict) and content.get("parts"):
        content["parts"] = _fill(content["parts"], message)
    return Event.model_validate(data)


def event_timestamp(message: m.Message) -> float | None:
    """The event's own timestamp, from the envelope (without rebuilding the event)."""
    raw = message.metadata.get(ENVELOPE_KEY)
    if not raw:
        return None
    value = json.loads(raw).get("timestamp")
    return float(value) if isinstance(value, int | float) else None
