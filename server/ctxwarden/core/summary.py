"""The summary of compacted history, as the model sees it."""

from __future__ import annotations

from ctxwarden.core.compaction.fileops import render_file_lists
from ctxwarden.core.compaction.planner import TRIMMED_MARKER
from ctxwarden.core.compaction.types import FileLists
from ctxwarden.core.messages import ContentBlock, Message, Role
from ctxwarden.core.session import Checkpoint
from ctxwarden.core.tokens import Tokenizer

SUMMARY_PREAMBLE = (
    "The conversation history before this point was compacted into the following summary:"
)
SUMMARY_METADATA_KEY = "ctxwarden.summary"
PRESERVED_HEADING = "Kept from the compacted history (the summary lost these):"


def summary_text(checkpoint: Checkpoint, pinned_state: str) -> str:
    """The summary as the model sees it: the summariser's text plus what the
    program keeps itself (file lists, pinned task state)."""
    parts = [f"{SUMMARY_PREAMBLE}\n\n<summary>\n{checkpoint.carried_summary}\n</summary>"]
    files = render_file_lists(FileLists(checkpoint.read_files, checkpoint.modified_files))
    if files:
        parts.append(files)
    if checkpoint.preserved_anchors:  # policy.preserve_lost_anchors (core.anchor_report)
        kept = f"{PRESERVED_HEADING}\n{checkpoint.preserved_anchors}"
        pinned_state = f"{pinned_state}\n\n{kept}" if pinned_state else kept
    if pinned_state:
        parts.append(f"<pinned-state>\n{pinned_state}\n</pinned-state>")
    return "\n\n".join(parts)


def summary_message(checkpoint: Checkpoint, pinned_state: str = "") -> Message:
    return Message(
        role=Role.USER,
        content=(ContentBlock.of_text(summary_text(checkpoint, pinned_state)),),
        metadata={SUMMARY_METADATA_KEY: checkpoint.compaction_id},
    )


def trim_summary(text: str, budget: int, tokenizer: Tokenizer) -> tuple[str, bool]:
    """Cut a summary to at most ``budget`` tokens, with a marker."""
    if tokenizer.count(text) <= budget:
        return text, False
    keep = len(text)
    while keep > 0:
        keep = int(keep * 0.9)
        candidate = text[:keep].rstrip() + TRIMMED_MARKER
        if tokenizer.count(candidate) <= budget:
            return candidate, True
    return TRIMMED_MARKER.strip(), True
