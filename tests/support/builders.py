"""Small protobuf builders for tests."""

from __future__ import annotations

import json
from typing import Any

from ctxwarden.v1 import message_pb2 as m


def user(text: str, message_id: str = "") -> m.Message:
    return m.Message(
        role=m.ROLE_USER,
        content=[m.ContentBlock(text=m.TextContent(text=text))],
        message_id=message_id,
    )


def assistant(
    text: str = "",
    calls: list[tuple[str, str, dict[str, Any]]] | None = None,
    stop: int | None = None,
    error: str = "",
    message_id: str = "",
) -> m.Message:
    content = []
    if text:
        content.append(m.ContentBlock(text=m.TextContent(text=text)))
    for cid, name, args in calls or []:
        content.append(
            m.ContentBlock(tool_call=m.ToolCall(id=cid, name=name, arguments_json=json.dumps(args)))
        )
    if stop is None:
        stop = m.STOP_REASON_TOOL_USE if calls else m.STOP_REASON_STOP
    return m.Message(
        role=m.ROLE_ASSISTANT,
        content=content,
        stop_reason=stop,  # type: ignore[arg-type]
        error_message=error,
        message_id=message_id,
    )


def failed(error: str, message_id: str = "") -> m.Message:
    return assistant(stop=m.STOP_REASON_ERROR, error=error, message_id=message_id)


def result(call_id: str, text: str, name: str = "", message_id: str = "") -> m.Message:
    return m.Message(
        role=m.ROLE_TOOL_RESULT,
        content=[m.ContentBlock(text=m.TextContent(text=text))],
        tool_call_id=call_id,
        tool_name=name,
        message_id=message_id,
    )
