"""The cache ledger's per-call part: how much of a model input a provider's
prompt cache can serve, as the prefix it shares with the previous input
returned for the same session and format, and why it shrank when it did.

An input is, in order: the head (tools and system prompt, for one model), the
program's leading messages (memory block, summary) and the kept messages. A
prefix is shared part by part: the head whole or not at all, then the leading
messages whole or not at all, then kept messages one by one (providers cache
whole blocks). Kept messages are compared by the view's fingerprint chain
(``digests``, the one resume tokens use): O(1) when the previous input is a
prefix of this one, O(log n) by bisection otherwise, plus the messages past
the chain; across a new checkpoint or a settings update (the chain is sealed
anew) message by message, O(kept messages) once per compaction, clearing,
rewind or UpdateSession (ignoring how each was counted: a new tokenizer or model
counts the same messages anew). Bytes: of the rendered JSON (by its marks) for a
provider format, of the texts the tokenizer counts for the native one.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from ctxwarden.core.content import ContentKind
from ctxwarden.core.messages import Message
from ctxwarden.core.stepwise import EVERY, Steps, finish

BYTES_EVERY = 512
"""Messages measured between two steps of ``bytes_steps`` (each a few lengths)."""


class Marks(Protocol):
    """What the ledger reads of a rendering's marks (``core.rendered.Marks``), named
    structurally: the ledger sits under the session, rendering over it."""

    @property
    def stable(self) -> int: ...

    @property
    def utf8(self) -> Sequence[int]: ...

    @property
    def digests(self) -> Sequence[int]: ...


class CacheBreak(enum.IntEnum):
    """Why the shared prefix is shorter than the previous input (proto CacheBreakReason)."""

    NONE = 0
    FIRST_INPUT = 1
    COMPACTION = 2
    CLEARING = 3
    ROLLBACK = 4
    SYSTEM_PROMPT = 5
    TOOLS = 6
    MODEL = 7
    MEMORY_REFRESH = 8
    VIEW_CHANGE = 9

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class InputShape:
    """What the comparison needs of one input (references, no copies)."""

    model: str
    system_prompt: str
    tools: tuple[object, ...]
    head_tokens: int
    head_bytes: int
    checkpoint: str
    """The compaction ID in effect (a new one: a compaction, a clearing or a rollback)."""
    lead_key: tuple[str, str]
    """(summary, memory text): what the leading messages show."""
    lead_tokens: int
    lead_bytes: int
    kept: Sequence[Message]
    digests: Sequence[int]
    """digests[i] fingerprints kept[:i] (may cover fewer than all of them)."""
    kept_tokens: int
    kept_bytes: int
    marks: Marks | None = None

    @property
    def tokens(self) -> int:
        return self.head_tokens + self.lead_tokens + self.kept_tokens


@dataclass(frozen=True, slots=True)
class CachePrefix:
    """One BuildModelInput's report."""

    shared_tokens: int
    shared_bytes: int
    input_tokens: int
    previous_tokens: int
    reason: CacheBreak

    @property
    def lost_tokens(self) -> int:
        """Tokens of the previous input the provider must process again."""
        return max(0, self.previous_tokens - self.shared_tokens)


def message_bytes(m: Message) -> int:
    """UTF-8 bytes of what a message carries (texts, arguments, data)."""
    n = 0
    for b in m.content:
        if b.kind is ContentKind.TOOL_CALL:
            n += len(b.tool_name) + len(b.arguments_json.encode())
        elif b.kind is ContentKind.IMAGE:
            n += len(b.data)
        elif b.kind is ContentKind.PROVIDER:
            n += len(b.provider_json.encode())
        else:
            n += len(b.text.encode())
    return n


def _bisect(a: Sequence[int], b: Sequence[int], hi: int) -> int:
    """The largest i <= hi with a[i] == b[i] (a chain: equal up to a point); 0 if none."""
    if hi <= 0 or a[hi] == b[hi]:
        return max(hi, 0)
    lo = 0  # a[0] == b[0]: both fingerprint the empty prefix
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if a[mid] == b[mid]:
            lo = mid
        else:
            hi = mid
    return lo


def common_kept(prev: InputShape, cur: InputShape) -> int:
    """How many leading kept messages the two inputs share."""
    return finish(common_kept_steps(prev, cur))


def common_kept_steps(prev: InputShape, cur: InputShape) -> Steps[int]:
    """``common_kept`` in steps (core.stepwise): messages compared one by one (across a
    checkpoint or a settings change) may be every message of a long session."""
    n = min(len(prev.kept), len(cur.kept))
    k = 0
    # Fingerprints are sealed per checkpoint and per revision of the session's settings
    # (digests[0], the empty prefix's, tells): across either, compare the messages.
    if (
        prev.digests
        and cur.digests
        and prev.checkpoint == cur.checkpoint
        and prev.digests[0] == cur.digests[0]
    ):
        chained = min(n, len(prev.digests) - 1, len(cur.digests) - 1)
        k = _bisect(prev.digests, cur.digests, chained)
        if k < chained:
            return k
    start = k
    while k < n and same_to_provider(prev.kept[k], cur.kept[k]):
        k += 1
        if (k - start) % EVERY == 0:
            yield
    return k


