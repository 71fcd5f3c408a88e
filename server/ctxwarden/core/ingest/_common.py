"""What every provider reader shares: block builders."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxwarden.core.ingest._json import image_data_url
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role, StopReason


def text_block(text: str) -> ContentBlock:
    return ContentBlock.of_text(text)


def image_block(mime_type: str, data: bytes) -> ContentBlock:
    return ContentBlock(ContentKind.IMAGE, mime_type=mime_type, data=data)


def data_url_image(url: str, path: str) -> ContentBlock:
    """An image given as a ``data:`` URL (``path`` is the URL's, for errors)."""
    return image_block(*image_data_url(url, path))


def thinking_block(text: str, signature: str, *, redacted: bool = False) -> ContentBlock:
    return ContentBlock(ContentKind.THINKING, text=text, signature=signature, redacted=redacted)


def provider_block(family: str, value: Any, *, drop: tuple[str, ...] = ()) -> ContentBlock:
    """An item ctxwarden does not model, kept whole: its compact JSON (key order
    kept, as the renderers write it), without the keys in ``drop``."""
    if drop and isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in drop}
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return ContentBlock.of_provider(family, text)


def tool_result(
    call_id: str,
    content: list[ContentBlock],
    *,
    name: str = "",
    is_error: bool = False,
) -> Message:
    """A tool result; always at least one (possibly empty) text block, so that
    a result without output is still a valid message."""
    if not any(b.kind is ContentKind.TEXT for b in content):
        content = [text_block(""), *content]
    return Message(
        Role.TOOL_RESULT,
        tuple(content),
        tool_call_id=call_id,
        tool_name=name,
        is_error=is_error,
    )


def merge_text(blocks: list[ContentBlock], text: str) -> None:
    """Append streamed text: to the last block when it is text, else as a new block."""
    if blocks and blocks[-1].kind is ContentKind.TEXT:
        blocks[-1] = text_block(blocks[-1].text + text)
    else:
        blocks.append(text_block(text))


def without_empty_text(blocks: list[ContentBlock]) -> list[ContentBlock]:
    """Assistant content without empty text blocks (streams start with them;
    they carry nothing, and no provider takes them back)."""
    return [b for b in blocks if b.kind is not ContentKind.TEXT or b.text]


def mapped_stop(reasons: Mapping[str, StopReason], reason: str, key: str) -> tuple[StopReason, str]:
    """(stop reason, error message) of a provider's ``reason`` named by ``key``:
    UNSPECIFIED when ``reasons`` does not know it, a message only for ERROR."""
    stop = reasons.get(reason, StopReason.UNSPECIFIED)
    return stop, (f"{key} {reason}" if stop is StopReason.ERROR else "")
