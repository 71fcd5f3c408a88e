"""Pieces every provider renderer shares: JSON, notices, images, tool ids."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwarden.core.messages import ContentBlock, ContentKind, Message
from ctxwarden.core.models import snapshot_base
from ctxwarden.core.session import ToolDefinition
from ctxwarden.core.summary import SUMMARY_METADATA_KEY
from ctxwarden.core.view import Notice

JsonObject = dict[str, Any]

# -- notice codes --------------------------------------------------------------

THINKING_DROPPED = "THINKING_DROPPED"
"""Thinking blocks the target cannot take back (other model, no signature, no wire form)."""
TOOL_RESULT_IMAGES_MOVED = "TOOL_RESULT_IMAGES_MOVED"
"""OpenAI Chat: a tool message carries text only; its images follow in a user message."""
IMAGE_UNSUPPORTED = "IMAGE_UNSUPPORTED"
"""An image type the provider does not accept, replaced by a one-line text placeholder."""
FIRST_MESSAGE_INSERTED = "FIRST_MESSAGE_INSERTED"
"""Anthropic/Gemini: the input began with the assistant; a user "(continued)" went first."""
EMPTY_MESSAGE_OMITTED = "EMPTY_MESSAGE_OMITTED"
"""A user or assistant message with nothing left to send (e.g. only dropped thinking)."""
INVALID_TOOL_ARGUMENTS = "INVALID_TOOL_ARGUMENTS"
"""Tool-call arguments that are not a JSON object, sent as {} where an object is required."""
INVALID_TOOL_SCHEMA = "INVALID_TOOL_SCHEMA"
"""A tool's parameters_json that is not a JSON object, sent as an empty object schema."""
PROVIDER_CONTENT_DROPPED = "PROVIDER_CONTENT_DROPPED"
"""A provider item ctxwarden does not model, kept for another wire format (or for
a place this one has no room for it): left out."""

CONTINUED_TEXT = "(continued)"


def dumps(obj: object) -> str:
    """The one serialisation every renderer uses: compact, UTF-8, key order as built."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def empty_schema() -> JsonObject:
    return {"type": "object", "properties": {}}


def _no_constants(name: str) -> object:
    raise ValueError(f"non-standard JSON constant {name}")


def parse_object(text: str) -> JsonObject | None:
    """A JSON object from ``text``; "" means {}; None when it is not an object."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def is_summary(message: Message) -> bool:
    return SUMMARY_METADATA_KEY in message.metadata


@dataclass(slots=True)
class Notes:
    """Notices collected while rendering, in input order."""

    items: list[Notice] = field(default_factory=list)

    def add(self, code: str, seq: int, detail: str) -> None:
        self.items.append(Notice(code, seq, detail))

    def omitted(self, message: Message) -> None:
        """``message`` rendered to nothing and was left out."""
        self.add(EMPTY_MESSAGE_OMITTED, message.seq, "nothing left to send")

    def copy(self) -> Notes:
        return Notes(list(self.items))


# -- provider items ------------------------------------------------------------


def provider_items(
    block: ContentBlock, family: str, target: str, seq: int, notes: Notes
) -> list[Any]:
    """A PROVIDER block as the JSON values to put in its place: the parsed
    item (an array: its elements) when it belongs to ``family``; otherwise
    nothing, with a PROVIDER_CONTENT_DROPPED notice."""
    if block.family == family:
        try:
            value = json.loads(block.provider_json, parse_constant=_no_constants)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, list):
            return value
        if isinstance(value, dict):
            return [value]
        drop_provider(block, "its JSON is not an object or array", seq, notes)
        return []
    drop_provider(block, f"{target} cannot take it", seq, notes)
    return []


def drop_provider(block: ContentBlock, reason: str, seq: int, notes: Notes) -> None:
    notes.add(
        PROVIDER_CONTENT_DROPPED,
        seq,
        f"{block.family or '(unknown)'} item {provider_kind(block)} dropped: {reason}",
    )


