"""A rendering that grows with its session: each message is rendered and
serialised once, and a client holding an earlier rendering gets only the rest.

The body of every format is ``{<keys before>, "<array>": [items], <keys
after>}`` (system prompt before, tools after), serialised compactly, so its
JSON is ``head + ",".join(items) + tail`` with ``head`` ending in ``[``. Items
that nothing later can change ("done": every message of OpenAI's formats, all
but the open turn of Anthropic's and Gemini's) are serialised once and kept as
text, with, for each count n of them, the end of the n-th item in the JSON (in
UTF-8 bytes) and a fingerprint of the JSON up to there.

Resuming: a rendering offers ``stable`` leading items that the next one will
most likely begin with too; a client that holds it and names (n, fingerprint)
receives the JSON after the n-th item and prepends its own first ``end(n)`` bytes, which
are the same bytes when the fingerprints agree. Fingerprints chain 64-bit
BLAKE2b digests, so a wrong splice needs a hash collision.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable, Sequence

from ctxwarden.core.messages import Message
from ctxwarden.core.render._build import Job, Renderer
from ctxwarden.core.render._common import JsonObject, Notes, dumps
from ctxwarden.core.rendered import Marks, Rendered


def _chain(previous: int, text: bytes) -> int:
    h = hashlib.blake2b(previous.to_bytes(8, "little"), digest_size=8)
    h.update(text)
    return int.from_bytes(h.digest(), "little")


def _head_tail(key: str, before: JsonObject, after: JsonObject) -> tuple[str, str]:
    """The JSON of the body around its item array, exactly as ``dumps`` writes it."""
    head = dumps(before)[:-1] + ("," if before else "") + dumps(key) + ":["
    tail = "]" + ("," + dumps(after)[1:] if after else "}")
    return head, tail


class RenderState:
    """A renderer fed with a growing prefix of one view's messages.

    Not thread-safe: one caller at a time (the service hands a state to one
    rendering and takes it back afterwards).
    """

    def __init__(self, renderer: Renderer) -> None:
        self._renderer = renderer
        self._frame_notes = Notes()
        before, after = renderer.frame(self._frame_notes)
        self._head, self._tail = _head_tail(renderer.key, before, after)
        self._items: list[str] = []
        size = len(self._head.encode())
        self._utf8 = array("q", [size])
        self._digests = array("Q", [_chain(0, self._head.encode())])
        self.fed = 0
        """Messages fed so far."""
        self.size = size
        """UTF-8 bytes held (for cache accounting)."""
        self.feed(())  # what the renderer starts with (OpenAI Chat's system message)

    @property
    def job(self) -> Job:
        return self._renderer.job

    def feed(self, messages: Iterable[Message]) -> None:
        """Render ``messages`` after those fed before; they become part of the state."""
        renderer = self._renderer
        for message in messages:
            renderer.feed(message)
            self.fed += 1
        if renderer.done:
            self._keep(renderer.done)
            renderer.done = []

    def _keep(self, done: list[JsonObject]) -> None:
        utf8, digests = self._utf8, self._digests
        for item in done:
            text = dumps(item)
            data = text.encode()
            sep = 1 if self._items else 0
            self._items.append(text)
            utf8.append(utf8[-1] + sep + len(data))
            digests.append(_chain(digests[-1], data))
            self.size += len(data) + 1

    def finish(self, tail: Sequence[Message] = ()) -> Rendered:
        """The rendering of everything fed plus ``tail`` (messages that may
        still change, e.g. synthetic tool results), leaving the state as it was."""
        renderer = self._renderer
        if tail:
            renderer = renderer.copy()
            for message in tail:
                renderer.feed(message)
        end = renderer.finish()
        stable = len(self._items)
        items = [*self._items, *(dumps(x) for x in (*renderer.done, *end.rest))]
        if end.changed is not None:
            index, item = end.changed
            items[index] = dumps(item)
            stable = min(stable, index)
        notices = (*renderer.job.notes.items, *end.notes, *self._frame_notes.items)
        marks = Marks(stable, self._utf8, self._digests)
        parts = (self._head, items, self._tail)
        return Rendered(None, notices, dict(renderer.job.ids.rewritten), marks, parts)
