"""The cache ledger's comparison (core.cache_prefix): what an input shares with the
previous one equals the longest common prefix in whole blocks, however it is found
(fingerprints, bisection, message by message), and byte totals carried forward
equal the totals measured from scratch."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.core.cache_prefix import (
    CacheBreak,
    InputShape,
    common_kept,
    compare,
    message_bytes,
    same_to_provider,
)
from ctxwarden.core.content import ContentBlock
from ctxwarden.core.messages import Message, Role

POOL = [
    Message(Role.USER, (ContentBlock.of_text(f"message {i} " + "x" * (i % 7)),), seq=i + 1)
    for i in range(40)
]


def chain(kept: Sequence[Message]) -> list[int]:
    """digests[i] fingerprints kept[:i] (as core.view's chain does)."""
    out = [0]
    for m in kept:
        h = hashlib.blake2b(out[-1].to_bytes(8, "little") + repr(m).encode(), digest_size=8)
        out.append(int.from_bytes(h.digest(), "little"))
    return out


def shape(
    kept: Sequence[Message],
    *,
    system: str = "sys",
    summary: str = "",
    checkpoint: str = "",
    digests: bool = True,
) -> InputShape:
    return InputShape(
        model="m",
        system_prompt=system,
        tools=(),
        head_tokens=10,
        head_bytes=len(system),
        checkpoint=checkpoint,
        lead_key=(summary, ""),
        lead_tokens=5 if summary else 0,
        lead_bytes=len(summary),
        kept=tuple(kept),
        digests=chain(kept) if digests else (),
        kept_tokens=sum(m.token_count for m in kept),
        kept_bytes=0,
    )


def lcp(a: Sequence[Message], b: Sequence[Message]) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


indices = st.lists(st.integers(0, 39), max_size=25)
COUNTS = {m.seq: 1 + m.seq * 7 % 50 for m in POOL}
counted = st.sampled_from(POOL).map(
    lambda m: Message(m.role, m.content, seq=m.seq, token_count=COUNTS[m.seq])
)
"""Messages with counts, one count per message (as one tokenizer gives)."""


@given(st.lists(counted, max_size=20), st.lists(counted, max_size=10), st.integers(0, 20))
def test_shared_prefix_is_the_longest_common_one(
    base: list[Message], extra: list[Message], cut: int
) -> None:
    prev, cur = base, base[:cut] + extra
    k = lcp(prev, cur)
    for digests in (True, False):
        found = common_kept(shape(prev, digests=digests), shape(cur, digests=digests))
        assert found == k
    report, _ = compare(compare(None, shape(prev))[1], shape(cur))
    assert report.shared_tokens == 10 + sum(m.token_count for m in cur[:k])
    assert report.shared_bytes == len("sys") + sum(message_bytes(m) for m in cur[:k])
    assert (report.reason is CacheBreak.NONE) == (k == len(prev))
    assert report.previous_tokens == 10 + sum(m.token_count for m in prev)


@given(st.lists(st.lists(counted, max_size=15), min_size=1, max_size=6))
def test_carried_byte_totals_equal_measured_ones(inputs: list[list[Message]]) -> None:
    previous = None
    for kept in inputs:
        _, previous = compare(previous, shape(kept))
        assert previous.kept_bytes == sum(message_bytes(m) for m in kept)


def test_each_part_breaks_the_prefix_with_its_reason() -> None:
    kept = POOL[:6]
    _, prev = compare(None, shape(kept, summary="s1", checkpoint="c1"))
    cases = {
        CacheBreak.SYSTEM_PROMPT: shape(kept, system="other", summary="s1", checkpoint="c1"),
        CacheBreak.COMPACTION: shape(kept[3:], summary="s2", checkpoint="c2"),
        CacheBreak.CLEARING: shape(kept[:2], summary="s1", checkpoint="c2"),
        CacheBreak.ROLLBACK: shape(kept[:3] + POOL[10:12], summary="s1", checkpoint="c1"),
    }
    view_change = list(kept[:4])
    view_change[3] = Message(Role.USER, (ContentBlock.of_text("stub"),), seq=kept[3].seq)
    cases[CacheBreak.VIEW_CHANGE] = shape(view_change, summary="s1", checkpoint="c1")
    for reason, cur in cases.items():
        report, _ = compare(prev, cur)
        assert report.reason is reason, (reason, report)
    rollback_to_older, _ = compare(prev, shape(kept, summary="s0", checkpoint="c0"))
    assert rollback_to_older.reason is CacheBreak.ROLLBACK
    first, _ = compare(None, shape(kept))
    assert first.reason is CacheBreak.FIRST_INPUT and first.shared_tokens == 0
    same, _ = compare(prev, shape(kept, summary="s1", checkpoint="c1"))
    assert same.reason is CacheBreak.NONE and same.shared_tokens == same.input_tokens


@given(st.lists(counted, max_size=20), st.lists(counted, max_size=10), st.integers(0, 20))
def test_messages_counted_anew_are_the_same_to_a_provider(
    base: list[Message], extra: list[Message], cut: int
) -> None:
    """A new tokenizer or model recounts every kept message (UpdateSession seals the
    chain anew): the shared prefix is the same as before the recount, in the new counts,
    and so is the shared part of the previous input."""
    prev, cur = base, base[:cut] + extra
    recounted = [replace(m, token_count=m.token_count * 2 + 1, counted_with="new") for m in cur]
    _, before = compare(None, shape(prev))
    report, _ = compare(before, shape(recounted, digests=False))
    k = lcp(prev, cur)
    assert common_kept(before, shape(recounted, digests=False)) == k
    assert report.shared_tokens == 10 + sum(m.token_count for m in recounted[:k])
    restated = report.shared_tokens + sum(m.token_count for m in prev[k:])
    assert report.previous_tokens == restated  # its shared part in the new counts
    assert (report.reason is CacheBreak.NONE) == (k == len(prev))
    other = Message(Role.USER, (ContentBlock.of_text("other"),), seq=1, token_count=3)
    assert not same_to_provider(other, replace(POOL[0], token_count=3))


def test_break_reasons_are_the_api_numbers() -> None:
    """ModelInput.cache_prefix sends CacheBreak as its integer (api.convert_usage)."""
    from ctxwarden.v1 import context_service_pb2 as pb

    api = {
        v.number: v.name.removeprefix("CACHE_BREAK_REASON_")
        for v in pb.CacheBreakReason.DESCRIPTOR.values
    }
    assert api == {r.value: r.name if r.value else "UNSPECIFIED" for r in CacheBreak}
