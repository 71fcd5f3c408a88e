"""Validation of client input. Errors name the offending field."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.messages import (
    PROVIDER_FAMILIES,
    ContentBlock,
    ContentKind,
    Message,
    Role,
    Usage,
)
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Session
from ctxwarden.core.surrogates import escapes_surrogate, has_lone_surrogate, has_surrogate

MAX_SESSION_ID_LENGTH = 255
SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}")
INTERNAL_SESSION_ID_RE = re.compile(
    r"(?:[A-Za-z0-9][A-Za-z0-9._-]{0,63}~)?[A-Za-z0-9][A-Za-z0-9._:-]{0,254}"
)
"""Internally a tenant's session IDs carry a ``TENANT~`` prefix (see api.tenancy)."""
KEY_RE = re.compile(r"[\x21-\x7e]{1,128}")
"""message_id and request_id: 1-128 printable ASCII characters."""

_ALLOWED_BLOCKS: dict[Role, frozenset[ContentKind]] = {
    Role.USER: frozenset({ContentKind.TEXT, ContentKind.IMAGE, ContentKind.PROVIDER}),
    Role.ASSISTANT: frozenset(
        {ContentKind.TEXT, ContentKind.THINKING, ContentKind.TOOL_CALL, ContentKind.PROVIDER}
    ),
    Role.TOOL_RESULT: frozenset({ContentKind.TEXT, ContentKind.IMAGE, ContentKind.PROVIDER}),
}
"""PROVIDER blocks go where the provider put them: user content (documents),
assistant content (server tools and their results), tool-result content."""


def check_session_id(session_id: str, field: str = "session_id", *, internal: bool = True) -> None:
    if not session_id:
        raise InvalidArgument(f"{field} is required", reason=ErrorReason.MISSING_FIELD, field=field)
    pattern = INTERNAL_SESSION_ID_RE if internal else SESSION_ID_RE
    if not pattern.fullmatch(session_id):
        raise InvalidArgument(
            f"{field} {session_id[:270]!r} is malformed: use 1-255 characters of "
            "[A-Za-z0-9._:-], starting with a letter or digit",
            reason=ErrorReason.INVALID_SESSION_ID,
            field=field,
        )


def check_key(value: str, field: str) -> None:
    """An optional idempotency key (request_id, message_id)."""
    if value and not KEY_RE.fullmatch(value):
        raise InvalidArgument(
            f"{field} must be 1-128 printable ASCII characters without spaces",
            reason=ErrorReason.INVALID_KEY,
            field=field,
        )


def check_json_object(text: str, field: str) -> None:
    if not text:
        return
    value = load_json(text, field)
    if not isinstance(value, dict):
        raise InvalidArgument(
            f"{field} must be a JSON object, got {type(value).__name__}",
            reason=ErrorReason.INVALID_JSON,
            field=field,
        )


def load_json(text: str, field: str, max_depth: int = 0) -> object:
    """Decode a JSON document a client sent: valid, at most ``max_depth`` levels
    deep (default MAX_JSON_DEPTH), no escaped lone surrogate."""
    limit = max_depth or MAX_JSON_DEPTH
    try:
        value = json.loads(text)
    except RecursionError:
        raise _too_deep(field, 0, limit) from None
    except ValueError as exc:
        raise InvalidArgument(
            f"{field} is not valid JSON: {exc}", reason=ErrorReason.INVALID_JSON, field=field
        ) from None
    depth = json_depth(value)
    if depth > limit:
        raise _too_deep(field, depth, limit)
    if escapes_surrogate(text) and has_lone_surrogate(value):
        raise _lone_surrogate(field, ErrorReason.INVALID_JSON)
    return value


def _lone_surrogate(field: str, reason: ErrorReason) -> InvalidArgument:
    return InvalidArgument(
        f"{field} holds a lone surrogate (\\ud800-\\udfff, escaped or decoded), which is not "
        "a character and cannot be encoded as UTF-8; send the character itself or a surrogate "
        "pair",
        reason=reason,
        field=field,
    )


MAX_JSON_DEPTH = 64
"""Deepest nesting accepted in tool arguments and tool parameter schemas. Every
later step (rendering, compaction prompts, file lists) re-parses the JSON; far
deeper documents would exhaust the interpreter's recursion limit there."""


def _too_deep(field: str, depth: int, limit: int = MAX_JSON_DEPTH) -> InvalidArgument:
    deeper = f"{depth} levels" if depth else "too many levels"
    return InvalidArgument(
        f"{field} nests {deeper} deep; the limit is {limit} (objects and arrays inside each other)",
        reason=ErrorReason.JSON_TOO_DEEP,
        field=field,
        metadata={"max_depth": str(limit)},
    )


