"""Sortable unique IDs (ULID layout: 48-bit milliseconds + 80 random bits)."""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
"""Every 10-bit value as its two Crockford base32 digits."""


_RANDOM_BYTES = 4000
"""Read from the OS at once: the random parts of 400 IDs per system call."""


class _Source(threading.local):
    """Per thread: unused random bytes, and the last millisecond's encoded digits."""

    def __init__(self) -> None:
        self.random = b""
        self.pos = 0
        self.ms = -1
        self.time_digits = ""


_source = _Source()


def _forget_random() -> None:
    """In a forked child: never reuse the parent's random bytes (same IDs)."""
    _source.random = b""
    _source.pos = 0


os.register_at_fork(after_in_child=_forget_random)


def new_id() -> str:
    """26 Crockford base32 characters; lexicographic order follows creation time.

    The ULID's 48-bit milliseconds are its first 10 digits (encoded once per
    millisecond), its 80 random bits the other 16, from bytes read 4000 at a time
    (per thread, dropped in a forked child): the same IDs as ``encode(ms << 80 |
    random)``, without a system call and 13 digit pairs each."""
    s = _source
    ms = time.time_ns() // 1_000_000
    if ms != s.ms:
        s.ms, s.time_digits = ms, encode(ms << 80)[:10]
    pos, random = s.pos, s.random
    if pos >= len(random):
        random = s.random = os.urandom(_RANDOM_BYTES)
        pos = 0
    s.pos = pos + 10
    r = int.from_bytes(random[pos : pos + 10], "big")
    p = _PAIRS
    return (
        s.time_digits
        + p[r >> 70]
        + p[(r >> 60) & 1023]
        + p[(r >> 50) & 1023]
        + p[(r >> 40) & 1023]
        + p[(r >> 30) & 1023]
        + p[(r >> 20) & 1023]
        + p[(r >> 10) & 1023]
        + p[r & 1023]
    )


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
