"""pi's session entries <-> ctxwarden messages: the per-message mapping.

pi (npm ``@mariozechner/pi-coding-agent``, ``SessionManager``) writes a session
as JSON Lines: a ``session`` header, then entries linked by ``id``/``parentId``.
The messages the model sees come from ``message`` entries (roles ``user``,
``assistant``, ``toolResult``, and ``bashExecution``/``custom``, which pi turns
into user messages), ``custom_message`` and ``branch_summary`` entries. Every
entry imported keeps its pi form (without the content, which ctxwarden holds)
in the metadata key ``pi.entry``, so an export writes it back as it was.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role, StopReason, Usage

PI_ENTRY = "pi.entry"
"""Metadata key: the pi entry a message came from, its content left out."""
BRANCH_SUMMARY_PREFIX = (
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
)
BRANCH_SUMMARY_SUFFIX = "</summary>"
STOP = {
    "stop": StopReason.STOP,
    "length": StopReason.LENGTH,
    "toolUse": StopReason.TOOL_USE,
    "error": StopReason.ERROR,
    "aborted": StopReason.ABORTED,
}
STOP_NAME = {v: k for k, v in STOP.items()}

Entry = dict[str, Any]


def compact(value: Any) -> str:
    """JSON as JavaScript's JSON.stringify writes it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def time_us(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1_000_000)


def iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1_000_000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _blocks(content: Any) -> tuple[ContentBlock, ...]:
    if isinstance(content, str):
        return (ContentBlock.of_text(content),)
    out = []
    for b in content:
        kind = b.get("type")
        if kind == "text":
            out.append(ContentBlock.of_text(b["text"]))
        elif kind == "image":
            out.append(
                ContentBlock(
                    ContentKind.IMAGE, mime_type=b["mimeType"], data=base64.b64decode(b["data"])
                )
            )
        elif kind == "thinking":
            out.append(
                ContentBlock(
                    ContentKind.THINKING,
                    text=b.get("thinking", ""),
                    signature=b.get("thinkingSignature") or "",
                    redacted=bool(b.get("redacted", False)),
                )
            )
        elif kind == "toolCall":
            out.append(ContentBlock.of_tool_call(b["id"], b["name"], compact(b["arguments"])))
        else:
            raise ValueError(f"pi content block of type {kind!r} is not supported")
    return tuple(out)


def pi_blocks(message: Message) -> list[Entry]:
    out: list[Entry] = []
    for b in message.content:
        if b.kind is ContentKind.TEXT:
            out.append({"type": "text", "text": b.text})
        elif b.kind is ContentKind.IMAGE:
            out.append(
                {
                    "type": "image",
                    "data": base64.b64encode(b.data).decode(),
                    "mimeType": b.mime_type,
                }
            )
        elif b.kind is ContentKind.THINKING:
            block: Entry = {"type": "thinking", "thinking": b.text}
            if b.signature:
                block["thinkingSignature"] = b.signature
            if b.redacted:
                block["redacted"] = True
            out.append(block)
        elif b.kind is ContentKind.TOOL_CALL:
            arguments = json.loads(b.arguments_json or "{}")
            out.append(
                {
                    "type": "toolCall",
                    "id": b.tool_call_id,
                    "name": b.tool_name,
                    "arguments": arguments,
                }
            )
        # Provider items have no pi form: left out.
    return out


def _bash_text(m: Entry) -> str:
    """pi's bashExecutionToText."""
    text = f"Ran `{m['command']}`\n"
    text += f"```\n{m['output']}\n```" if m.get("output") else "(no output)"
    if m.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif m.get("exitCode") not in (None, 0):
        text += f"\n\nCommand exited with code {m['exitCode']}"
    if m.get("truncated") and m.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {m['fullOutputPath']}]"
    return text


def message_of(entry: Entry) -> Message | None:
    """The ctxwarden message of a pi entry on the path the model sees; None for
    entries the model never sees (model or thinking changes, labels, ...), which
    the importer keeps as history-only messages."""
    common: dict[str, Any] = {
        "create_time_us": time_us(entry["timestamp"]),
        "message_id": entry["id"],
    }
    kind = entry["type"]
    if kind == "message":
        return _message_entry(entry, common)
    common["metadata"] = {PI_ENTRY: compact(entry)}
    if kind == "custom_message":
        return Message(Role.USER, _blocks(entry["content"]), **common)
    if kind == "branch_summary" and entry.get("summary"):
        text = BRANCH_SUMMARY_PREFIX + entry["summary"] + BRANCH_SUMMARY_SUFFIX
        return Message(Role.USER, (ContentBlock.of_text(text),), **common)
    return None


