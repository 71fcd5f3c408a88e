"""Planning a compaction and turning a summary into a checkpoint."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxwarden.core.compaction.chunks import (
    ChunkPlan,
    SummaryWindow,
    fit_file_lists,
    fit_turn_prefix,
    fits_whole_steps,
    plan_chunks_steps,
)
from ctxwarden.core.compaction.cut import CutPoint, find_cut_point
from ctxwarden.core.compaction.fileops import file_ops_steps
from ctxwarden.core.compaction.prompts import history_prompt, turn_prefix_prompt
from ctxwarden.core.compaction.serialize import serialize_messages, serialize_steps
from ctxwarden.core.compaction.types import FileLists, FileToolNames, SummaryPrompt
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.messages import Message
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Checkpoint
from ctxwarden.core.stepwise import Steps, in_one_go

SUMMARY_SHARE_OF_RESERVE = 0.8
TURN_PREFIX_SHARE = 0.5
TRIMMED_MARKER = "\n\n[ctxwarden: summary trimmed to fit the context budget]"
MIN_SUMMARY_TOKENS = 64


@dataclass(frozen=True, slots=True)
class Plan:
    """A planned compaction; everything needed to commit it later."""

    session_id: str
    first_kept_seq: int
    split_turn: bool
    tokens_before: int
    previous_summary: str
    history: tuple[Message, ...]
    turn_prefix: tuple[Message, ...]
    history_prompt: SummaryPrompt | None
    """None when nothing before the split turn needs summarising."""
    turn_prefix_prompt: SummaryPrompt | None
    files: FileLists
    base_compaction_id: str
    covered_digest: str
    at_seq: int
    pinned_state: str
    instructions: str
    chunks: ChunkPlan | None = None
    """Set when the history is too long for one prompt in the summariser's
    window: summarise it chunk by chunk (history_prompt is the first chunk's)."""
    context_window: int = 0
    """The summariser window the prompts fit (0: no limit)."""
    shown_files: FileLists | None = None
    """The file lists as shown in chunk prompts (shortened to fit), if chunked."""
    chunk_end_seq: int = 0
    """A step of a chunked compaction: the seq after its chunk's last message."""

    @property
    def summarized_from_seq(self) -> int:
        first = self.history or self.turn_prefix
        return first[0].seq if first else 0

    @property
    def summarized_to_seq(self) -> int:
        return (self.chunk_end_seq or self.first_kept_seq) - 1


def covered_digest(active: Sequence[Message], at_seq: int) -> str:
    """Fingerprint of the active messages up to ``at_seq``: a rollback changes it,
    later appends do not."""
    h = hashlib.sha256()
    for m in active:
        if m.seq <= at_seq:
            h.update(m.seq.to_bytes(8, "big"))
    return h.hexdigest()


def summary_budget(reserve_tokens: int, summarizer_limit: int) -> int:
    budget = int(SUMMARY_SHARE_OF_RESERVE * reserve_tokens)
    if summarizer_limit > 0:
        budget = min(budget, summarizer_limit)
    return max(budget, MIN_SUMMARY_TOKENS)


def plan_compaction_steps(
    *,
    session_id: str,
    active: Sequence[Message],
    checkpoint: Checkpoint | None,
    at_seq: int,
    tokens_before: int,
    keep_recent_tokens: int,
    reserve_tokens: int,
    summarizer_limit: int,
    pinned_state: str,
    instructions: str,
    file_tools: FileToolNames,
    durable_facts: bool = False,
    window: SummaryWindow | None = None,
) -> Steps[Plan]:
    """Choose the cut and build the prompts, in steps (core.stepwise: the
    history may be the whole of a long session). ``active`` is the kept history
    (from the current checkpoint's first_kept_seq), in seq order.

    With a ``window``, a history too long for one prompt is cut into chunks
    (``Plan.chunks``, see ctxwarden.core.compaction.chunks); one that fits is
    planned exactly as without a window.

    The steps are their own functions: the cut and the split (``_cut``), the
    prompts (``_prompt_maker``, ``_history_prompts``, ``_prefix_prompt``)."""
    cut, history, prefix = _cut(active, keep_recent_tokens)
    previous = FileLists(
        checkpoint.read_files if checkpoint else (), checkpoint.modified_files if checkpoint else ()
    )
    files = yield from file_ops_steps((*history, *prefix), previous, file_tools)
    previous_summary = checkpoint.carried_summary if checkpoint else ""
    budget = summary_budget(reserve_tokens, summarizer_limit)
    make = _prompt_maker(previous_summary, pinned_state, instructions, durable_facts)
    prompt, chunks, shown = yield from _history_prompts(
        history, window, files, budget, previous_summary, make
    )
    prefix_prompt = _prefix_prompt(prefix, window, budget) if cut.split_turn else None
    return Plan(
        session_id=session_id,
        first_kept_seq=active[cut.first_kept_index].seq,
        split_turn=cut.split_turn,
        tokens_before=tokens_before,
        previous_summary=previous_summary,
        history=history,
        turn_prefix=prefix,
        history_prompt=prompt,
        turn_prefix_prompt=prefix_prompt,
        files=files,
        base_compaction_id=checkpoint.compaction_id if checkpoint else "",
        covered_digest=covered_digest(active, at_seq),
        at_seq=at_seq,
        pinned_state=pinned_state,
        instructions=instructions,
        chunks=chunks,
        context_window=window.tokens if window is not None else 0,
        shown_files=shown,
    )


plan_compaction = in_one_go(plan_compaction_steps)
"""``plan_compaction_steps`` in one go."""


def _cut(
    active: Sequence[Message], keep_recent_tokens: int
) -> tuple[CutPoint, tuple[Message, ...], tuple[Message, ...]]:
    """The cut, the history it summarises and the split turn's prefix (if any)."""
    cut = find_cut_point(active, keep_recent_tokens)
    if cut.first_kept_index == 0:
        raise FailedPrecondition(
            "nothing to compact: the whole effective history fits in keep_recent_tokens "
            f"({keep_recent_tokens})",
            reason=ErrorReason.NOTHING_TO_COMPACT,
        )
    end = cut.turn_start_index if cut.split_turn else cut.first_kept_index
    prefix = tuple(active[end : cut.first_kept_index]) if cut.split_turn else ()
    return cut, tuple(active[:end]), prefix


MakePrompt = Callable[..., SummaryPrompt]
"""(conversation, max_tokens, file lists[, previous summary]) -> the history prompt."""


def _prompt_maker(
    previous_summary: str, pinned_state: str, instructions: str, durable_facts: bool
) -> MakePrompt:
    """``make(conversation, max_tokens, lists, summary=previous_summary)``: a history
    prompt with the compaction's fixed parts (a chunk's carries the summary so far)."""

    def make(
        conversation: str, max_tokens: int, lists: FileLists, summary: str = previous_summary
    ) -> SummaryPrompt:
        return history_prompt(
            conversation,
            previous_summary=summary,
            pinned_state=pinned_state,
            files=lists,
            instructions=instructions,
            max_tokens=max_tokens,
            durable_facts=durable_facts,
        )

    return make


def _history_prompts(
    history: Sequence[Message],
    window: SummaryWindow | None,
    files: FileLists,
    budget: int,
    previous_summary: str,
    make: MakePrompt,
) -> Steps[tuple[SummaryPrompt | None, ChunkPlan | None, FileLists | None]]:
    """The history prompt (None: no history), the chunks when it does not fit the
    window in one prompt, and the file lists shown then."""
    if not history:
        return None, None, None
    if window is None:
        conversation = yield from serialize_steps(history)
        return make(conversation, budget, files), None, None
    prompt = yield from fits_whole_steps(history, window, lambda c, b: make(c, b, files), budget)
    if prompt is not None:
        return prompt, None, None
    lists = fit_file_lists(files, window)
    chunks = yield from plan_chunks_steps(
        history, window, lambda c, summary, b: make(c, b, lists, summary), budget, previous_summary
    )
    return make(chunks.conversations[0], chunks.max_tokens, lists), chunks, lists


def _prefix_prompt(
    prefix: Sequence[Message], window: SummaryWindow | None, budget: int
) -> SummaryPrompt:
    """The prompt for the split turn's prefix, with its share of the budget."""
    prefix_budget = max(int(budget * TURN_PREFIX_SHARE), 1)
    conversation = serialize_messages(prefix)
    if window is not None:
        return fit_turn_prefix(conversation, window, _turn_prefix_maker, prefix_budget)
    return turn_prefix_prompt(conversation, max_tokens=prefix_budget)


def _turn_prefix_maker(conversation: str, max_tokens: int) -> SummaryPrompt:
    return turn_prefix_prompt(conversation, max_tokens=max_tokens)
