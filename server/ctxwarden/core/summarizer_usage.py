"""The usage a server-side summariser's provider calls report, gathered for the
compaction that made them (the usage ledger attributes them to it).

A summariser calls ``report_usage`` after each provider reply; the compaction
runs the summariser inside ``collecting()`` and reads what was gathered. Tasks
started inside (asyncio.gather) share the list, so chunked and turn-prefix
calls are all counted; outside ``collecting()`` a report is dropped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ctxwarden.core.messages import Usage

_GATHERED: ContextVar[list[Usage] | None] = ContextVar("summarizer_usage", default=None)


def report_usage(usage: Usage | None) -> None:
    gathered = _GATHERED.get()
    if usage is not None and gathered is not None:
        gathered.append(usage)


@contextmanager
def collecting() -> Iterator[list[Usage]]:
    gathered: list[Usage] = []
    token = _GATHERED.set(gathered)
    try:
        yield gathered
    finally:
        _GATHERED.reset(token)


def _count(o: Any, *path: str) -> int:
    """A non-negative integer at ``path`` of a JSON object; 0 when absent or not one."""
    for key in path:
        if not isinstance(o, Mapping):
            return 0
        o = o.get(key)
    return o if isinstance(o, int) and not isinstance(o, bool) and o >= 0 else 0


def anthropic_usage(reply: Mapping[str, Any]) -> Usage | None:
    """The usage of an Anthropic Messages reply (None without one)."""
    u = reply.get("usage")
    if not isinstance(u, Mapping):
        return None
    return Usage(
        input_tokens=_count(u, "input_tokens"),
        output_tokens=_count(u, "output_tokens"),
        cache_read_tokens=_count(u, "cache_read_input_tokens"),
        cache_write_tokens=_count(u, "cache_creation_input_tokens"),
    )


def openai_chat_usage(reply: Mapping[str, Any]) -> Usage | None:
    """The usage of an OpenAI Chat Completions reply (None without one)."""
    u = reply.get("usage")
    if not isinstance(u, Mapping):
        return None
    cached = _count(u, "prompt_tokens_details", "cached_tokens")
    return Usage(
        input_tokens=max(_count(u, "prompt_tokens") - cached, 0),
        output_tokens=_count(u, "completion_tokens"),
        cache_read_tokens=cached,
        total_tokens=_count(u, "total_tokens"),
        reasoning_tokens=_count(u, "completion_tokens_details", "reasoning_tokens"),
    )
