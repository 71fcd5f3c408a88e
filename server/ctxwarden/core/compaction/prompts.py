"""The prompts sent to a summariser (server-side or the agent's own LLM)."""

from __future__ import annotations

from ctxwarden.core.compaction.fileops import render_file_lists
from ctxwarden.core.compaction.types import FileLists, SummaryPrompt
from ctxwarden.core.memory import DURABLE_FACTS_INSTRUCTIONS

SYSTEM = (
    "You write context checkpoints for an AI agent whose conversation history is being "
    "shortened. Another model will continue the task from your summary alone, so keep every "
    "fact it needs to carry on. Do not continue the conversation, do not answer questions in "
    "it, and do not invent anything: output only the summary."
)

SECTIONS = """Use exactly these sections:

## Goal
What the user wants to achieve (several goals if the session covers several tasks).

## Constraints & Preferences
- Requirements, preferences and limits the user stated, or "(none)".

## Progress
### Done
- [x] Finished work, with concrete results.
### In Progress
- [ ] Work started but not finished.
### Blocked
- Problems that stop progress, or "(none)".

## Key Decisions
- **Decision**: why it was made.

## Next Steps
1. What should happen next, in order.

## Critical Context
- Exact file paths, names, commands, values and error messages needed to continue."""

NEW_SUMMARY = (
    "Summarise the conversation in <conversation> as a structured checkpoint for continuing "
    "the task (not a chat recap).\n\n" + SECTIONS
)

UPDATE_SUMMARY = (
    "<previous-summary> is the checkpoint written before; <conversation> holds only the "
    "messages since then. Write the updated checkpoint:\n"
    "- keep everything in the previous summary that is still true;\n"
    "- add the new progress, decisions and context;\n"
    "- move finished items from In Progress to Done;\n"
    "- refresh Next Steps to match the current state;\n"
    "- keep exact paths, names and error messages.\n\n" + SECTIONS
)

TURN_PREFIX = """<conversation> is the beginning of a turn that was too long to keep; the rest of \
the turn is kept verbatim after your summary. Summarise the beginning so the kept part makes \
sense:

## Original Request
What the user asked for in this turn.

## Early Progress
- Work done and decisions made in this part.

## Context for the Kept Part
- What the model needs to know to understand the messages that follow."""

PINNED_NOTE = (
    "The current task state in <pinned-state> is kept verbatim next to your summary by the "
    "program: use it to understand the task, but do not copy it into the summary."
)
FILES_NOTE = (
    "The file lists below are kept by the program and appended to the summary; do not repeat them."
)


def history_prompt(
    conversation: str,
    *,
    previous_summary: str,
    pinned_state: str,
    files: FileLists,
    instructions: str,
    max_tokens: int,
    durable_facts: bool = False,
) -> SummaryPrompt:
    """``durable_facts`` (a session whose policy writes memories) asks for the
    "Durable facts about the user/project" section too; without it the prompt
    is exactly the pi-compatible one."""
    parts = [f"<conversation>\n{conversation}\n</conversation>"]
    if previous_summary:
        parts.append(f"<previous-summary>\n{previous_summary}\n</previous-summary>")
    if pinned_state:
        parts.append(f"<pinned-state>\n{pinned_state}\n</pinned-state>\n{PINNED_NOTE}")
    lists = render_file_lists(files)
    if lists:
        parts.append(f"{lists}\n{FILES_NOTE}")
    parts.append(UPDATE_SUMMARY if previous_summary else NEW_SUMMARY)
    if durable_facts:
        parts[-1] += DURABLE_FACTS_INSTRUCTIONS
    if instructions:
        parts.append(f"Additional focus: {instructions}")
    return SummaryPrompt(SYSTEM, "\n\n".join(parts), max_tokens)


def turn_prefix_prompt(conversation: str, *, max_tokens: int) -> SummaryPrompt:
    user = f"<conversation>\n{conversation}\n</conversation>\n\n{TURN_PREFIX}"
    return SummaryPrompt(SYSTEM, user, max_tokens)
