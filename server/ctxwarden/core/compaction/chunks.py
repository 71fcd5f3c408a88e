"""Fitting summary prompts into the summariser's context window.

A history that fits one prompt (conversation, previous summary, pinned state,
file lists, instructions and the output budget, all within the window) is
summarised in one prompt, exactly as without a window. A longer one is cut
into chunks: each chunk is the longest run of messages, ending before a valid
cut point, whose prompt fits the window together with the running summary
and a smaller output budget (at most a quarter of the window). A part too
large for any chunk on its own (one huge message, or a call with its results)
is shown truncated in the middle, with a marker saying how much is not shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ctxwarden.core.compaction.cut import is_cut_point
from ctxwarden.core.compaction.serialize import serialized_parts
from ctxwarden.core.compaction.fileops import render_file_lists
from ctxwarden.core.compaction.types import FileLists, SummaryPrompt
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.messages import Message
from ctxwarden.core.reasons import ErrorReason

SAFETY_SHARE = 0.02
"""Part of the window left unused: the provider's message framing and the
difference between our token count and the provider's."""
MIN_MARGIN = 64
MIN_ROOM = 256
"""Fewest conversation tokens a chunk must be able to hold."""
FILE_LISTS_DIVISOR = 8
"""In a chunked prompt the file lists take at most an eighth of the window."""
CHUNK_SUMMARY_DIVISOR = 4
"""A chunk's summary budget is at most a quarter of the window, so the running
summary and the answer together leave at least half of it for messages."""
SEPARATOR_TOKENS = 1
"""Charged for the blank line between two serialised messages."""
TRUNCATED_MARKER = (
    "\n\n[ctxwarden: {count} characters not shown here: this part of the history "
    "alone is longer than the summariser's context window]\n\n"
)

Count = Callable[[str], int]
MakePrompt = Callable[[str, int], SummaryPrompt]
"""Builds the prompt for a conversation text and an output budget."""


@dataclass(frozen=True, slots=True)
class SummaryWindow:
    """The summariser's context window and the tokenizer that measures prompts for it."""

    tokens: int
    count: Count

    @property
    def usable(self) -> int:
        """Tokens a prompt plus its output budget may take."""
        return self.tokens - max(MIN_MARGIN, int(self.tokens * SAFETY_SHARE))

    def prompt_tokens(self, prompt: SummaryPrompt) -> int:
        return self.count(prompt.system) + self.count(prompt.user) + prompt.max_tokens

    def fits(self, prompt: SummaryPrompt) -> bool:
        return self.prompt_tokens(prompt) <= self.usable


@dataclass(frozen=True, slots=True)
class Chunk:
    end: int
    """Index (exclusive) of the chunk's end in the history; the message there
    (if any) is a valid cut point."""
    conversation: str
    """The serialised messages of the chunk, possibly truncated."""
    truncated: bool


def fit_file_lists(files: FileLists, window: SummaryWindow) -> FileLists:
    """The file lists shown in a chunked prompt: at most an eighth of the window,
    with a last entry saying how many are not listed (the checkpoint keeps
    them all; the prompt only tells the summariser not to repeat them)."""
    room = window.tokens // FILE_LISTS_DIVISOR
    total = len(files.read) + len(files.modified)
    tokens = window.count(render_file_lists(files))
    share = 1.0
    shown = files
    while tokens > room and total:
        share *= min(room / tokens, 0.9)
        read = files.read[: int(len(files.read) * share)]
        modified = files.modified[: int(len(files.modified) * share)]
        left = total - len(read) - len(modified)
        note = f"[ctxwarden: {left} more files not listed]"
        shown = FileLists(
            (*read, note) if files.read else (), (*modified, note) if files.modified else ()
        )
        tokens = window.count(render_file_lists(shown))
        if not read and not modified:
            break
    return shown


def truncate_middle(text: str, room: int, count: Count) -> tuple[str, bool]:
    """``text`` cut to at most ``room`` tokens by dropping its middle (the start
    and the end say most about a long turn); a marker tells how much is gone."""
    tokens = count(text)
    if tokens <= room:
        return text, False
    keep = len(text)
    while keep > 0:
        keep = min(keep - 1, int(keep * room / max(tokens, 1) * 0.95))
        keep = max(keep, 0)
        head = keep - keep // 2
        tail = keep // 2
        marker = TRUNCATED_MARKER.format(count=len(text) - keep)
        cut = text[:head] + marker + (text[len(text) - tail :] if tail else "")
        tokens = count(cut)
        if tokens <= room:
            return cut, True
    return TRUNCATED_MARKER.format(count=len(text)).strip(), True


