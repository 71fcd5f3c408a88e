"""Indented JSON for the console, produced only as far as it is shown.

The console shows a rendered input pretty-printed and cut at 512 KiB. Parsing
and re-dumping a 100,000-message rendering (tens of MB) to keep its first
512 KiB held the event loop for seconds. Here the compact JSON is re-indented
token by token and the work stops once the limit is reached: the cost is
bounded by what is shown, not by the session. The output is what
``json.dumps(json.loads(text), indent=2, ensure_ascii=False)`` gives for JSON
without duplicate keys (strings with escapes and non-integer numbers go
through ``json`` one by one, so they come out exactly as it writes them).
"""

from __future__ import annotations

import json
import re

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]|[^\s{}\[\],:"]+|\s+', re.S)
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_CLOSE = {"{": "}", "[": "]"}


class _NotJson(ValueError):
    pass


def _scalar(token: str) -> str:
    if token[0] == '"':
        if "\\" not in token:
            return token
        return json.dumps(json.loads(token), ensure_ascii=False)
    if token in ("true", "false", "null") or _INT.fullmatch(token):
        return token
    try:
        value = json.loads(token)
    except ValueError:
        raise _NotJson(token) from None
    if isinstance(value, (dict, list, str)):
        raise _NotJson(token)
    return json.dumps(value)


def indented(text: str, limit: int) -> tuple[str, bool]:
    """``text`` (JSON) indented by 2, cut at ``limit`` characters, and whether it was.

    Raises ValueError when ``text`` is not JSON (as far as it was read).
    """
    out: list[str] = []
    size = 0
    stack: list[str] = []
    expect = "value"  # value, key, colon, after (a value: "," or a close next)
    opened = ""  # a bracket just read, not written yet: "{}" / "[]" if closed at once
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token.isspace():
            continue
        if opened and token == _CLOSE[opened]:
            piece, opened, expect = opened + token, "", "after"
            stack.pop()
        else:
            piece = opened + "\n" + "  " * len(stack) if opened else ""
            opened = ""
            piece, expect = _step(token, expect, stack, piece)
            if token in _CLOSE:
                opened = token
        out.append(piece)
        size += len(piece)
        if size > limit:
            return "".join(out)[:limit], True
    if stack or opened or expect != "after":
        raise _NotJson("incomplete")
    return "".join(out), False


def _step(token: str, expect: str, stack: list[str], piece: str) -> tuple[str, str]:
    """One token after the first of a container: (text to write, what comes next)."""
    if token in _CLOSE:  # an opening bracket: written with what follows it
        if expect != "value":
            raise _NotJson(token)
        stack.append(token)
        return piece, "key" if token == "{" else "value"
    if token in ("}", "]"):
        if expect != "after" or not stack or _CLOSE[stack.pop()] != token:
            raise _NotJson(token)
        return piece + "\n" + "  " * len(stack) + token, "after"
    if token == ",":
        if expect != "after" or not stack:
            raise _NotJson(token)
        return piece + ",\n" + "  " * len(stack), "key" if stack[-1] == "{" else "value"
    if token == ":":
        if expect != "colon":
            raise _NotJson(token)
        return piece + ": ", "value"
    if expect == "key" and token[0] == '"':
        return piece + _scalar(token), "colon"
    if expect != "value":
        raise _NotJson(token)
    return piece + _scalar(token), "after"
