"""Sortable unique IDs (ULID layout: 48-bit milliseconds + 80 random bits)."""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
"""Every 10-bit value as its two Crockford base32 digits."""


def new_id() -> str:
    """26 Crockford base32 characters; lexicographic order follows creation time."""
    return encode((time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big"))


def encode(v: int) -> str:
    """A value below 2**130 as its 26 digits: 13 pairs, most significant first
    (unrolled: this runs for every appended message)."""
    p = _PAIRS
    return (
        p[v >> 120]
        + p[(v >> 110) & 1023]
        + p[(v >> 100) & 1023]
        + p[(v >> 90) & 1023]
        + p[(v >> 80) & 1023]
        + p[(v >> 70) & 1023]
        + p[(v >> 60) & 1023]
        + p[(v >> 50) & 1023]
        + p[(v >> 40) & 1023]
        + p[(v >> 30) & 1023]
        + p[(v >> 20) & 1023]
        + p[(v >> 10) & 1023]
        + p[v & 1023]
    )


def now_us() -> int:
    return time.time_ns() // 1000
