"""Opaque page tokens and page sizes (AIP-158), shared by the list use cases."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason


def encode_token(value: dict[str, Any]) -> str:
    raw = json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _invalid_token() -> InvalidArgument:
    return InvalidArgument(
        "page_token is not a token this server issued",
        reason=ErrorReason.INVALID_PAGE_TOKEN,
        field="page_token",
    )


def decode_token(token: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        value = json.loads(raw)
        if not isinstance(value, dict):
            raise ValueError
        return value
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _invalid_token() from None


_TOKEN_ID = re.compile(r"[\x21-\x7e]{1,400}")
"""IDs in tokens (session and compaction IDs) are printable ASCII, like the columns."""


def token_int(token: dict[str, Any], key: str) -> int:
    """A non-negative int64 the server put in ``token`` (else INVALID_PAGE_TOKEN)."""
    value = token.get(key)
    if type(value) is not int or not 0 <= value < 2**63:
        raise _invalid_token()
    return value


def token_id(token: dict[str, Any], key: str) -> str:
    """An ID the server put in ``token`` (else INVALID_PAGE_TOKEN)."""
    value = token.get(key)
    if not isinstance(value, str) or not _TOKEN_ID.fullmatch(value):
        raise _invalid_token()
    return value


def clamp_page_size(requested: int, default: int, maximum: int = 1000) -> int:
    if requested < 0:
        raise InvalidArgument(
            "page_size must be >= 0", reason=ErrorReason.INVALID_PAGE_SIZE, field="page_size"
        )
    return min(requested or default, maximum)


LIST_PAGE_BYTES = 4 * 1024 * 1024
"""A ListMessages page reads at most this much message data (plus one message)."""


@dataclass(frozen=True, slots=True)
class MessageFilter:
    """What a ListMessages request asks for besides its page: a page token is
    bound to the session and to all of these."""

    include_rolled_back: bool = False
    newest_first: bool = False
    after_seq: int | None = None
    after_time_us: int = 0

    def bound(self, session_id: str) -> dict[str, Any]:
        key: dict[str, Any] = {"s": session_id, "r": self.include_rolled_back}
        # Tokens of plain requests stay as they were (the three keys).
        if self.newest_first:
            key["n"] = True
        if self.after_seq is not None:
            key["f"] = self.after_seq
        if self.after_time_us:
            key["t"] = self.after_time_us
        return key

    def token(self, session_id: str, last_seq: int) -> str:
        """The next_page_token after the page that ended with ``last_seq``."""
        return encode_token({**self.bound(session_id), "a": last_seq})

    def cursor(self, session_id: str, page_token: str) -> int:
        """The last seq of the previous page (0: first page); a token of another
        session or other filters is INVALID_PAGE_TOKEN."""
        if not page_token:
            return 0
        tok = decode_token(page_token)
        cursor = token_int(tok, "a")
        if {k: v for k, v in tok.items() if k != "a"} != self.bound(session_id):
            raise InvalidArgument(
                "page_token was issued for a different session or filter",
                reason=ErrorReason.INVALID_PAGE_TOKEN,
                field="page_token",
            )
        return cursor


def message_page_token(session_id: str, include_rolled_back: bool, after_seq: int) -> str:
    """ListMessages' next_page_token of a plain (ascending, unfiltered) listing."""
    return MessageFilter(include_rolled_back).token(session_id, after_seq)
