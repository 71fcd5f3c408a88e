"""Messages as text for a summariser: role-tagged lines the model will not
mistake for a conversation to continue."""

from __future__ import annotations

import json
from collections.abc import Iterable

from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role

TOOL_RESULT_CAP = 2000


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters not shown]"


def provider_label(block: ContentBlock) -> str:
    """A PROVIDER block in one short line, never its JSON: ``[anthropic
    web_search_tool_result]`` (the item's ``type``, else its only key, as in
    Gemini's ``executableCode`` part)."""
    try:
        value = json.loads(block.provider_json)
    except (ValueError, RecursionError):
        value = None
    what = "item"
    if isinstance(value, dict):
        kind = value.get("type")
        if isinstance(kind, str) and kind:
            what = kind
        else:
            keys = [k for k in value if k not in ("thoughtSignature", "thought_signature")]
            if keys:
                what = keys[0]
    elif isinstance(value, list):
        what = f"{len(value)} items"
    return f"[{block.family} {_cap(what, 64)}]"


def _provider_labels(m: Message) -> str:
    return " ".join(provider_label(b) for b in m.content if b.kind is ContentKind.PROVIDER)


def serialize_messages(messages: Iterable[Message]) -> str:
    """History-only messages, failed assistant messages and the results of their
    calls are skipped,
    images are dropped, tool results are capped at 2,000 characters, provider
    items ctxwarden does not model are one label each (``provider_label``)."""
    lines: list[str] = []
    failed_calls: set[str] = set()
    for m in messages:
        if m.history_only:
            continue  # never shown to the model, so never summarised
        if m.failed:
            failed_calls.update(c.tool_call_id for c in m.tool_calls)
            continue
        if m.role is Role.USER:
            text = " ".join(t for t in (m.text, _provider_labels(m)) if t)
            if text:
                lines.append(f"[User]: {text}")
        elif m.role is Role.ASSISTANT:
            for block in m.content:
                if block.kind is ContentKind.THINKING and block.text and not block.redacted:
                    lines.append(f"[Assistant thinking]: {block.text}")
                elif block.kind is ContentKind.TEXT and block.text:
                    lines.append(f"[Assistant]: {block.text}")
                elif block.kind is ContentKind.PROVIDER:
                    lines.append(f"[Assistant]: {provider_label(block)}")
            calls = [f"{c.tool_name}({c.arguments_json or '{}'})" for c in m.tool_calls]
            if calls:
                lines.append(f"[Assistant tool calls]: {'; '.join(calls)}")
        else:
            if m.tool_call_id in failed_calls:
                continue
            tag = f"[Tool result {m.tool_name}]" if m.tool_name else "[Tool result]"
            if m.is_error:
                tag = tag[:-1] + " (error)]"
            text = " ".join(t for t in (m.text, _provider_labels(m)) if t)
            lines.append(f"{tag}: {_cap(text, TOOL_RESULT_CAP)}")
    return "\n\n".join(lines)
