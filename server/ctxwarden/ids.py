"""Sortable unique IDs (ULID layout: 48-bit milliseconds + 80 random bits)."""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id() -> str:
    """26 Crockford base32 characters; lexicographic order follows creation time."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    out = []
    for _ in range(26):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def now_us() -> int:
    return time.time_ns() // 1000
