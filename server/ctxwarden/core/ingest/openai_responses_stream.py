"""OpenAI Responses streams: the events of one call assembled into its response.

As the SDK's ResponseStreamState does: the terminal event's response
(``response.completed``, ``.incomplete`` or ``.failed``) is the result; when it
carries no ``output``, the items are those of ``response.output_item.done``,
or, for items that never got one, the ``response.output_item.added`` item with
its deltas applied. A stream without a terminal event is ABORTED.
"""

from __future__ import annotations

import copy
from typing import Any

from ctxwarden.core.ingest._json import Obj, as_arr, as_obj, bad
from ctxwarden.core.messages import StopReason

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


class _Items:
    """Output items by output_index, as the stream built them."""

    def __init__(self) -> None:
        self.items: dict[int, tuple[dict[str, Any], str]] = {}
        self.done: set[int] = set()

    def add(self, event: Obj) -> None:
        index = event.count("output_index")
        if index in self.items:
            raise bad(event.at("output_index"), f"output item {index} was added twice")
        item = event.obj("item")
        self.items[index] = (copy.deepcopy(item.value), item.path)

    def finish(self, event: Obj) -> None:
        index = event.count("output_index")
        item = event.obj("item")
        self.items[index] = (item.value, item.path)
        self.done.add(index)

    def get(self, event: Obj) -> dict[str, Any] | None:
        """The item an event updates (None once its final form arrived)."""
        index = event.count("output_index")
        if index not in self.items:
            raise bad(event.at("output_index"), f"no output item {index} was added before")
        return None if index in self.done else self.items[index][0]

    def objs(self) -> list[Obj]:
        return [as_obj(*self.items[i]) for i in sorted(self.items)]


def _append(parts: object, index: int, part: object, path: str) -> None:
    if not isinstance(parts, list) or index > len(parts):
        raise bad(path, f"part {index} does not follow the parts before it")
    if index == len(parts):
        parts.append(copy.deepcopy(part))


def _extend(parts: object, index: int, key: str, delta: str, path: str) -> None:
    if not isinstance(parts, list) or not 0 <= index < len(parts):
        raise bad(path, f"part {index} was not added before")
    part = parts[index]
    if not isinstance(part, dict) or not isinstance(part.get(key, ""), str):
        raise bad(path, f"part {index} has no text to extend")
    part[key] = part.get(key, "") + delta


def _apply(items: _Items, event: Obj, kind: str) -> None:
    """Apply a delta event to the item it belongs to."""
    item = items.get(event)
    if item is None:
        return
    if kind == "response.function_call_arguments.delta":
        if isinstance(item.get("arguments", ""), str):
            item["arguments"] = item.get("arguments", "") + event.string("delta")
    elif kind == "response.content_part.added":
        index = event.count("content_index")
        _append(item.setdefault("content", []), index, event.obj("part").value, event.path)
    elif kind in ("response.output_text.delta", "response.refusal.delta"):
        key = "text" if kind == "response.output_text.delta" else "refusal"
        index = event.count("content_index")
        _extend(item.get("content"), index, key, event.string("delta"), event.at("content_index"))
    elif kind == "response.reasoning_summary_part.added":
        index = event.count("summary_index")
        _append(item.setdefault("summary", []), index, event.obj("part").value, event.path)
    elif kind == "response.reasoning_summary_text.delta":
        index = event.count("summary_index")
        _extend(
            item.get("summary"), index, "text", event.string("delta"), event.at("summary_index")
        )
    elif kind == "response.reasoning_text.delta":
        index = event.count("content_index")
        content = item.setdefault("content", [])
        if isinstance(content, list) and index == len(content):
            content.append({"type": "reasoning_text", "text": ""})
        _extend(content, index, "text", event.string("delta"), event.at("content_index"))


_DELTAS = frozenset(
    {
        "response.function_call_arguments.delta",
        "response.content_part.added",
        "response.output_text.delta",
        "response.refusal.delta",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta",
    }
)


def assemble(body: list[Any], path: str) -> tuple[Obj, list[Obj], tuple[StopReason, str] | None]:
    """(response, output items, stop) of a stream; stop is None when the
    response's status tells it."""
    events = as_arr(body, path)
    items = _Items()
    snapshot: Obj | None = None
    for event in events.objs():
        kind = event.kind()
        if kind in ("response.created", "response.queued", "response.in_progress"):
            snapshot = snapshot or event.obj("response")
        elif kind == "response.output_item.added":
            if event.has("item"):  # some providers send an empty announcement
                items.add(event)
        elif kind == "response.output_item.done":
            items.finish(event)
        elif kind in _DELTAS:
            _apply(items, event, kind)
        elif kind in _TERMINAL:
            response = event.obj("response")
            if response.get("output") is None:
                return response, items.objs(), None
            return response, list(response.arr("output").objs()), None
        elif kind == "error":
            message = event.opt_str("message") or "the stream reported an error"
            return snapshot or Obj({}, event.path), items.objs(), (StopReason.ERROR, message)
    aborted = (StopReason.ABORTED, "the stream ended before response.completed")
    return snapshot or Obj({}, path), items.objs(), aborted


__all__ = ["assemble"]