def bytes_steps(messages: Sequence[Message]) -> Steps[int]:
    """The total ``message_bytes`` of ``messages``, in steps (core.stepwise)."""
    total = 0
    for i, m in enumerate(messages):
        total += message_bytes(m)
        if i % BYTES_EVERY == BYTES_EVERY - 1:
            yield
    return total


def same_to_provider(a: Message, b: Message) -> bool:
    """Whether a provider gets the same message: equal but for how it was counted (a
    new tokenizer or model recounts every kept message, UpdateSession)."""
    if a is b or a == b:
        return True
    if a.token_count == b.token_count and a.counted_with == b.counted_with:
        return False
    return replace(a, token_count=0, counted_with="") == replace(b, token_count=0, counted_with="")


def _rendered_bytes(prev: Marks | None, cur: Marks | None) -> int | None:
    if prev is None or cur is None:
        return None
    hi = min(prev.stable, cur.stable)
    if prev.digests[0] != cur.digests[0]:
        return 0
    return cur.utf8[_bisect(prev.digests, cur.digests, hi)]


def _why(prev: InputShape, cur: InputShape, k: int) -> CacheBreak:
    if prev.model != cur.model:
        return CacheBreak.MODEL
    if prev.system_prompt != cur.system_prompt:
        return CacheBreak.SYSTEM_PROMPT
    if prev.tools != cur.tools:
        return CacheBreak.TOOLS
    (was_summary, was_memory), (now_summary, now_memory) = prev.lead_key, cur.lead_key
    was_id, now_id = prev.checkpoint, cur.checkpoint
    if was_id != now_id:
        if now_id < was_id:  # checkpoint IDs sort by time: an older one is back
            return CacheBreak.ROLLBACK
        return CacheBreak.CLEARING if was_summary == now_summary else CacheBreak.COMPACTION
    if was_memory != now_memory:
        return CacheBreak.MEMORY_REFRESH
    if was_summary != now_summary or k >= len(prev.kept):
        return CacheBreak.VIEW_CHANGE
    gone = prev.kept[k]
    now = cur.kept[k] if k < len(cur.kept) else None
    if gone.seq and (now is None or now.seq != gone.seq):
        return CacheBreak.ROLLBACK
    return CacheBreak.VIEW_CHANGE


def compare(prev: InputShape | None, cur: InputShape) -> tuple[CachePrefix, InputShape]:
    """The report of ``cur`` after ``prev``, and ``cur`` with its byte totals
    carried forward (only the messages past the shared ones are measured)."""
    return finish(compare_steps(prev, cur))


def compare_steps(
    prev: InputShape | None, cur: InputShape
) -> Steps[tuple[CachePrefix, InputShape]]:
    """``compare`` in steps (core.stepwise): a first input measures every kept message."""
    if prev is None:
        kept_bytes = yield from bytes_steps(cur.kept)
        cur = _with_bytes(cur, kept_bytes)
        shared = CachePrefix(0, 0, cur.tokens, 0, CacheBreak.FIRST_INPUT)
        return shared, cur
    same_head = (prev.model, prev.system_prompt, prev.tools) == (
        cur.model,
        cur.system_prompt,
        cur.tools,
    )
    same_lead = same_head and prev.lead_key == cur.lead_key
    k = (yield from common_kept_steps(prev, cur)) if same_lead else 0
    prev_tail = prev.kept[k:]
    cur_tail = cur.kept[k:]
    shared_kept_bytes = prev.kept_bytes - (yield from bytes_steps(prev_tail))
    cur = _with_bytes(cur, shared_kept_bytes + (yield from bytes_steps(cur_tail)))
    tokens = bytes_ = 0
    # The previous input with its shared parts in this one's counts: prev.tokens unless
    # a new tokenizer or model counted the same parts anew (UpdateSession).
    previous = prev.tokens
    if same_head:
        tokens, bytes_ = cur.head_tokens, cur.head_bytes
        previous += cur.head_tokens - prev.head_tokens
    if same_lead:
        shared_kept = max(0, cur.kept_tokens - sum(m.token_count for m in cur_tail))
        tokens += cur.lead_tokens + shared_kept
        bytes_ += cur.lead_bytes + shared_kept_bytes
        was_shared = max(0, prev.kept_tokens - sum(m.token_count for m in prev_tail))
        previous += cur.lead_tokens - prev.lead_tokens + shared_kept - was_shared
    rendered = _rendered_bytes(prev.marks, cur.marks)
    if rendered is not None:
        bytes_ = rendered
    shrank = not same_lead or k < len(prev.kept)
    reason = _why(prev, cur, k) if shrank else CacheBreak.NONE
    return CachePrefix(tokens, bytes_, cur.tokens, previous, reason), cur


def _with_bytes(shape: InputShape, kept_bytes: int) -> InputShape:
    return InputShape(
        shape.model,
        shape.system_prompt,
        shape.tools,
        shape.head_tokens,
        shape.head_bytes,
        shape.checkpoint,
        shape.lead_key,
        shape.lead_tokens,
        shape.lead_bytes,
        shape.kept,
        shape.digests,
        shape.kept_tokens,
        kept_bytes,
        shape.marks,
    )
