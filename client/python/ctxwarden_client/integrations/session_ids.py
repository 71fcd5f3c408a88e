"""A reversible mapping of framework identifiers into one ctxwarden session ID.

A ctxwarden session ID is 1-255 characters of ``[A-Za-z0-9._:-]`` starting with a
letter or digit. :func:`session_key` joins a namespace and any number of parts with
``:``; inside a part every UTF-8 byte outside ``[A-Za-z0-9_-]`` (``.`` and ``:``
included) is written ``.XX`` (two upper-case hex digits), so the parts come back
exactly with :func:`split_session_key`. Nothing is hashed: two different tuples never
share a key, and a key longer than the server's limit is refused by the server.

    >>> session_key("adk", "my app", "u1", "s:1")
    'adk:my.20app:u1:s.3A1'
    >>> split_session_key("adk:my.20app:u1:s.3A1")
    ('adk', 'my app', 'u1', 's:1')
"""

from __future__ import annotations

import re
import string

__all__ = ["escape_part", "session_key", "split_session_key", "unescape_part"]

_SAFE = frozenset((string.ascii_letters + string.digits + "_-").encode())
_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_ESCAPED = re.compile(r"\.([0-9A-F]{2})")


def escape_part(part: str) -> str:
    """``part`` with every byte outside ``[A-Za-z0-9_-]`` written as ``.XX``."""
    return "".join(chr(b) if b in _SAFE else f".{b:02X}" for b in part.encode())


def unescape_part(escaped: str) -> str:
    """The inverse of :func:`escape_part`; ``ValueError`` for text it cannot have made."""
    if ":" in escaped or _ESCAPED.sub("", escaped).count("."):
        raise ValueError(f"not an escaped part: {escaped!r}")
    raw = bytearray()
    i = 0
    while i < len(escaped):
        if escaped[i] == ".":
            raw.append(int(escaped[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.append(ord(escaped[i]))
            i += 1
    return raw.decode()


def session_key(namespace: str, *parts: str) -> str:
    """``namespace:part1:part2...`` with each part escaped (the namespace is not)."""
    if not _NAMESPACE.fullmatch(namespace):
        raise ValueError(f"a namespace is [A-Za-z0-9][A-Za-z0-9_-]*, got {namespace!r}")
    return ":".join([namespace, *(escape_part(p) for p in parts)])


def split_session_key(key: str) -> tuple[str, ...]:
    """``(namespace, part1, part2, ...)`` of a :func:`session_key`."""
    namespace, *parts = key.split(":")
    return (namespace, *(unescape_part(p) for p in parts))