def _message_entry(entry: Entry, common: dict[str, Any]) -> Message | None:
    """A ``message`` entry: user, assistant and tool results keep their pi form
    without the content (stored once, as ctxwarden blocks); bash executions and
    custom messages are user messages, the rest is not seen by the model."""
    m = entry["message"]
    role = m.get("role")
    if role in ("user", "assistant", "toolResult"):
        rest = {k: v for k, v in m.items() if k != "content"}
        if isinstance(m.get("content"), str):
            rest["content"] = ""  # marks pi's string form of a user message
        common["metadata"] = {PI_ENTRY: compact({**entry, "message": rest})}
        content = _blocks(m.get("content", []))
        if role == "user":
            return Message(Role.USER, content, **common)
        if role == "toolResult":
            return Message(
                Role.TOOL_RESULT,
                content,
                tool_call_id=m["toolCallId"],
                tool_name=m.get("toolName", ""),
                is_error=bool(m.get("isError")),
                **common,
            )
        return _assistant(m, content, common)
    common["metadata"] = {PI_ENTRY: compact(entry)}
    if role == "bashExecution":
        if m.get("excludeFromContext"):
            return None
        return Message(Role.USER, (ContentBlock.of_text(_bash_text(m)),), **common)
    if role == "custom":
        return Message(Role.USER, _blocks(m["content"]), **common)
    return None


def _assistant(
    m: dict[str, Any], content: tuple[ContentBlock, ...], common: dict[str, Any]
) -> Message:
    u = m.get("usage") or {}
    return Message(
        Role.ASSISTANT,
        content,
        stop_reason=STOP.get(m.get("stopReason", ""), StopReason.STOP),
        usage=Usage(
            u.get("input", 0),
            u.get("output", 0),
            u.get("cacheRead", 0),
            u.get("cacheWrite", 0),
            u.get("totalTokens", 0),
        )
        if u
        else None,
        model=m.get("model", ""),
        provider=m.get("provider", ""),
        error_message=m.get("errorMessage", ""),
        **common,
    )


def entry_of(message: Message, entry_id: str, parent_id: str | None) -> Entry:
    """The pi entry of a ctxwarden message: its stored pi form when it came from
    pi (content put back), else a ``message`` entry made from its fields."""
    stored = message.metadata.get(PI_ENTRY)
    if stored:
        entry: Entry = json.loads(stored)
        entry["id"], entry["parentId"] = entry_id, parent_id
        m: Entry = entry.get("message") or {}
        if entry["type"] == "message" and m.get("role") in ("user", "assistant", "toolResult"):
            if m.get("content") == "":  # pi's string form of a user message
                m["content"] = message.content[0].text if message.content else ""
            else:
                m["content"] = pi_blocks(message)
        return entry
    ms = message.create_time_us // 1000
    if message.role is Role.USER:
        body: Entry = {"role": "user", "content": pi_blocks(message), "timestamp": ms}
    elif message.role is Role.TOOL_RESULT:
        body = {
            "role": "toolResult",
            "toolCallId": message.tool_call_id,
            "toolName": message.tool_name,
            "content": pi_blocks(message),
            "isError": message.is_error,
            "timestamp": ms,
        }
    else:
        u = message.usage or Usage()
        body = {
            "role": "assistant",
            "content": pi_blocks(message),
            "api": "",
            "provider": message.provider,
            "model": message.model,
            "usage": {
                "input": u.input_tokens,
                "output": u.output_tokens,
                "cacheRead": u.cache_read_tokens,
                "cacheWrite": u.cache_write_tokens,
                "totalTokens": u.total_tokens,
                "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
            },
            "stopReason": STOP_NAME.get(message.stop_reason, "stop"),
            "timestamp": ms,
        }
        if message.error_message:
            body["errorMessage"] = message.error_message
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent_id,
        "timestamp": iso(message.create_time_us),
        "message": body,
    }