def provider_kind(block: ContentBlock) -> str:
    """The item's ``type`` (or first key), quoted, for notices."""
    try:
        value = json.loads(block.provider_json)
    except (ValueError, RecursionError):
        return "(invalid JSON)"
    if isinstance(value, dict):
        kind = value.get("type")
        if isinstance(kind, str) and kind:
            return repr(kind[:64])
        return repr(next(iter(value), "")[:64])
    return "(array)"


# -- tools and arguments ---------------------------------------------------------


def tool_schema(tool: ToolDefinition, notes: Notes) -> JsonObject:
    """The parsed parameters schema; empty text means an object with no properties."""
    if not tool.parameters_json.strip():
        return empty_schema()
    schema = parse_object(tool.parameters_json)
    if schema is None:
        notes.add(
            INVALID_TOOL_SCHEMA,
            0,
            f"tool {tool.name!r}: parameters_json is not a JSON object; sent an empty schema",
        )
        return empty_schema()
    return schema


def call_arguments(block: ContentBlock, seq: int, notes: Notes) -> JsonObject:
    """Tool-call arguments as an object (Anthropic ``input``, Gemini ``args``)."""
    args = parse_object(block.arguments_json)
    if args is None:
        notes.add(
            INVALID_TOOL_ARGUMENTS,
            seq,
            f"tool call {block.tool_call_id!r}: arguments are not a JSON object; sent {{}}",
        )
        return {}
    return args


def arguments_text(block: ContentBlock) -> str:
    """Tool-call arguments as the JSON string OpenAI takes, byte for byte as stored."""
    return block.arguments_json if block.arguments_json.strip() else "{}"


def tool_entry(tool: ToolDefinition, schema_key: str, notes: Notes) -> JsonObject:
    """``{"name", "description" (when there is one), schema_key: the schema}``."""
    out: JsonObject = {"name": tool.name}
    if tool.description:
        out["description"] = tool.description
    out[schema_key] = tool_schema(tool, notes)
    return out


# -- images --------------------------------------------------------------------

OPENAI_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
ANTHROPIC_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
GEMINI_IMAGE_TYPES = frozenset(
    {"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"}
)


def mime_type(block: ContentBlock) -> str:
    mime = block.mime_type.strip().lower()
    return "image/jpeg" if mime == "image/jpg" else mime


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def data_url(block: ContentBlock) -> str:
    return f"data:{mime_type(block)};base64,{b64(block.data)}"


def image_placeholder(
    block: ContentBlock, accepted: frozenset[str], provider: str, seq: int, notes: Notes
) -> str | None:
    """None when the image can be sent; otherwise the text that stands in for it."""
    mime = mime_type(block)
    if mime in accepted:
        return None
    shown = mime or "no media type"
    notes.add(IMAGE_UNSUPPORTED, seq, f"{provider} does not accept {shown} images")
    return f"[image omitted: {shown} is not supported here]"


# -- thinking ------------------------------------------------------------------


def same_model(message: Message, model: str) -> bool:
    """Thinking can only go back to the model that made it (and only if that is known).

    A dated snapshot and its alias are the same model: asked for
    ``claude-sonnet-4-5``, Anthropic answers as ``claude-sonnet-4-5-20250929``."""
    if not model or not message.model:
        return False
    return message.model == model or snapshot_base(message.model) == snapshot_base(model)


