"""Messages as text for a summariser: role-tagged lines the model will not
mistake for a conversation to continue."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role
from ctxwarden.core.stepwise import EVERY, Steps

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
    return "\n\n".join(part for part in serialized_parts(messages) if part)


def serialize_steps(messages: Iterable[Message]) -> Steps[str]:
    """``serialize_messages`` in steps (core.stepwise)."""
    parts: list[str] = []
    for i, part in enumerate(serialized_parts(messages)):
        if part:
            parts.append(part)
        if i % EVERY == EVERY - 1:
            yield
    return "\n\n".join(parts)


def serialized_parts(messages: Iterable[Message]) -> Iterator[str]:
    """``serialize_messages`` one message at a time, lazily: the text of each
    message ("" for one that is skipped); joining the non-empty ones with a
    blank line gives ``serialize_messages``."""
    failed_calls: set[str] = set()
    for m in messages:
        lines: list[str] = []
        if m.history_only:
            yield ""  # never shown to the model, so never summarised
            continue
        if m.failed:
            failed_calls.update(c.tool_call_id for c in m.tool_calls)
            yield ""
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
        elif m.tool_call_id not in failed_calls:
            tag = f"[Tool result {m.tool_name}]" if m.tool_name else "[Tool result]"
            if m.is_error:
                tag = tag[:-1] + " (error)]"
            text = " ".join(t for t in (m.text, _provider_labels(m)) if t)
            lines.append(f"{tag}: {_cap(text, TOOL_RESULT_CAP)}")
        yield "\n\n".join(lines)
