"""Messages as text for a summariser: role-tagged lines the model will not
mistake for a conversation to continue."""

from __future__ import annotations

from collections.abc import Iterable

from ctxwarden.core.messages import ContentKind, Message, Role

TOOL_RESULT_CAP = 2000


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters not shown]"


def serialize_messages(messages: Iterable[Message]) -> str:
    """Failed assistant messages and the results of their calls are skipped,
    images are dropped, tool results are capped at 2,000 characters."""
    lines: list[str] = []
    failed_calls: set[str] = set()
    for m in messages:
        if m.failed:
            failed_calls.update(c.tool_call_id for c in m.tool_calls)
            continue
        if m.role is Role.USER:
            if m.text:
                lines.append(f"[User]: {m.text}")
        elif m.role is Role.ASSISTANT:
            for block in m.content:
                if block.kind is ContentKind.THINKING and block.text and not block.redacted:
                    lines.append(f"[Assistant thinking]: {block.text}")
                elif block.kind is ContentKind.TEXT and block.text:
                    lines.append(f"[Assistant]: {block.text}")
            calls = [f"{c.tool_name}({c.arguments_json or '{}'})" for c in m.tool_calls]
            if calls:
                lines.append(f"[Assistant tool calls]: {'; '.join(calls)}")
        else:
            if m.tool_call_id in failed_calls:
                continue
            tag = f"[Tool result {m.tool_name}]" if m.tool_name else "[Tool result]"
            if m.is_error:
                tag = tag[:-1] + " (error)]"
            lines.append(f"{tag}: {_cap(m.text, TOOL_RESULT_CAP)}")
    return "\n\n".join(lines)
