"""A model input rendered in a provider's wire schema, and the marks that let
a client holding an earlier rendering be sent only what follows (see
``core.render.incremental``, which makes both)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from ctxwarden.core.view import Notice


@dataclass(frozen=True, slots=True)
class Marks:
    """For the first ``stable`` items of a rendering: where the n-th ends in
    the JSON (UTF-8 bytes) and what the JSON up to there fingerprints to
    (index n: after n items)."""

    stable: int
    utf8: Sequence[int]
    digests: Sequence[int]

    def holds(self, count: int, digest: int) -> bool:
        """Whether a rendering whose first ``count`` items fingerprint to
        ``digest`` begins like this one."""
        return 0 <= count <= self.stable and self.digests[count] == digest


Parts = tuple[str, Sequence[str], str]
"""(head, items, tail): the JSON is head + ",".join(items) + tail."""


class Rendered:
    """A rendering: its JSON (joined when first read), notices and rewritten ids."""

    __slots__ = ("_json", "_parts", "marks", "notices", "tool_id_map")

    def __init__(
        self,
        json: str | None = "",
        notices: tuple[Notice, ...] = (),
        tool_id_map: Mapping[str, str] | None = None,
        marks: Marks | None = None,
        parts: Parts | None = None,
    ) -> None:
        self._json = json
        self._parts = parts
        self.notices = notices
        """What had to change to fit the provider, in input order."""
        self.tool_id_map: Mapping[str, str] = tool_id_map or {}
        """Rendered tool-call id -> original id, for every id that was rewritten
        (to fit the provider's charset or length, or to keep ids unique), for
        reading the rendered transcript back. Ids of the provider's new tool
        calls are its own and need no mapping."""
        self.marks = marks
        """Where its leading items end, for resuming (None: it cannot be)."""

    @property
    def json(self) -> str:
        """The request-body fragment; "" for NATIVE."""
        if self._json is None:
            assert self._parts is not None
            head, items, tail = self._parts
            self._json = head + ",".join(items) + tail
        return self._json

    def join_steps(self, chunk: int = 2048) -> Iterator[None]:
        """Join the JSON ``chunk`` items at a time, yielding after each chunk (the
        caller may let other work run in between); ``json`` then has it at once.
        The same string: the chunks, joined with commas, are the items joined."""
        if self._json is not None or self._parts is None:
            return
        head, items, tail = self._parts
        pieces = []
        for start in range(0, len(items), chunk):
            pieces.append(",".join(items[start : start + chunk]))
            yield
        self._json = head + ",".join(pieces) + tail

    @property
    def joined(self) -> int:
        """Characters held by the joined JSON (0 until it is read)."""
        return 0 if self._json is None else len(self._json)

    def after(self, count: int) -> str:
        """The JSON after its first ``count`` items (``count`` <= marks.stable),
        without joining the items before them."""
        if self._parts is None:
            raise ValueError("this rendering has no parts to resume from")
        _, items, tail = self._parts
        if count >= len(items):
            return tail
        return ("," if count else "") + ",".join(items[count:]) + tail

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rendered):
            return NotImplemented
        return (self.json, self.notices, dict(self.tool_id_map)) == (
            other.json,
            other.notices,
            dict(other.tool_id_map),
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rendered({self.json[:60]!r}..., notices={len(self.notices)})"
