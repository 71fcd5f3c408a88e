"""A summariser without an LLM, for air-gapped deployments and tests.

It copies what can be taken from the messages as they are, in the sections
the LLM prompt asks for: the user's requests, the final answers, the
errors, the files touched. Nothing is inferred, so "Key Decisions" and
"Constraints & Preferences" stay "(none recorded)". The first line says the
summary was built without an LLM, so neither a reader nor a later LLM
summariser mistakes it for a real one.

Pure and deterministic: the same request always gives the same text.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ctxwarden.core.compaction.types import SummaryRequest
from ctxwarden.core.messages import Message, MessageState, Role, StopReason
from ctxwarden.core.stepwise import EVERY, Steps, finish

LABEL = "(extractive summary: built without an LLM)"
NONE = "- (none recorded)"
CUT_MARKER = "[... cut to fit the summary budget]"
CHARS_PER_TOKEN = 4
"""The same estimate as :class:`ctxwarden.core.tokens.HeuristicTokenizer`."""

GOAL_LIMIT = 500
ITEM_LIMIT = 300
CALL_ARGS_LIMIT = 120
ERROR_LIMIT = 1000
MAX_LISTED_CALLS = 20
DEFAULT_MAX_OUTPUT_TOKENS = 32_768

_HEADING = re.compile(r"^(#{1,6})(?=\s)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class _Error:
    source: str
    text: str


@dataclass(slots=True)
class _Facts:
    """What the summary is built from, gathered in one pass."""

    requests: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    errors: list[_Error] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)
    # After the last final answer (STOP): the unfinished part.
    open_requests: list[str] = field(default_factory=list)
    open_texts: list[str] = field(default_factory=list)
    open_calls: list[str] = field(default_factory=list)
    # Everything the assistant said and did, for the turn-prefix form.
    steps: list[str] = field(default_factory=list)


class ExtractiveSummarizer:
    """Implements the ``Summarizer`` protocol without any I/O."""

    def __init__(self, *, max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS) -> None:
        self._max_output_tokens = max_output_tokens

    @property
    def name(self) -> str:
        return "extractive"

    @property
    def max_output_tokens(self) -> int:
        return self._max_output_tokens

    async def summarize(self, request: SummaryRequest) -> str:
        return build_extractive_summary(request)

    def summary_steps(self, request: SummaryRequest) -> Steps[str]:
        """``summarize`` in steps (core.stepwise): it reads every message of the
        request, which may be the whole of a long session."""
        return extractive_summary_steps(request)


def build_extractive_summary(request: SummaryRequest) -> str:
    """The summary text; at most about ``request.prompt.max_tokens`` tokens
    (4 characters a token), cut with a marker when longer.

    With ``turn_prefix`` the short form for the start of a split turn is
    built and ``previous_summary`` is not repeated (the history summary
    carries it). Otherwise a non-empty ``previous_summary`` is kept whole
    under "## Earlier", its headings moved one level down.
    """
    return finish(extractive_summary_steps(request))


def extractive_summary_steps(request: SummaryRequest) -> Steps[str]:
    """``build_extractive_summary`` in steps (core.stepwise)."""
    facts = yield from _gather(request.messages)
    if request.turn_prefix:
        sections = _turn_prefix_sections(facts, request)
    else:
        sections = _history_sections(facts, request)
    budget = request.prompt.max_tokens * CHARS_PER_TOKEN
    return _render(_fit(sections, budget) if budget > 0 else sections, budget)


# --- gathering ---------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"{text[:limit].rstrip()} [... {len(text) - limit} more characters]"


def _call_text(name: str, arguments_json: str) -> str:
    args = _one_line(arguments_json) or "{}"
    if len(args) > CALL_ARGS_LIMIT:
        args = args[:CALL_ARGS_LIMIT] + "..."
    return f"{name or '(unnamed tool)'}({args})"


def _usable(messages: Iterable[Message], facts: _Facts) -> Steps[list[Message]]:
    """Drops rolled-back and history-only messages, failed assistant messages
    and the results of their calls; records the failures' error messages."""
    kept: list[Message] = []
    failed_calls: set[str] = set()
    for n, m in enumerate(messages):
        if n % EVERY == EVERY - 1:
            yield
        if m.state is MessageState.ROLLED_BACK or m.history_only:
            continue
        if m.failed:
            failed_calls.update(c.tool_call_id for c in m.tool_calls)
            if m.error_message.strip():
                what = "aborted" if m.stop_reason is StopReason.ABORTED else "failed"
                facts.errors.append(_Error(f"model call {what}", m.error_message.strip()))
            continue
        if m.role is Role.TOOL_RESULT and m.tool_call_id and m.tool_call_id in failed_calls:
            continue
        kept.append(m)
    return kept