def json_depth(value: object) -> int:
    """Nesting depth of a decoded JSON value (iterative: never recurses)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in item)
    return deepest


MAX_USAGE_TOKENS = 100_000_000
"""No single model call reports more tokens than this; a larger claim is bogus."""


def check_no_nul(value: str, field: str) -> None:
    if "\x00" in value:
        raise InvalidArgument(
            f"{field} contains a NUL character (U+0000), which providers and databases reject",
            reason=ErrorReason.NUL_CHARACTER,
            field=field,
        )


def check_message(message: Message, field: str) -> None:
    """One incoming message: its characters, its content blocks, its usage."""
    check_key(message.message_id, f"{field}.message_id")
    _check_message_strings(message, field)
    if not message.content and not message.failed and not message.history_only:
        raise InvalidArgument(
            f"{field}.content is empty; only an assistant message that ended in "
            "STOP_REASON_ERROR or STOP_REASON_ABORTED may have no content",
            reason=ErrorReason.EMPTY_CONTENT,
            field=f"{field}.content",
        )
    _check_blocks(message, field)
    if message.role is Role.TOOL_RESULT and not message.tool_call_id and not message.history_only:
        raise InvalidArgument(
            f"{field}.tool_call_id is required for a tool result",
            reason=ErrorReason.MISSING_FIELD,
            field=f"{field}.tool_call_id",
        )
    if message.usage is not None:
        _check_usage(message.usage, f"{field}.usage")


def _check_message_strings(message: Message, field: str) -> None:
    """No NUL and no surrogate in any string to store (AppendModelOutput's messages
    are built from decoded and re-serialised JSON: what is stored is checked)."""
    # The field's name is spelt out only for a string that fails (the hot path
    # of every append checks a dozen strings that pass).
    for name in _MESSAGE_STRINGS:
        if _suspect(value := getattr(message, name)):
            _check_chars(value, f"{field}.{name}")
    for key, value in message.metadata.items():
        _check_chars(key, f"{field}.metadata")
        _check_chars(value, f"{field}.metadata[{key!r}]")
    for i, block in enumerate(message.content):
        for name in _BLOCK_STRINGS:
            if _suspect(value := getattr(block, name)):
                _check_chars(value, f"{field}.content[{i}].{name}")


_MESSAGE_STRINGS = ("model", "provider", "error_message", "tool_call_id", "tool_name")
_BLOCK_STRINGS = (
    "text",
    "tool_call_id",
    "tool_name",
    "arguments_json",
    "signature",
    "family",
    "provider_json",
)


def _suspect(value: str) -> bool:
    """A string that may hold a NUL or a surrogate (``_check_chars`` decides)."""
    return bool(value) and ("\x00" in value or not value.isascii())


def _check_chars(value: str, field: str) -> None:
    check_no_nul(value, field)
    if has_surrogate(value):
        json_field = field.endswith(("arguments_json", "provider_json"))
        reason = ErrorReason.INVALID_JSON if json_field else ErrorReason.INVALID_CONTENT
        raise _lone_surrogate(field, reason)


def _check_blocks(message: Message, field: str) -> None:
    allowed = _ALLOWED_BLOCKS[message.role]
    call_ids: set[str] = set()
    for i, block in enumerate(message.content):
        bfield = f"{field}.content[{i}]"
        if block.kind not in allowed:
            raise InvalidArgument(
                f"{bfield}: a {message.role.name.lower()} message cannot carry "
                f"{block.kind.name.lower()} content",
                reason=ErrorReason.INVALID_CONTENT,
                field=bfield,
            )
        if block.kind is ContentKind.TOOL_CALL:
            _check_tool_call(block, bfield, call_ids)
        elif block.kind is ContentKind.IMAGE and not block.data:
            raise InvalidArgument(
                f"{bfield}.image.data is empty", reason=ErrorReason.INVALID_CONTENT, field=bfield
            )
        elif block.kind is ContentKind.PROVIDER:
            _check_provider(block, bfield)


def _check_provider(block: ContentBlock, bfield: str) -> None:
    if block.family not in PROVIDER_FAMILIES:
        what = f"{block.family!r} is not one of" if block.family else "is required: one of"
        raise InvalidArgument(
            f"{bfield}.provider.family {what} {', '.join(PROVIDER_FAMILIES)}",
            reason=ErrorReason.MISSING_FIELD if not block.family else ErrorReason.INVALID_CONTENT,
            field=f"{bfield}.provider.family",
        )
    jfield = f"{bfield}.provider.json"
    value = load_json(block.provider_json, jfield)
    if not isinstance(value, (dict, list)):
        raise InvalidArgument(
            f"{jfield} must be a JSON object or array, got {type(value).__name__}",
            reason=ErrorReason.INVALID_JSON,
            field=jfield,
        )


def _check_tool_call(block: ContentBlock, bfield: str, call_ids: set[str]) -> None:
    if not block.tool_call_id:
        raise InvalidArgument(
            f"{bfield}.tool_call.id is required",
            reason=ErrorReason.MISSING_FIELD,
            field=f"{bfield}.tool_call.id",
        )
    if block.tool_call_id in call_ids:
        raise InvalidArgument(
            f"{bfield}.tool_call.id {block.tool_call_id!r} is repeated in one message",
            reason=ErrorReason.DUPLICATE_TOOL_CALL_ID,
            field=f"{bfield}.tool_call.id",
        )
    call_ids.add(block.tool_call_id)
    if not block.tool_name:
        raise InvalidArgument(
            f"{bfield}.tool_call.name is required",
            reason=ErrorReason.MISSING_FIELD,
            field=f"{bfield}.tool_call.name",
        )
    check_json_object(block.arguments_json, f"{bfield}.tool_call.arguments_json")


def _check_usage(u: Usage, field: str) -> None:
    values = u.counts()
    if any(v < 0 for v in values):
        raise InvalidArgument(
            f"{field} has a negative count", reason=ErrorReason.INVALID_USAGE, field=field
        )
    if any(v > MAX_USAGE_TOKENS for v in values):
        raise InvalidArgument(
            f"{field} claims more than {MAX_USAGE_TOKENS:,} tokens for one call",
            reason=ErrorReason.INVALID_USAGE,
            field=field,
        )


def check_messages(messages: Sequence[Message], max_messages: int) -> None:
    if not messages:
        raise InvalidArgument(
            "messages is empty", reason=ErrorReason.MISSING_FIELD, field="messages"
        )
    if len(messages) > max_messages:
        raise InvalidArgument(
            f"{len(messages)} messages in one request; the limit is {max_messages}. "
            "Split the append into several requests.",
            reason=ErrorReason.TOO_MANY_MESSAGES,
            field="messages",
        )
    ids: set[str] = set()
    for i, message in enumerate(messages):
        check_message(message, f"messages[{i}]")
        if message.message_id:
            if message.message_id in ids:
                raise InvalidArgument(
                    f"messages[{i}].message_id {message.message_id!r} is repeated in the request",
                    reason=ErrorReason.DUPLICATE_MESSAGE_ID,
                    field=f"messages[{i}].message_id",
                )
            ids.add(message.message_id)


MAX_TITLE_BYTES = 1024
MAX_SYSTEM_PROMPT_BYTES = 1024 * 1024
MAX_PINNED_STATE_BYTES = 256 * 1024
MAX_TOOLS = 256
MAX_TOOLS_BYTES = 1024 * 1024
"""Every tool's name, description and parameters together."""
MAX_LABELS = 64
MAX_LABEL_KEY_BYTES = 63
MAX_LABEL_VALUE_BYTES = 255


