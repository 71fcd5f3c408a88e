"""The cache ledger's reference (docs/guides/cache-and-cost.md): what each live
BuildModelInput shares with the previous live input of its session and format, computed
from the two inputs the test received, and what GetUsage's cache totals must then be.

Where the server keeps what: each replica keeps the previous input of every (session,
format) it built, forgotten when its copy of the session leaves memory (eviction, a stale
copy replaced, a restart); its hot copy of the session holds the ledger with the counts of
the builds since that copy was loaded, and every write of the session stores that ledger
(a memory refresh moves the version on without it). Counts of builds after the last write
are lost when the copy is dropped, and an archived session is never held, so its builds
are compared but not counted. The model keeps exactly that, per replica."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m

SUMMARY_KEY = "ctxwarden.summary"
MEMORY_KEY = "ctxwarden.memory"
R = pb.CacheBreakReason
Reason: TypeAlias = pb.CacheBreakReason.ValueType


@dataclass
class Ledger:
    """``CacheLedger``'s counts, and the prediction waiting for a reported usage."""

    counts: list[int] = field(default_factory=lambda: [0] * 7)
    """builds, input, predicted, paired calls, paired predicted, paired read, paired prompt"""
    breaks: dict[int, tuple[int, int]] = field(default_factory=dict)
    """reason -> (times, tokens lost)"""
    pending: int = -1

    def copy(self) -> Ledger:
        return Ledger(list(self.counts), dict(self.breaks), self.pending)

    def built(self, p: pb.CachePrefix) -> None:
        c = self.counts
        c[0], c[1], c[2] = c[0] + 1, c[1] + p.input_tokens, c[2] + p.shared_tokens
        if p.break_reason:
            times, lost = self.breaks.get(p.break_reason, (0, 0))
            lost += max(0, p.previous_input_tokens - p.shared_tokens)
            self.breaks[p.break_reason] = (times + 1, lost)
        self.pending = p.shared_tokens

    def paired(self, u: m.Usage) -> None:
        if self.pending < 0:
            return
        prompt = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
        c = self.counts
        c[3], c[4] = c[3] + 1, c[4] + self.pending
        c[5], c[6] = c[5] + u.cache_read_tokens, c[6] + prompt
        self.pending = -1

    def problems(self, got: pb.CacheLedger) -> list[str]:
        have = [got.builds, got.input_tokens, got.predicted_cached_tokens, got.paired_calls]
        have += [got.paired_predicted_cached_tokens, got.paired_observed_cache_read_tokens]
        have += [got.paired_observed_prompt_tokens]
        breaks = {b.reason: (b.count, b.tokens_lost) for b in got.breaks}
        if have == self.counts and breaks == self.breaks:
            return []
        return [f"cache ledger {have} {breaks} != the builds' {self.counts} {self.breaks}"]


def _lead(mi: pb.ModelInput) -> int:
    n = 0
    while n < len(mi.messages) and (
        MEMORY_KEY in mi.messages[n].metadata or SUMMARY_KEY in mi.messages[n].metadata
    ):
        n += 1
    return n


def message_bytes(msg: m.Message) -> int:
    """UTF-8 bytes of the texts a tokenizer counts in a message (the doc's native bytes)."""
    n = 0
    for b in msg.content:
        kind = b.WhichOneof("block")
        if kind == "tool_call":
            n += len(b.tool_call.name.encode()) + len(b.tool_call.arguments_json.encode())
        elif kind == "image":
            n += len(b.image.data)
        elif kind == "provider":
            n += len(b.provider.json.encode())
        elif kind == "thinking":
            n += len(b.thinking.thinking.encode())
        else:
            n += len(b.text.text.encode())
    return n


def input_tokens(mi: pb.ModelInput) -> int:
    """The sum of TokenBreakdown's parts."""
    t = mi.tokens
    return t.system_tokens + t.tools_tokens + t.memory_tokens + t.summary_tokens + t.message_tokens


