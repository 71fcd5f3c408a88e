"""Sortable unique IDs (ULID layout: 48-bit milliseconds + 80 random bits)."""

from __future__ import annotations

import base64
import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_FROM_B32HEX = bytes.maketrans(b"0123456789ABCDEFGHIJKLMNOPQRSTUV", _ALPHABET.encode())


def new_id() -> str:
    """26 Crockford base32 characters; lexicographic order follows creation time."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    # The 130 bits, left-aligned in 17 bytes, are the first 26 base32 digits
    # (encoded in C: this runs for every appended message).
    digits = base64.b32hexencode((value << 6).to_bytes(17, "big"))[:26]
    return digits.translate(_FROM_B32HEX).decode()


def now_us() -> int:
    return time.time_ns() // 1000
