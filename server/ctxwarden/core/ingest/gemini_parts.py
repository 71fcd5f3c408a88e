"""Google Gemini parts read into content blocks, for responses and contents alike.

Keys are read in the REST API's camelCase or in the snake_case of the
google-genai SDK's ``to_json_dict()`` (see ``ctxwarden.core.ingest.gemini``).
"""

from __future__ import annotations

import hashlib

from ctxwarden.core.ingest._common import image_block, provider_block, text_block, thinking_block
from ctxwarden.core.ingest._json import Obj, arguments_object, bad, decode_base64
from ctxwarden.core.messages import ContentBlock

FAMILY = "google"
"""The family of this wire format's PROVIDER blocks."""

_DATA_KEYS = ("text", "inlineData", "functionCall", "functionResponse")
_KEPT_KEYS = (
    "fileData",
    "executableCode",
    "codeExecutionResult",
    "toolCall",
    "toolResponse",
)


KEPT = "kept"
"""The kind of a part kept whole as a PROVIDER block."""


def kept(part: Obj) -> ContentBlock:
    return provider_block(FAMILY, part.value)


def part_kind(part: Obj) -> str:
    """The data key of the part, or ``KEPT`` for data ctxwarden does not model."""
    if any(part.has(key) for key in _KEPT_KEYS):
        return KEPT
    present = [key for key in _DATA_KEYS if part.get(key) is not None]
    if len(present) != 1:
        shown = ", ".join(sorted(part.value)) or "nothing"
        raise bad(part.path, f"a part needs exactly one of {', '.join(_DATA_KEYS)}; it has {shown}")
    return present[0]


def call_id(response_id: str, index: int, name: str, arguments: str) -> str:
    """The id of a function call that came without one."""
    key = "\x1f".join((response_id, str(index), name, arguments))
    return "gemini_" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def _function_call(part: Obj, response_id: str, index: int) -> ContentBlock:
    call = part.obj("functionCall")
    name = call.nonempty_str("name")
    arguments = arguments_object(call.get("args"), call.at("args"))
    return ContentBlock.of_tool_call(
        call.opt_str("id") or call_id(response_id, index, name, arguments), name, arguments
    )


def model_parts(parts: list[Obj], response_id: str, start: int = 0) -> list[ContentBlock]:
    blocks: list[ContentBlock] = []
    for index, part in enumerate(parts, start):
        kind = part_kind(part)
        if kind in (KEPT, "inlineData"):
            blocks.append(kept(part))  # an image in model output is kept too
            continue
        signature = part.opt_str("thoughtSignature")
        if part.flag("thought"):
            if kind != "text":
                raise bad(part.at("thought"), "a thought part must be text")
            text = part.string("text")
            if text or signature:
                blocks.append(thinking_block(text, signature))
            continue
        if signature:
            blocks.append(thinking_block("", signature))
        if kind == "text":
            if part.string("text"):
                blocks.append(text_block(part.string("text")))
        elif kind == "functionCall":
            blocks.append(_function_call(part, response_id, index))
        else:
            raise bad(part.at(kind), "a functionResponse part belongs in a user content")
    return blocks


def image(part: Obj) -> ContentBlock:
    blob = part.obj("inlineData")
    return image_block(blob.string("mimeType"), decode_base64(blob.string("data"), blob.at("data")))


__all__ = ["FAMILY", "KEPT", "call_id", "image", "kept", "model_parts", "part_kind"]
