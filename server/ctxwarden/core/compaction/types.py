"""Value types shared by the planner, the summarisers and the service."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ctxwarden.core.messages import Message
from ctxwarden.core.stepwise import Steps


@dataclass(frozen=True, slots=True)
class SummaryPrompt:
    """One LLM request: a system prompt, one user message, an output budget."""

    system: str
    user: str
    max_tokens: int


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """Everything a summariser may use. LLM summarisers send ``prompt``;
    the extractive one reads the structured fields instead."""

    prompt: SummaryPrompt
    messages: Sequence[Message]
    previous_summary: str = ""
    pinned_state: str = ""
    read_files: Sequence[str] = ()
    modified_files: Sequence[str] = ()
    instructions: str = ""
    turn_prefix: bool = False
    """True when this request summarises the start of a split turn."""


class SummarizerError(Exception):
    """The summariser failed; ``retryable`` says whether trying later may work."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class Summarizer(Protocol):
    @property
    def name(self) -> str:
        """Recorded on the checkpoint, e.g. "openai:gpt-4o-mini" or "extractive"."""
        ...

    @property
    def max_output_tokens(self) -> int:
        """Upper bound on the summary length this summariser's model allows."""
        ...

    async def summarize(self, request: SummaryRequest) -> str: ...


@runtime_checkable
class SteppedSummarizer(Summarizer, Protocol):
    """A summariser that computes (no I/O) and can do so in steps (core.stepwise):
    the service runs those a slice at a time instead of awaiting ``summarize``,
    which would never let the event loop run."""

    def summary_steps(self, request: SummaryRequest) -> Steps[str]: ...


@dataclass(frozen=True, slots=True)
class FileLists:
    read: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FileToolNames:
    """Which tool calls count as file operations, and the argument holding the path."""

    read: tuple[str, ...] = ("read",)
    write: tuple[str, ...] = ("write",)
    edit: tuple[str, ...] = ("edit",)
    path_argument: str = "path"
    extra: dict[str, str] = field(default_factory=dict)