def take_chunk(history: Sequence[Message], room: int, count: Count) -> Chunk:
    """The longest prefix of ``history`` whose serialised text fits ``room``
    tokens and ends before a cut point; the whole history when it all fits.
    When not even the first part fits, that part (up to the next cut point) is
    the chunk, truncated to ``room``."""
    parts: list[str] = []
    total = 0
    best = best_parts = 0
    over = -1
    produced = serialized_parts(history)
    for i, part in enumerate(produced):
        if i > 0 and is_cut_point(history[i]):
            best = i
            best_parts = len(parts)
        if part:
            parts.append(part)
            total += count(part) + (SEPARATOR_TOKENS if len(parts) > 1 else 0)
        if total > room:
            over = i
            break
    if over < 0:
        return Chunk(len(history), "\n\n".join(parts), False)
    if best > 0:
        return Chunk(best, "\n\n".join(parts[:best_parts]), False)
    end = _rest_of_part(history, over + 1, produced, parts)
    text, _ = truncate_middle("\n\n".join(parts), room, count)
    return Chunk(end, text, True)


def _rest_of_part(
    history: Sequence[Message], start: int, produced: Iterator[str], parts: list[str]
) -> int:
    """Consume ``produced`` up to the next cut point at or after ``start``,
    adding the texts to ``parts``; returns that cut point's index."""
    i = start
    for part in produced:
        if is_cut_point(history[i]):
            return i
        if part:
            parts.append(part)
        i += 1
    return len(history)


@dataclass(frozen=True, slots=True)
class HistoryStep:
    end: int
    """Index (exclusive) in the history of what this prompt covers."""
    prompt: SummaryPrompt
    conversation: str
    """The conversation text in ``prompt``."""
    room: int
    """Conversation tokens a chunk of this plan could hold (for estimates)."""


def _too_small(window: SummaryWindow, overhead: int) -> FailedPrecondition:
    return FailedPrecondition(
        f"the summariser's context window of {window.tokens} tokens cannot hold a summary "
        f"prompt: its fixed part (previous summary, pinned state, file lists, instructions "
        f"and output budget) alone takes {overhead} tokens, leaving less than {MIN_ROOM} for "
        "messages; use a summariser with a larger context window",
        reason=ErrorReason.SUMMARIZER_WINDOW_TOO_SMALL,
        metadata={"context_window": str(window.tokens), "fixed_tokens": str(overhead)},
    )


def history_step(
    history: Sequence[Message],
    window: SummaryWindow,
    make_prompt: MakePrompt,
    budget: int,
    make_chunk_prompt: MakePrompt | None = None,
) -> HistoryStep:
    """The prompt for the whole ``history`` when it fits the window with the
    usual ``budget`` (the same prompt as without a window); else the prompt for
    its first chunk (made with ``make_chunk_prompt``, e.g. with shortened file
    lists), with a budget of at most a quarter of the window."""
    overhead = window.prompt_tokens(make_prompt("", budget))
    room = window.usable - overhead
    if room >= MIN_ROOM:
        whole = take_chunk(history, room, window.count)
        if whole.end == len(history) and not whole.truncated:
            prompt = make_prompt(whole.conversation, budget)
            if window.fits(prompt):
                return HistoryStep(len(history), prompt, whole.conversation, room)
    make_prompt = make_chunk_prompt or make_prompt
    small = max(min(budget, window.tokens // CHUNK_SUMMARY_DIVISOR), 1)
    overhead = window.prompt_tokens(make_prompt("", small))
    room = window.usable - overhead
    if room < MIN_ROOM:
        raise _too_small(window, overhead)
    target = room
    for _ in range(8):
        chunk = take_chunk(history, target, window.count)
        prompt = make_prompt(chunk.conversation, small)
        excess = window.prompt_tokens(prompt) - window.usable
        if excess <= 0:
            return HistoryStep(chunk.end, prompt, chunk.conversation, room)
        # Counting parts one by one can differ from counting the joined text.
        target -= max(excess, math.ceil(target * 0.05))
        if target < 1:
            break
    raise _too_small(window, overhead)


def fit_turn_prefix(
    conversation: str, window: SummaryWindow, make_prompt: MakePrompt, budget: int
) -> SummaryPrompt:
    """The turn-prefix prompt, its conversation truncated in the middle when the
    prompt would not fit the window."""
    prompt = make_prompt(conversation, budget)
    if window.fits(prompt):
        return prompt
    overhead = window.prompt_tokens(make_prompt("", budget))
    room = window.usable - overhead
    if room < MIN_ROOM:
        raise _too_small(window, overhead)
    for _ in range(8):
        text, _ = truncate_middle(conversation, room, window.count)
        prompt = make_prompt(text, budget)
        excess = window.prompt_tokens(prompt) - window.usable
        if excess <= 0:
            return prompt
        room -= max(excess, math.ceil(room * 0.05))
        if room < 1:
            break
    raise _too_small(window, overhead)


def estimate_steps(rest: Sequence[Message], room: int) -> int:
    """Steps still needed after this one for ``rest`` (a rough estimate from
    the stored token counts)."""
    tokens = sum(m.token_count for m in rest)
    return math.ceil(tokens / max(room, 1)) if tokens else 0
