"""JSON object states of a session, of a user and of a project, and their deltas.

A state is a JSON object; a delta is one too, merged shallowly: a key set to
null is deleted, any other key is set to the delta's value. Every state stays
at most ``MAX_STATE_BYTES`` encoded (compact JSON, keys sorted).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.validation import MAX_JSON_DEPTH, json_depth

MAX_STATE_BYTES = 64 * 1024
"""The largest encoded state of one scope (session, user or project)."""

EMPTY_STATE: Mapping[str, Any] = {}

SCOPES = ("session", "user", "project")


@dataclass(frozen=True, slots=True)
class StateDelta:
    """The changes one append makes; None: that scope is not changed."""

    session: Mapping[str, Any] | None = None
    user: Mapping[str, Any] | None = None
    project: Mapping[str, Any] | None = None

    @property
    def empty(self) -> bool:
        return self.session is None and self.user is None and self.project is None

    @property
    def shared(self) -> bool:
        """Whether it changes a state other sessions share (user or project)."""
        return self.user is not None or self.project is not None


def encode_state(state: Mapping[str, Any]) -> str:
    """The stored form: compact JSON, keys sorted (so equal states are equal text)."""
    return json.dumps(state, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def decode_state(text: str | None) -> dict[str, Any]:
    """A stored state (NULL or empty: the empty object)."""
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def state_size(state: Mapping[str, Any]) -> int:
    return len(encode_state(state).encode("utf-8", "surrogatepass"))


def check_state(state: Mapping[str, Any], field: str) -> None:
    """A state (or a delta) a client sent: nesting and encoded size."""
    depth = json_depth(dict(state))
    if depth > MAX_JSON_DEPTH:
        raise InvalidArgument(
            f"{field} nests {depth} levels deep; the limit is {MAX_JSON_DEPTH}",
            reason=ErrorReason.JSON_TOO_DEEP,
            field=field,
            metadata={"max_depth": str(MAX_JSON_DEPTH)},
        )
    size = state_size(state)
    if size > MAX_STATE_BYTES:
        raise too_large(field, size)


def too_large(field: str, size: int) -> InvalidArgument:
    return InvalidArgument(
        f"{field} would be {size:,} bytes encoded as JSON; a state holds at most "
        f"{MAX_STATE_BYTES:,} bytes: delete keys (set them to null) or store less",
        reason=ErrorReason.STATE_TOO_LARGE,
        field=field,
        metadata={"limit_bytes": str(MAX_STATE_BYTES), "size_bytes": str(size)},
    )


def merge_state(state: Mapping[str, Any], delta: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` changed by ``delta``: null deletes the key, other values set it."""
    merged = dict(state)
    for key, value in delta.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def check_delta(delta: StateDelta) -> None:
    """Each part of a delta a client sent (its size alone; the merged state is
    checked again where it is merged)."""
    for scope in SCOPES:
        part = getattr(delta, scope)
        if part is not None:
            check_state(part, f"state_delta.{scope}")
