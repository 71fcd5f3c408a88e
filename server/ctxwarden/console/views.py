"""What the console's templates show, computed from domain values (pure, no I/O)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxwarden.console.pretty import indented
from ctxwarden.core.messages import ContentKind, Message, MessageState, Role
from ctxwarden.core.model_input import ModelInputView, TokenBreakdown
from ctxwarden.core.view import Notice

ROLES = {Role.USER: "user", Role.ASSISTANT: "assistant", Role.TOOL_RESULT: "tool result"}


@dataclass(frozen=True, slots=True)
class Block:
    kind: str
    text: str = ""
    size: int = 0
    collapsed: bool = False
    """Longer than the preview: ``text`` is the preview, the rest is one click away."""
    tool_name: str = ""
    tool_call_id: str = ""
    result_seq: int = 0
    """For a tool call: the seq of its result on this page (0: not on it)."""


@dataclass(frozen=True, slots=True)
class Row:
    message: Message
    role: str
    blocks: list[Block]
    status: str
    """in context | summarised | rolled back | failed | history only | not in context"""
    notices: list[Notice] = field(default_factory=list)
    call_seq: int = 0
    """For a tool result: the seq of the call it answers, when on this page."""
    big_output: bool = False
    """A tool result over the preview size: the byte-range viewer has it all."""
    inherited: bool = False
    """A fork's message from before it forked (stored by an ancestor, or taken over)."""
    inherited_from: str = ""
    """With ``inherited``: the parent's visible ID ("" when it has no page: deleted)."""


@dataclass(frozen=True, slots=True)
class Inheritance:
    """What a fork inherited: the seqs before ``fork_seq``, from ``parent``."""

    fork_seq: int = 0
    """0: the session is no fork."""
    parent: str = ""
    """The parent's visible ID ("" when it has no page)."""

    def of(self, seq: int) -> bool:
        return 0 < seq < self.fork_seq


def _blocks(m: Message, preview: int, results: dict[str, int]) -> list[Block]:
    out = []
    for b in m.content:
        if b.kind is ContentKind.TOOL_CALL:
            args = b.arguments_json
            out.append(
                Block(
                    "tool call",
                    args[:preview],
                    len(args.encode()),
                    len(args) > preview,
                    b.tool_name,
                    b.tool_call_id,
                    results.get(b.tool_call_id, 0),
                )
            )
        elif b.kind is ContentKind.IMAGE:
            out.append(Block("image", f"{b.mime_type}, {len(b.data):,} bytes", len(b.data)))
        elif b.kind is ContentKind.PROVIDER:
            out.append(Block(f"provider item ({b.family})", b.provider_json[:preview]))
        else:
            kind = "thinking" if b.kind is ContentKind.THINKING else "text"
            text = "[redacted]" if b.redacted else b.text
            size = len(text.encode())
            out.append(Block(kind, text[:preview], size, size > preview))
    return out


def status(m: Message, in_view: set[int], first_kept_seq: int) -> str:
    if m.state is MessageState.ROLLED_BACK:
        return "rolled back"
    if m.failed:
        return "failed"
    if m.history_only:
        return "history only"
    if m.seq in in_view:
        return "in context"
    if m.seq < first_kept_seq:
        return "summarised"
    return "not in context"


def notices_by_seq(notices: Sequence[Notice]) -> dict[int, list[Notice]]:
    out: dict[int, list[Notice]] = {}
    for n in notices:
        out.setdefault(n.seq, []).append(n)
    return out


def timeline(
    messages: Sequence[Message],
    view: ModelInputView,
    preview: int,
    inherited: Inheritance = Inheritance(),
) -> list[Row]:
    """One row per message of the history (a fork's inherited ones marked); tool
    calls and results on the page paired."""
    results = {m.tool_call_id: m.seq for m in messages if m.role is Role.TOOL_RESULT}
    calls = {b.tool_call_id: m.seq for m in messages for b in m.tool_calls}
    in_view = {m.seq for m in view.messages if m.seq}
    notes = notices_by_seq(view.notices)
    rows = []
    for m in messages:
        is_result = m.role is Role.TOOL_RESULT
        rows.append(
            Row(
                m,
                ROLES.get(m.role, "?"),
                _blocks(m, preview, results),
                status(m, in_view, view.first_kept_seq),
                notes.get(m.seq, []),
                calls.get(m.tool_call_id, 0) if is_result else 0,
                is_result and len(m.text.encode()) > preview,
                inherited.of(m.seq),
                inherited.parent if inherited.of(m.seq) else "",
            )
        )
    return rows


def context_rows(
    view: ModelInputView,
    start: int,
    stop: int,
    preview: int,
    inherited: Inheritance = Inheritance(),
) -> list[Row]:
    """Rows of the effective context's messages ``start:stop`` (after the summary)."""
    shown = view.messages[view.summary_messages :][start:stop]
    results = {m.tool_call_id: m.seq for m in shown if m.role is Role.TOOL_RESULT}
    notes = notices_by_seq(view.notices)
    rows = []
    for m in shown:
        label = "synthetic result" if m.seq == 0 else ROLES.get(m.role, "?")
        mine = inherited.of(m.seq)
        blocks = _blocks(m, preview, results)
        parent = inherited.parent if mine else ""
        rows.append(Row(m, label, blocks, "", notes.get(m.seq, []), 0, False, mine, parent))
    return rows


def pretty_json(text: str, limit: int) -> tuple[str, bool]:
    """Indented JSON, cut at ``limit`` characters (and whether it was); the work
    is bounded by ``limit``, not by the length of ``text`` (console.pretty)."""
    if not text:
        return "", False
    with contextlib.suppress(ValueError):
        return indented(text, limit)
    return text[:limit], len(text) > limit


@dataclass(frozen=True, slots=True)
class Segment:
    name: str
    tokens: int
    x: float
    width: float


@dataclass(frozen=True, slots=True)
class TokenBar:
    segments: list[Segment]
    scale: int
    """Tokens the bar's full width stands for."""
    threshold_x: float
    window_x: float
    total: int
    window: int
    threshold: int


BAR_WIDTH = 800.0


def token_bar(t: TokenBreakdown) -> TokenBar:
    parts = [
        ("system", t.system_tokens),
        ("tools", t.tools_tokens),
        ("summary", t.summary_tokens),
        ("messages", t.message_tokens),
    ]
    counted = sum(n for _, n in parts)
    scale = max(t.context_window, t.total_tokens, counted, 1)
    x = 0.0
    segments = []
    for name, n in parts:
        w = BAR_WIDTH * n / scale
        segments.append(Segment(name, n, round(x, 2), round(w, 2)))
        x += w
    return TokenBar(
        segments,
        scale,
        round(BAR_WIDTH * t.compaction_threshold / scale, 2) if t.compaction_threshold else 0.0,
        round(BAR_WIDTH * t.context_window / scale, 2) if t.context_window else 0.0,
        t.total_tokens,
        t.context_window,
        t.compaction_threshold,
    )