def is_base64(text: str) -> bool:
    """Non-empty base64, in the standard or the URL-safe alphabet."""
    if not text:
        return False
    for altchars in (None, b"-_"):
        try:
            base64.b64decode(text, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            continue
        return True
    return False


def other_model(message: Message, model: str) -> str:
    """Why thinking made by another model (or an unknown one) is dropped."""
    return f"made by model {message.model or '(unknown)'!r}, not {model or '(unknown)'!r}"


def drop_thinking(message: Message, count: int, reason: str, notes: Notes) -> None:
    if count:
        notes.add(THINKING_DROPPED, message.seq, f"{count} thinking block(s) dropped: {reason}")


def texts(blocks: Sequence[ContentBlock]) -> list[str]:
    """The non-empty text blocks (providers reject empty text blocks)."""
    return [b.text for b in blocks if b.kind is ContentKind.TEXT and b.text]


# -- tool ids ------------------------------------------------------------------

ANTHROPIC_ID_RE = re.compile(r"[A-Za-z0-9_-]+")
ANTHROPIC_ID_MAX = 64
OPENAI_CHAT_ID_MAX = 40
OPENAI_RESPONSES_ID_MAX = 64
_HASH_LEN = 16


def normalize_id(original: str, *, max_len: int, charset: re.Pattern[str] | None) -> str:
    """``original`` if the provider accepts it, else a deterministic stand-in.

    A stand-in is the original with characters outside ``charset`` replaced by
    "_", cut to leave room, then "_" and 16 hex digits of SHA-256 of the
    original: ids that change always carry a hash of the full original, so two
    different originals only meet by a 64-bit hash collision.
    """
    valid_chars = charset is None or charset.fullmatch(original) is not None
    if original and len(original) <= max_len and valid_chars:
        return original
    digest = hashlib.sha256(original.encode("utf-8")).hexdigest()[:_HASH_LEN]
    base = original if charset is None else re.sub(r"[^A-Za-z0-9_-]", "_", original)
    head = base[: max_len - _HASH_LEN - 1]
    return f"{head}_{digest}"


def anthropic_tool_id(original: str) -> str:
    """The tool-use id Anthropic sees for ``original`` (its first use in a transcript).

    Anthropic takes ``^[a-zA-Z0-9_-]+$`` of at most 64 characters. A repeated
    id (the same original on calls in two assistant messages) gets another
    stand-in; ``Rendered.tool_id_map`` maps every rewritten id back.
    """
    return normalize_id(original, max_len=ANTHROPIC_ID_MAX, charset=ANTHROPIC_ID_RE)


def openai_chat_tool_id(original: str) -> str:
    """Chat Completions rejects tool-call ids longer than 40 characters."""
    return normalize_id(original, max_len=OPENAI_CHAT_ID_MAX, charset=None)


def openai_responses_call_id(original: str) -> str:
    """The Responses API takes call_id of 1 to 64 characters."""
    return normalize_id(original, max_len=OPENAI_RESPONSES_ID_MAX, charset=None)


class ToolIds:
    """Call ids as one rendering shows them: valid for the provider and unique.

    Every call gets a rendered id unused so far in the transcript (a repeated
    original gets a salted stand-in); its result, which the view places after
    it, uses the id of the latest call with that original. Only earlier
    messages decide an id, so a growing transcript keeps its rendered prefix.
    """

    def __init__(self, normalize: Callable[[str], str]) -> None:
        self._normalize = normalize
        self._latest: dict[str, str] = {}
        self._used: set[str] = set()
        self.rewritten: dict[str, str] = {}
        """Rendered id -> original id, for every id that was changed."""

    def call(self, original: str) -> str:
        rendered = self._normalize(original)
        salt = 1
        while rendered in self._used:
            salt += 1
            rendered = self._normalize(f"{original}#{salt}")
        self._used.add(rendered)
        self._latest[original] = rendered
        if rendered != original:
            self.rewritten[rendered] = original
        return rendered

    def result(self, original: str) -> str:
        rendered = self._latest.get(original)
        return rendered if rendered is not None else self._normalize(original)

    def copy(self) -> ToolIds:
        other = ToolIds(self._normalize)
        other._latest = dict(self._latest)
        other._used = set(self._used)
        other.rewritten = dict(self.rewritten)
        return other


def passthrough(original: str) -> str:
    return original
