"""What the program puts before a session's kept messages: the frozen memory
block (core.memory), then the latest checkpoint's summary, each with its tokens."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ctxwarden.core.memory import block_message
from ctxwarden.core.messages import Message
from ctxwarden.core.session import Checkpoint, Session
from ctxwarden.core.summary import summary_message
from ctxwarden.core.tokens import CountingProfile


@dataclass(frozen=True, slots=True)
class ProgramPrefix:
    messages: tuple[Message, ...]
    """Memory block, then summary (either may be missing), token counts set."""
    summary: Message | None
    summary_tokens: int
    memory_tokens: int


def program_prefix(
    session: Session, checkpoint: Checkpoint | None, profile: CountingProfile
) -> ProgramPrefix:
    messages: list[Message] = []
    memory_tokens = summary_tokens = 0
    if session.memory:
        memory = block_message(session.memory.text)
        memory_tokens = profile.message(memory)
        messages.append(replace(memory, token_count=memory_tokens))
    summary: Message | None = None
    if checkpoint is not None and checkpoint.summary:  # not a first clearing
        summary = summary_message(checkpoint, session.pinned_state)
        summary_tokens = profile.message(summary)
        summary = replace(summary, token_count=summary_tokens)
        messages.append(summary)
    return ProgramPrefix(tuple(messages), summary, summary_tokens, memory_tokens)