def _check_size(value: str, limit: int, field: str) -> None:
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise InvalidArgument(
            f"{field} is {size:,} bytes; the limit is {limit:,}",
            reason=ErrorReason.FIELD_TOO_LARGE,
            field=field,
            metadata={"limit_bytes": str(limit), "size_bytes": str(size)},
        )


def check_session_fields(session: Session, prefix: str = "session") -> None:
    """Sizes and characters of a session's client-settable fields.

    The limits keep every session row and settings revision far below what
    MySQL/MariaDB accept in one statement (16 MiB by default).
    """
    for name in ("user_id", "project_id", "model", "title", "system_prompt", "pinned_state"):
        check_no_nul(getattr(session, name), f"{prefix}.{name}")
    _check_size(session.title, MAX_TITLE_BYTES, f"{prefix}.title")
    _check_size(session.system_prompt, MAX_SYSTEM_PROMPT_BYTES, f"{prefix}.system_prompt")
    _check_size(session.pinned_state, MAX_PINNED_STATE_BYTES, f"{prefix}.pinned_state")
    if len(session.labels) > MAX_LABELS:
        raise InvalidArgument(
            f"{prefix}.labels has {len(session.labels)} entries; the limit is {MAX_LABELS}",
            reason=ErrorReason.FIELD_TOO_LARGE,
            field=f"{prefix}.labels",
        )
    for key, value in session.labels.items():
        if not key:
            raise InvalidArgument(
                f"{prefix}.labels has an empty key",
                reason=ErrorReason.INVALID_LABEL,
                field=f"{prefix}.labels",
            )
        check_no_nul(key, f"{prefix}.labels")
        check_no_nul(value, f"{prefix}.labels[{key[:64]!r}]")
        _check_size(key, MAX_LABEL_KEY_BYTES, f"{prefix}.labels key {key[:64]!r}")
        _check_size(value, MAX_LABEL_VALUE_BYTES, f"{prefix}.labels[{key[:64]!r}]")
    if len(session.tools) > MAX_TOOLS:
        raise InvalidArgument(
            f"{prefix}.tools has {len(session.tools)} tools; the limit is {MAX_TOOLS}",
            reason=ErrorReason.FIELD_TOO_LARGE,
            field=f"{prefix}.tools",
        )
    total = 0
    for i, tool in enumerate(session.tools):
        for name in ("name", "description", "parameters_json"):
            check_no_nul(getattr(tool, name), f"{prefix}.tools[{i}].{name}")
        total += sum(
            len(v.encode("utf-8", "surrogatepass"))
            for v in (tool.name, tool.description, tool.parameters_json)
        )
    if total > MAX_TOOLS_BYTES:
        raise InvalidArgument(
            f"{prefix}.tools are {total:,} bytes together; the limit is {MAX_TOOLS_BYTES:,}",
            reason=ErrorReason.FIELD_TOO_LARGE,
            field=f"{prefix}.tools",
            metadata={"limit_bytes": str(MAX_TOOLS_BYTES), "size_bytes": str(total)},
        )