@dataclass(frozen=True)
class Expected:
    """A build's report as the docs define it, from the previous input and this one."""

    shared_tokens: int
    shared_bytes: int | None
    """None for a provider format: checked as a byte prefix of both rendered_json."""
    reason: Reason
    gone: m.Message | None
    """The first kept message of the previous input not shared, if any."""
    previous_tokens: int
    """The previous input's tokens, its shared parts counted as this input counts them."""


def same_to_provider(a: m.Message, b: m.Message) -> bool:
    """Equal but for their token counts (a new tokenizer or model counts anew)."""
    if a == b:
        return True
    a2, b2 = m.Message(), m.Message()
    a2.CopyFrom(a)
    b2.CopyFrom(b)
    a2.token_count = b2.token_count = 0
    return a2 == b2


def expected(
    prev: pb.ModelInput, cur: pb.ModelInput, native: bool, same_model: bool = True
) -> Expected:
    """Shared whole: the head (model, system prompt, tools), then the leading messages
    (memory block, summary), then kept messages one by one, as a provider gets them
    (whatever they were counted with); the reason by the docs' table."""
    same_head = same_model and (prev.system_prompt, list(prev.tools)) == (
        cur.system_prompt,
        list(cur.tools),
    )
    same_lead = same_head and (prev.summary, prev.memory_block) == (cur.summary, cur.memory_block)
    pk, ck = list(prev.messages[_lead(prev) :]), list(cur.messages[_lead(cur) :])
    k = 0
    if same_lead:
        while k < min(len(pk), len(ck)) and same_to_provider(pk[k], ck[k]):
            k += 1
    t, p = cur.tokens, prev.tokens
    tokens = t.system_tokens + t.tools_tokens if same_head else 0
    # The previous input with its shared parts in this one's counts (a new tokenizer or
    # model counts them anew; else they are the same).
    previous = input_tokens(prev)
    if same_head:
        previous += tokens - p.system_tokens - p.tools_tokens
    if same_lead:
        previous += t.memory_tokens + t.summary_tokens - p.memory_tokens - p.summary_tokens
        previous += sum(x.token_count for x in ck[:k]) - sum(x.token_count for x in pk[:k])
    head = len(cur.system_prompt.encode())
    head += sum(len((x.name + x.description + x.parameters_json).encode()) for x in cur.tools)
    size = head if same_head else 0
    if same_lead:
        tokens += t.memory_tokens + t.summary_tokens + sum(x.token_count for x in ck[:k])
        size += sum(message_bytes(x) for x in cur.messages[: _lead(cur) + k])
    gone = pk[k] if k < len(pk) else None
    reason = _reason(prev, cur, same_lead, gone, k < len(pk), same_model)
    return Expected(tokens, size if native else None, reason, gone, previous)


def _reason(
    prev: pb.ModelInput,
    cur: pb.ModelInput,
    same_lead: bool,
    gone: m.Message | None,
    lost: bool,
    same_model: bool,
) -> Reason:
    if same_lead and not lost:
        return R.CACHE_BREAK_REASON_UNSPECIFIED
    if not same_model:
        return R.CACHE_BREAK_REASON_MODEL
    if prev.system_prompt != cur.system_prompt:
        return R.CACHE_BREAK_REASON_SYSTEM_PROMPT
    if list(prev.tools) != list(cur.tools):
        return R.CACHE_BREAK_REASON_TOOLS
    if prev.compaction_id != cur.compaction_id:
        if cur.compaction_id < prev.compaction_id:  # IDs sort by time: an older one is back
            return R.CACHE_BREAK_REASON_ROLLBACK
        if prev.summary == cur.summary:
            return R.CACHE_BREAK_REASON_CLEARING
        return R.CACHE_BREAK_REASON_COMPACTION
    if prev.memory_block != cur.memory_block:
        return R.CACHE_BREAK_REASON_MEMORY_REFRESH
    assert gone is not None
    now = [x for x in cur.messages if x.seq == gone.seq] if gone.seq else []
    if gone.seq and not now:
        return R.CACHE_BREAK_REASON_ROLLBACK
    return R.CACHE_BREAK_REASON_VIEW_CHANGE
