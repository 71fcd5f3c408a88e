"""Long-term memory: durable facts about a user or a project, and the budgeted
block of them a session's model input carries.

Memory is not session context: it spans sessions and enters one only through
the session's memory block, selected here (pure, deterministic) and frozen with
the session until its next compaction or an explicit refresh, so the input
keeps its stable prefix.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ctxwarden.core.messages import ContentBlock, Message, Role

MEMORY_METADATA_KEY = "ctxwarden.memory"
MEMORY_PREAMBLE = (
    "Long-term memory: durable facts about the user and the project, kept across sessions."
)
MAX_MEMORY_TEXT_BYTES = 16 * 1024
MAX_MEMORY_LABELS = 64
MAX_CANDIDATES = 1000
"""Memories a selection considers at most (the ranker's input, newest first)."""


class MemoryState(enum.IntEnum):
    ACTIVE = 1
    """Seen by the sessions of its scope."""
    PROPOSED = 2
    """Suggested by a compaction; seen by no session until made ACTIVE."""


class MemoryWrite(enum.IntEnum):
    """What a session's compactions do with durable facts (policy.memory_write)."""

    OFF = 1
    PROPOSE = 2
    AUTO = 3


@dataclass(frozen=True, slots=True)
class Memory:
    memory_id: str
    tenant_id: str
    text: str
    user_id: str = ""
    project_id: str = ""
    key: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    pinned: bool = False
    state: MemoryState = MemoryState.ACTIVE
    create_time_us: int = 0
    update_time_us: int = 0
    revision: int = 1
    source_session_id: str = ""

    @property
    def etag(self) -> str:
        return f'"{self.revision}"'


def visible_to(memory: Memory, user_id: str, project_id: str) -> bool:
    """A session sees a memory when each of the memory's non-empty scope fields
    equals the session's (a user's memory without a project follows the user
    into every project; a project's without a user is seen by all its users)."""
    if not memory.user_id and not memory.project_id:
        return False
    return memory.user_id in ("", user_id) and memory.project_id in ("", project_id)


@dataclass(frozen=True, slots=True)
class MemoryBlock:
    """The frozen block a session carries: its text and the memories in it."""

    text: str = ""
    memory_ids: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.text)


EMPTY_BLOCK = MemoryBlock()


class MemoryRanker(Protocol):
    """Orders candidate memories, most relevant first. The default is recency
    and pin; a relevance ranker (embeddings of the session's recent turns, say)
    plugs in here. It must be deterministic: equal inputs, equal order."""

    def rank(self, memories: Sequence[Memory], context: str) -> Sequence[Memory]: ...


class RecencyRanker:
    """Pinned first, then the most recently updated; ties by memory_id."""

    def rank(self, memories: Sequence[Memory], context: str) -> Sequence[Memory]:
        return sorted(memories, key=lambda m: (not m.pinned, -m.update_time_us, m.memory_id))


DEFAULT_RANKER: MemoryRanker = RecencyRanker()


def memory_line(memory: Memory) -> str:
    """One memory as a list item; continuation lines are indented."""
    text = memory.text.strip().replace("\r\n", "\n").replace("\n", "\n  ")
    return f"- {memory.key}: {text}" if memory.key else f"- {text}"


def _wrap(lines: str) -> str:
    return f"{MEMORY_PREAMBLE}\n\n<memory>\n{lines}\n</memory>"


def block_text(memories: Sequence[Memory]) -> str:
    if not memories:
        return ""
    return _wrap("\n".join(memory_line(m) for m in memories))


def block_message(text: str) -> Message:
    """The block as the model sees it: a user message right after the system prompt."""
    return Message(
        role=Role.USER,
        content=(ContentBlock.of_text(text),),
        metadata={MEMORY_METADATA_KEY: "1"},
    )


def select_block(
    memories: Sequence[Memory],
    budget: int,
    count: Callable[[str], int],
    count_text: Callable[[str], int],
    *,
    user_id: str,
    project_id: str,
    ranker: MemoryRanker = DEFAULT_RANKER,
    context: str = "",
) -> MemoryBlock:
    """The block for a session: its visible ACTIVE memories in ranker order.

    Each memory costs the tokens of its line (``count_text``); the block's
    wrapper (preamble, tags, message framing: ``count`` of a block's text as
    the session charges it) is paid once. Memories are taken in rank order
    while the total fits ``budget``; one that does not fit is skipped, so a
    smaller later one may still go in. The finished block is then counted
    exactly, and the lowest-ranked memories are dropped until it fits (a
    tokenizer may count a whole a little differently from its parts). Linear in
    the candidates' text, not quadratic."""
    if budget <= 0:
        return EMPTY_BLOCK
    eligible = [
        m
        for m in memories
        if m.state is MemoryState.ACTIVE and m.text.strip() and visible_to(m, user_id, project_id)
    ]
    chosen: list[Memory] = []
    used = wrapper_tokens(count)
    for memory in ranker.rank(eligible, context):
        cost = line_tokens(memory, count_text)
        if used + cost <= budget:
            chosen.append(memory)
            used += cost
    while chosen and count(block_text(chosen)) > budget:
        chosen.pop()
    return MemoryBlock(block_text(chosen), tuple(m.memory_id for m in chosen))


def wrapper_tokens(count: Callable[[str], int]) -> int:
    return count(_wrap(""))


def line_tokens(memory: Memory, count_text: Callable[[str], int]) -> int:
    return count_text(memory_line(memory) + "\n")


# -- durable facts in compaction summaries ----------------------------------------

DURABLE_FACTS_HEADING = "## Durable facts about the user/project"
DURABLE_FACTS_INSTRUCTIONS = f"""

Finally, add this section at the end (leave it out when there is nothing durable):

{DURABLE_FACTS_HEADING}
- [user] A fact about the user that will still hold in later sessions
- [project] A fact about the project that will still hold in later sessions

Only lasting preferences, decisions and conventions belong here, not the task's progress."""


@dataclass(frozen=True, slots=True)
class DurableFact:
    text: str
    project_scope: bool = False
    key: str = ""


def split_durable_facts(summary: str) -> tuple[str, tuple[DurableFact, ...]]:
    """The summary without its durable-facts section, and the facts it listed.

    The section runs from its heading to the next heading (or the end); each
    "- " item is a fact, "[project]" marks a project fact, "[user]" (or
    nothing) a user fact. A summary without the heading is returned as it is.
    """
    lines = summary.split("\n")
    start = next(
        (
            i
            for i, line in enumerate(lines)
            if line.strip().lower() == DURABLE_FACTS_HEADING.lower()
        ),
        None,
    )
    if start is None:
        return summary, ()
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("#")),
        len(lines),
    )
    facts: list[DurableFact] = []
    for line in lines[start + 1 : end]:
        item = line.strip()
        if not item.startswith(("- ", "* ")):
            continue
        text = item[2:].strip()
        project = False
        lowered = text.lower()
        if lowered.startswith("[project]"):
            project, text = True, text[len("[project]") :].strip()
        elif lowered.startswith("[user]"):
            text = text[len("[user]") :].strip()
        if text:
            facts.append(DurableFact(text, project))
    rest = "\n".join(lines[:start] + lines[end:]).strip()
    return rest, tuple(facts)