def _gather(messages: Sequence[Message]) -> Steps[_Facts]:
    facts = _Facts()
    usable = yield from _usable(messages, facts)
    last_answer = max(
        (
            i
            for i, m in enumerate(usable)
            if m.role is Role.ASSISTANT and m.stop_reason is StopReason.STOP and m.text.strip()
        ),
        default=-1,
    )
    for i, m in enumerate(usable):
        if i % EVERY == EVERY - 1:
            yield
        unfinished = i > last_answer
        text = m.text.strip()
        if m.role is Role.USER:
            if text:
                facts.requests.append(text)
                if unfinished:
                    facts.open_requests.append(text)
        elif m.role is Role.ASSISTANT:
            if text:
                facts.steps.append(_clip(_one_line(text), ITEM_LIMIT))
                if m.stop_reason is StopReason.STOP:
                    facts.answers.append(text)
                elif unfinished:
                    facts.open_texts.append(text)
            for call in m.tool_calls:
                rendered = _call_text(call.tool_name, call.arguments_json)
                facts.calls[call.tool_name or "(unnamed tool)"] += 1
                facts.steps.append(f"called {rendered}")
                if unfinished:
                    facts.open_calls.append(rendered)
        elif m.is_error:
            source = f"tool `{m.tool_name}`" if m.tool_name else "a tool"
            facts.errors.append(_Error(source, text or "(no output)"))
    return facts


# --- sections ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Section:
    heading: str
    body: str
    keep_tail: bool = False
    """When cut, keep the end (the latest items) instead of the start."""


def _bullets(items: Iterable[str], prefix: str = "- ") -> str:
    lines = [f"{prefix}{item}" for item in items]
    return "\n".join(lines) if lines else NONE


def _file_lines(request: SummaryRequest) -> list[str]:
    lines: list[str] = []
    for title, files in (
        ("Files read", request.read_files),
        ("Files modified", request.modified_files),
    ):
        if files:
            lines.append(f"- {title}:")
            lines.extend(f"  - {path}" for path in files)
    return lines


def _error_lines(errors: Sequence[_Error]) -> list[str]:
    lines: list[str] = []
    for error in _unique(errors):
        body = _clip(error.text, ERROR_LIMIT).replace("\n", "\n    ")
        lines.append(f"  - {error.source}: {body}")
    return lines


def _unique(errors: Sequence[_Error]) -> list[_Error]:
    seen: set[_Error] = set()
    out: list[_Error] = []
    for error in errors:
        if error not in seen:
            seen.add(error)
            out.append(error)
    return out


def _goal(facts: _Facts, has_previous: bool) -> str:
    if not facts.requests:
        return "(no user request in this part of the conversation)"
    parts: list[str] = []
    if has_previous:
        parts.append("(requests since the earlier summary; see ## Earlier for the original goal)")
    first, *later = facts.requests
    parts.append(_clip(first, GOAL_LIMIT))
    if later:
        parts.append("Later requests:")
        parts.append(_bullets(_clip(_one_line(r), ITEM_LIMIT) for r in later))
    return "\n".join(parts)


def _progress(facts: _Facts) -> list[Section]:
    done = _bullets((_clip(_one_line(a), ITEM_LIMIT) for a in facts.answers), "- [x] ")
    in_progress = [f"Request: {_clip(_one_line(r), ITEM_LIMIT)}" for r in facts.open_requests]
    in_progress += [_clip(_one_line(t), ITEM_LIMIT) for t in facts.open_texts]
    calls = facts.open_calls
    if len(calls) > MAX_LISTED_CALLS:
        in_progress.append(f"({len(calls) - MAX_LISTED_CALLS} earlier tool calls not listed)")
        calls = calls[-MAX_LISTED_CALLS:]
    in_progress += [f"called {c}" for c in calls]
    blocked = [f"{e.source}: {_clip(_one_line(e.text), ITEM_LIMIT)}" for e in _unique(facts.errors)]
    return [
        Section("## Progress", ""),
        Section("### Done", done, keep_tail=True),
        Section("### In Progress", _bullets(in_progress, "- [ ] "), keep_tail=True),
        Section("### Blocked", _bullets(blocked), keep_tail=True),
    ]


def _next_steps(facts: _Facts) -> str:
    if facts.open_requests:
        return f"1. Continue with: {_clip(_one_line(facts.open_requests[-1]), ITEM_LIMIT)}"
    if facts.open_texts or facts.open_calls:
        return "1. Continue the work listed under In Progress."
    return NONE


