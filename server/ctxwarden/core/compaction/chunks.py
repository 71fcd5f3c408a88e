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
from ctxwarden.core.compaction.fileops import render_file_lists
from ctxwarden.core.compaction.serialize import serialized_parts
from ctxwarden.core.compaction.types import FileLists, SummaryPrompt
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.messages import Message
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.stepwise import EVERY, Steps, finish

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
    return finish(take_chunk_steps(history, room, count))


def take_chunk_steps(history: Sequence[Message], room: int, count: Count) -> Steps[Chunk]:
    """``take_chunk`` in steps (core.stepwise)."""
    parts: list[str] = []
    total = 0
    best = best_parts = 0
    over = -1
    produced = serialized_parts(history)
    for i, part in enumerate(produced):
        if i % EVERY == EVERY - 1:
            yield
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


def _too_small(window: SummaryWindow, overhead: int) -> FailedPrecondition:
    return FailedPrecondition(
        f"the summariser's context window of {window.tokens} tokens cannot hold a summary "
        f"prompt: its fixed part (previous summary, pinned state, file lists, instructions "
        f"and output budget) alone takes {overhead} tokens, leaving less than {MIN_ROOM} for "
        "messages; use a summariser with a larger context window",
        reason=ErrorReason.SUMMARIZER_WINDOW_TOO_SMALL,
        metadata={"context_window": str(window.tokens), "fixed_tokens": str(overhead)},
    )


MakeChunkPrompt = Callable[[str, str, int], SummaryPrompt]
"""Builds a chunk's prompt for (conversation, running summary, output budget)."""
RUNNING_PLACEHOLDER = "."


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    """A history too long for one prompt, cut into chunks planned up front. Each
    chunk's prompt fits the window with any running summary of at most
    ``max_tokens`` tokens (``fit_summary`` cuts an answer to that)."""

    starts: tuple[int, ...]
    """Index in the history of each chunk's first message."""
    conversations: tuple[str, ...]
    max_tokens: int
    """Output budget of every chunk's summary, and the most a running summary may take."""


def chunk_budget(window: SummaryWindow, budget: int) -> int:
    return max(min(budget, window.tokens // CHUNK_SUMMARY_DIVISOR), 1)


def fits_whole(
    history: Sequence[Message], window: SummaryWindow, make_prompt: MakePrompt, budget: int
) -> SummaryPrompt | None:
    """The one prompt for all of ``history`` (the same as without a window) when
    it fits the window, else None. Reads only as far as the window allows."""
    return finish(fits_whole_steps(history, window, make_prompt, budget))


def fits_whole_steps(
    history: Sequence[Message], window: SummaryWindow, make_prompt: MakePrompt, budget: int
) -> Steps[SummaryPrompt | None]:
    """``fits_whole`` in steps (core.stepwise)."""
    room = window.usable - window.prompt_tokens(make_prompt("", budget))
    if room < MIN_ROOM:
        return None
    whole = yield from take_chunk_steps(history, room, window.count)
    if whole.end < len(history) or whole.truncated:
        return None
    prompt = make_prompt(whole.conversation, budget)
    return prompt if window.fits(prompt) else None


def plan_chunks(
    history: Sequence[Message],
    window: SummaryWindow,
    make_prompt: MakeChunkPrompt,
    budget: int,
    previous_summary: str,
) -> ChunkPlan:
    """Cut ``history`` into chunks whose prompts fit the window: the first with
    ``previous_summary``, each later one with a running summary of up to the
    chunk budget."""
    return finish(plan_chunks_steps(history, window, make_prompt, budget, previous_summary))


def plan_chunks_steps(
    history: Sequence[Message],
    window: SummaryWindow,
    make_prompt: MakeChunkPrompt,
    budget: int,
    previous_summary: str,
) -> Steps[ChunkPlan]:
    """``plan_chunks`` in steps (core.stepwise)."""
    small = chunk_budget(window, budget)
    starts: list[int] = []
    conversations: list[str] = []
    start = 0
    while start < len(history):
        running = previous_summary if not starts else RUNNING_PLACEHOLDER
        allowance = 0 if not starts else small
        overhead = window.prompt_tokens(make_prompt("", running, small)) + allowance
        room = window.usable - overhead
        if room < MIN_ROOM:
            raise _too_small(window, overhead)
        rest = history[start:]
        target = room
        for _ in range(8):
            chunk = yield from take_chunk_steps(rest, target, window.count)
            used = window.prompt_tokens(make_prompt(chunk.conversation, running, small))
            excess = used + allowance - window.usable
            if excess <= 0:
                break
            # Counting parts one by one can differ from counting the joined text.
            target -= max(excess, math.ceil(target * 0.05))
            if target < 1:
                raise _too_small(window, overhead)
        else:
            raise _too_small(window, overhead)
        starts.append(start)
        conversations.append(chunk.conversation)
        start += chunk.end
        yield
    return ChunkPlan(tuple(starts), tuple(conversations), small)


def fit_summary(text: str, max_tokens: int, count: Count) -> str:
    """A running summary cut to ``max_tokens`` (its end goes, with a marker), so
    the next chunk's prompt still fits."""
    if count(text) <= max_tokens:
        return text
    marker = "\n\n[ctxwarden: running summary trimmed to fit the summariser's window]"
    keep = len(text)
    while keep > 0:
        keep = int(keep * 0.9)
        candidate = text[:keep].rstrip() + marker
        if count(candidate) <= max_tokens:
            return candidate
    return marker.strip()


def fit_prompt(
    conversation: str, window: SummaryWindow, make_prompt: Callable[[str], SummaryPrompt]
) -> SummaryPrompt:
    """The prompt for ``conversation``, truncated in the middle when the prompt
    would not fit the window."""
    prompt = make_prompt(conversation)
    if window.fits(prompt):
        return prompt
    overhead = window.prompt_tokens(make_prompt(""))
    room = window.usable - overhead
    if room < MIN_ROOM:
        raise _too_small(window, overhead)
    for _ in range(8):
        text, _ = truncate_middle(conversation, room, window.count)
        prompt = make_prompt(text)
        excess = window.prompt_tokens(prompt) - window.usable
        if excess <= 0:
            return prompt
        room -= max(excess, math.ceil(room * 0.05))
        if room < 1:
            break
    raise _too_small(window, overhead)


def fit_turn_prefix(
    conversation: str, window: SummaryWindow, make_prompt: MakePrompt, budget: int
) -> SummaryPrompt:
    """The turn-prefix prompt, its conversation truncated in the middle when the
    prompt would not fit the window."""
    return fit_prompt(conversation, window, lambda text: make_prompt(text, budget))
