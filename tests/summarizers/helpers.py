"""Small builders shared by the summariser tests."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwarden.core.compaction.types import SummaryPrompt, SummaryRequest
from ctxwarden.core.messages import Message

SYSTEM = "You write context checkpoints."
USER = "<conversation>\n[User]: fix the bug\n</conversation>\n\nSummarise."


def request(
    *,
    system: str = SYSTEM,
    user: str = USER,
    max_tokens: int = 1024,
    messages: Sequence[Message] = (),
) -> SummaryRequest:
    return SummaryRequest(prompt=SummaryPrompt(system, user, max_tokens), messages=messages)


class SleepRecorder:
    """Stands in for asyncio.sleep: records the waits, does not wait."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
