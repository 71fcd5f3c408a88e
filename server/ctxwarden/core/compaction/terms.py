"""What a committed plan must agree to: the part of a Plan kept between
PrepareCompaction and CommitCompaction (the messages and prompts are not)."""

from __future__ import annotations

from dataclasses import dataclass

from ctxwarden.core.compaction.planner import Plan
from ctxwarden.core.session import CompactionTrigger


@dataclass(frozen=True, slots=True)
class PlanTerms:
    first_kept_seq: int
    split_turn: bool
    tokens_before: int
    previous_summary: str
    read_files: tuple[str, ...]
    modified_files: tuple[str, ...]
    base_compaction_id: str
    """The checkpoint the plan was made on: a commit on another one is stale."""
    covered_digest: str
    """Fingerprint of the covered messages: a rollback since makes the plan stale."""
    at_seq: int
    history_max_tokens: int
    """Budget of the history summary (0: no history to summarise)."""
    prefix_max_tokens: int
    """Budget of the split turn's prefix summary (0: no split turn)."""
    has_history: bool
    trigger: CompactionTrigger
    chunk_seqs: tuple[int, ...] = ()
    """A chunked compaction: the seq of each chunk's first message (empty: one prompt)."""
    history_end_seq: int = 0
    """Seq after the last summarised history message (the end of the last chunk)."""
    step: int = 1
    running_summary: str = ""
    """The summary so far, updated by the next step's prompt."""
    chunk_max_tokens: int = 0
    context_window: int = 0
    instructions: str = ""
    """Carried to the next step's prompt."""

    @property
    def step_count(self) -> int:
        return max(len(self.chunk_seqs), 1)

    @property
    def final_step(self) -> bool:
        """Committing this plan completes the compaction (no next step)."""
        return self.step >= self.step_count

    @classmethod
    def of(cls, plan: Plan, trigger: CompactionTrigger) -> PlanTerms:
        history, prefix = plan.history_prompt, plan.turn_prefix_prompt
        chunks = plan.chunks
        return cls(
            first_kept_seq=plan.first_kept_seq,
            split_turn=plan.split_turn,
            tokens_before=plan.tokens_before,
            previous_summary=plan.previous_summary,
            read_files=tuple(plan.files.read),
            modified_files=tuple(plan.files.modified),
            base_compaction_id=plan.base_compaction_id,
            covered_digest=plan.covered_digest,
            at_seq=plan.at_seq,
            history_max_tokens=history.max_tokens if history else 0,
            prefix_max_tokens=prefix.max_tokens if prefix else 0,
            has_history=history is not None,
            trigger=trigger,
            chunk_seqs=tuple(plan.history[i].seq for i in chunks.starts) if chunks else (),
            history_end_seq=plan.history[-1].seq + 1 if plan.history else 0,
            chunk_max_tokens=chunks.max_tokens if chunks else 0,
            context_window=plan.context_window,
            instructions=plan.instructions,
        )
