"""LangChain messages <-> ctxwarden messages, exactly.

A ``HumanMessage`` is a USER message, an ``AIMessage`` an ASSISTANT message (its
text, then its ``tool_calls`` as tool calls), a ``ToolMessage`` a tool result
(``tool_call_id``). ``SystemMessage`` and the other kinds are USER messages:
ctxwarden's system prompt is the session's. Text (a string content, or the
``text`` parts of a part list) is content; what the blocks do not hold (the
message's type, id, name, ``additional_kwargs``, ``response_metadata``, usage,
non-text parts) is a small JSON envelope in the message's metadata under
:data:`ENVELOPE_KEY`, with which :func:`from_ctxwarden` gives back an equal
message. A message without one (a compaction summary) becomes the plain
LangChain message of its role.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)

from ..v1 import message_pb2 as m

__all__ = ["ENVELOPE_KEY", "from_ctxwarden", "to_ctxwarden"]

ENVELOPE_KEY = "ctxwarden.langchain_message"


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text(text: str) -> m.ContentBlock:
    return m.ContentBlock(text=m.TextContent(text=text))


def _content(content: object) -> tuple[list[m.ContentBlock], object]:
    """(text blocks, template): a string is one block; in a part list each ``text``
    part is a block (template: the part without its text), any other part stays in
    the template as it is, under ``{"$part": ...}``."""
    if isinstance(content, str):
        return [_text(content)], None
    blocks: list[m.ContentBlock] = []
    template: list[object] = []
    for part in content if isinstance(content, list) else []:
        if (
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ):
            blocks.append(_text(part["text"]))
            template.append({k: v for k, v in part.items() if k != "text"})
        elif isinstance(part, str):
            blocks.append(_text(part))
            template.append("$str")
        else:
            template.append({"$part": part})
    return blocks, template


def _fill(template: object, texts: list[str]) -> object:
    if template is None:
        return texts[0] if texts else ""
    assert isinstance(template, list)
    out: list[object] = []
    pending = iter(texts)
    for part in template:
        if part == "$str":
            out.append(next(pending))
        elif isinstance(part, dict) and "$part" in part:
            out.append(part["$part"])
        else:
            assert isinstance(part, dict)
            out.append({**part, "text": next(pending)})
    return out


def _role(message: BaseMessage) -> m.Role.ValueType:
    if isinstance(message, AIMessage):
        return m.ROLE_ASSISTANT
    if isinstance(message, ToolMessage):
        return m.ROLE_TOOL_RESULT
    return m.ROLE_USER


def to_ctxwarden(message: BaseMessage) -> m.Message:
    """The ctxwarden message of a LangChain message (see the module docstring)."""
    data: dict[str, Any] = message_to_dict(message)
    inner = dict(data["data"])
    blocks, template = _content(inner.pop("content", ""))
    inner["content"] = template
    role = _role(message)
    calls = inner.get("tool_calls") or []
    if role == m.ROLE_ASSISTANT and calls and all(c.get("id") and c.get("name") for c in calls):
        for call in calls:
            blocks.append(
                m.ContentBlock(
                    tool_call=m.ToolCall(
                        id=call["id"], name=call["name"], arguments_json=_dumps(call["args"])
                    )
                )
            )
        inner["tool_calls"] = [
            {k: v for k, v in c.items() if k not in ("id", "name", "args")} for c in calls
        ]
        inner["$calls"] = True
    if not blocks:
        blocks.append(_text(""))
        inner["$empty"] = True
    out = m.Message(
        role=role,
        content=blocks,
        metadata={ENVELOPE_KEY: _dumps({"type": data["type"], "data": inner})},
    )
    if role == m.ROLE_TOOL_RESULT:
        out.tool_call_id = str(inner.get("tool_call_id") or "")
        out.tool_name = str(inner.get("name") or "")
        out.is_error = inner.get("status") == "error"
    return out


def _rebuild(message: m.Message, envelope: dict[str, Any]) -> BaseMessage:
    inner = dict(envelope["data"])
    texts = [b.text.text for b in message.content if b.WhichOneof("block") == "text"]
    calls = [b.tool_call for b in message.content if b.WhichOneof("block") == "tool_call"]
    if inner.pop("$empty", False):
        texts = []
    inner["content"] = _fill(inner["content"], texts)
    if inner.pop("$calls", False):
        inner["tool_calls"] = [
            {**rest, "name": c.name, "args": json.loads(c.arguments_json or "{}"), "id": c.id}
            for rest, c in zip(inner["tool_calls"], calls, strict=True)
        ]
    (rebuilt,) = messages_from_dict([{"type": envelope["type"], "data": inner}])
    return rebuilt


def _plain(message: m.Message) -> BaseMessage:
    text = "".join(b.text.text for b in message.content if b.WhichOneof("block") == "text")
    if message.role == m.ROLE_TOOL_RESULT:
        return ToolMessage(content=text, tool_call_id=message.tool_call_id)
    if message.role == m.ROLE_ASSISTANT:
        calls = [
            {
                "name": b.tool_call.name,
                "args": json.loads(b.tool_call.arguments_json or "{}"),
                "id": b.tool_call.id,
                "type": "tool_call",
            }
            for b in message.content
            if b.WhichOneof("block") == "tool_call"
        ]
        return AIMessage(content=text, tool_calls=calls)
    return HumanMessage(content=text)


def from_ctxwarden(message: m.Message) -> BaseMessage:
    """The LangChain message a stored message was made from (or the plain one of its role)."""
    raw = message.metadata.get(ENVELOPE_KEY)
    if raw:
        try:
            return _rebuild(message, json.loads(raw))
        except (ValueError, KeyError, TypeError, AssertionError, StopIteration):
            pass  # the content was changed (e.g. a truncated tool output)
    return _plain(message)
