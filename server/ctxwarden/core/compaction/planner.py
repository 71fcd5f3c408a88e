"""Planning a compaction and turning a summary into a checkpoint."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from ctxwarden.core.compaction.cut import find_cut_point
from ctxwarden.core.compaction.fileops import collect_file_ops
from ctxwarden.core.compaction.prompts import history_prompt, turn_prefix_prompt
from ctxwarden.core.compaction.serialize import serialize_messages
from ctxwarden.core.compaction.types import FileLists, FileToolNames, SummaryPrompt
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.messages import Message
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Checkpoint

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

    @property
    def summarized_from_seq(self) -> int:
        first = self.history or self.turn_prefix
        return first[0].seq if first else 0

    @property
    def summarized_to_seq(self) -> int:
        return self.first_kept_seq - 1


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


def plan_compaction(
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
) -> Plan:
    """Choose the cut and build the prompts. ``active`` is the kept history
    (from the current checkpoint's first_kept_seq), in seq order.

    Long only by its keyword-only signature and the Plan it fills in; the steps
    are: cut, split into history and turn prefix, carry file lists, prompts."""
    cut = find_cut_point(active, keep_recent_tokens)
    if cut.first_kept_index == 0:
        raise FailedPrecondition(
            "nothing to compact: the whole effective history fits in keep_recent_tokens "
            f"({keep_recent_tokens})",
            reason=ErrorReason.NOTHING_TO_COMPACT,
        )
    end = cut.turn_start_index if cut.split_turn else cut.first_kept_index
    history = tuple(active[:end])
    prefix = tuple(active[end : cut.first_kept_index]) if cut.split_turn else ()
    previous = FileLists(
        checkpoint.read_files if checkpoint else (), checkpoint.modified_files if checkpoint else ()
    )
    files = collect_file_ops((*history, *prefix), previous, file_tools)
    previous_summary = checkpoint.carried_summary if checkpoint else ""
    budget = summary_budget(reserve_tokens, summarizer_limit)
    prompt = (
        history_prompt(
            serialize_messages(history),
            previous_summary=previous_summary,
            pinned_state=pinned_state,
            files=files,
            instructions=instructions,
            max_tokens=budget,
            durable_facts=durable_facts,
        )
        if history
        else None
    )
    prefix_prompt = (
        turn_prefix_prompt(
            serialize_messages(prefix), max_tokens=max(int(budget * TURN_PREFIX_SHARE), 1)
        )
        if cut.split_turn
        else None
    )
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
    )