def _critical(facts: _Facts, request: SummaryRequest) -> str:
    lines = _file_lines(request)
    if facts.calls:
        counts = ", ".join(f"{name} x{n}" for name, n in sorted(facts.calls.items()))
        lines.append(f"- Tool calls in this part: {counts}")
    errors = _error_lines(facts.errors)
    if errors:
        lines.append("- Error messages (verbatim):")
        lines.extend(errors)
    return "\n".join(lines) if lines else NONE


def _earlier(previous: str) -> str:
    lines = [line for line in previous.strip().splitlines() if line.strip() != LABEL]
    text = "\n".join(lines).strip()
    return _HEADING.sub(lambda m: m.group(1) + "#" if len(m.group(1)) < 6 else m.group(1), text)


def _history_sections(facts: _Facts, request: SummaryRequest) -> list[Section]:
    sections: list[Section] = []
    previous = _earlier(request.previous_summary) if request.previous_summary.strip() else ""
    if previous:
        sections.append(Section("## Earlier", previous))
    sections += [
        Section("## Goal", _goal(facts, bool(previous))),
        Section("## Constraints & Preferences", NONE),
        *_progress(facts),
        Section("## Key Decisions", NONE),
        Section("## Next Steps", _next_steps(facts)),
        Section("## Critical Context", _critical(facts, request)),
    ]
    return sections


def _turn_prefix_sections(facts: _Facts, request: SummaryRequest) -> list[Section]:
    original = (
        _clip(facts.requests[0], GOAL_LIMIT)
        if facts.requests
        else "(the request is before this part of the turn)"
    )
    steps = facts.steps
    early: list[str] = []
    if len(steps) > MAX_LISTED_CALLS:
        early.append(f"({len(steps) - MAX_LISTED_CALLS} earlier steps not listed)")
        steps = steps[-MAX_LISTED_CALLS:]
    early += steps
    context = _file_lines(request)
    errors = _error_lines(facts.errors)
    if errors:
        context.append("- Error messages (verbatim):")
        context.extend(errors)
    context.append("- The messages kept after this summary continue the same turn.")
    return [
        Section("## Original Request", original),
        Section("## Early Progress", _bullets(early), keep_tail=True),
        Section("## Context for the Kept Part", "\n".join(context)),
    ]


# --- budget ------------------------------------------------------------------


def _render(sections: Sequence[Section], budget: int) -> str:
    parts = [f"{s.heading}\n{s.body}" if s.body else s.heading for s in sections]
    text = "\n\n".join([LABEL, *parts])
    if budget <= 0 or len(text) <= budget:
        return text
    keep = max(budget - len(CUT_MARKER) - 1, 0)
    return (text[:keep].rstrip() + "\n" + CUT_MARKER)[:budget]


def _fit(sections: Sequence[Section], budget: int) -> list[Section]:
    """Shares the budget fairly: short sections stay whole, the long ones
    are cut to equal shares of what is left."""
    fixed = len(_render([Section(s.heading, "") for s in sections], 0)) + len(sections)
    lengths = [len(s.body) for s in sections]
    available = budget - fixed
    if sum(lengths) <= available:
        return list(sections)
    shares = _fair_shares(lengths, max(available, 0))
    return [
        Section(s.heading, _cut(s.body, share, tail=s.keep_tail), s.keep_tail)
        for s, share in zip(sections, shares, strict=True)
    ]


def _fair_shares(lengths: Sequence[int], total: int) -> list[int]:
    shares = [0] * len(lengths)
    remaining, left = total, len(lengths)
    for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):
        shares[i] = min(lengths[i], remaining // left)
        remaining -= shares[i]
        left -= 1
    return shares


def _cut(body: str, limit: int, *, tail: bool = False) -> str:
    """``body`` in at most ``limit`` characters, the cut marked; at a line
    break when one is near. ``tail`` keeps the end instead of the start."""
    if len(body) <= limit:
        return body
    keep = limit - len(CUT_MARKER) - 1
    if keep <= 0:
        return CUT_MARKER if limit >= len(CUT_MARKER) else ""
    if tail:
        part = body[-keep:]
        newline = part.find("\n")
        if 0 <= newline <= keep // 2:
            part = part[newline + 1 :]
        return f"{CUT_MARKER}\n{part.lstrip()}"
    part = body[:keep]
    newline = part.rfind("\n")
    if newline >= keep // 2:
        part = part[:newline]
    return f"{part.rstrip()}\n{CUT_MARKER}"
