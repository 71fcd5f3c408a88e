"""A restore or replay built a slice at a time is the very context built in one go,
and its slices do not count toward the database timeout."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from ctxwarden.core.content import ContentKind
from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason
from ctxwarden.core.session import ContextPolicy, Session
from ctxwarden.core.tokens import HeuristicTokenizer
from ctxwarden.service.slices import session_context
from ctxwarden.util import loop_slices

TOK = HeuristicTokenizer()


def _history(n: int) -> list[Message]:
    out = []
    for i in range(n):
        step = i % 5
        if step == 0:
            m = Message(role=Role.USER, content=(ContentBlock.of_text(f"ask {i} " * 5),))
        elif step == 1:
            call = ContentBlock(
                ContentKind.TOOL_CALL, tool_call_id=f"c{i}", tool_name="read", arguments_json="{}"
            )
            m = Message(role=Role.ASSISTANT, content=(call,))
        elif step == 2:
            m = Message(role=Role.TOOL_RESULT, tool_call_id=f"c{i - 1}",
                        content=(ContentBlock.of_text("out " * 30),))  # fmt: skip
        elif step == 3 and i % 15 == 3:
            m = Message(role=Role.ASSISTANT, stop_reason=StopReason.ERROR, error_message="x")
        else:
            m = Message(role=Role.ASSISTANT, content=(ContentBlock.of_text(f"done {i}"),))
        out.append(replace(m, seq=i + 1, token_count=7, counted_with="old"))
    return out


@pytest.mark.parametrize("keep_tool_results", [0, 2])
@pytest.mark.parametrize("recount", [False, True])
async def test_sliced_equals_whole(keep_tool_results: int, recount: bool) -> None:
    session = Session(
        session_id="s",
        system_prompt="sys",
        last_seq=1200,
        policy=ContextPolicy(keep_tool_results=keep_tool_results),
    )
    kept = _history(1200)
    whole = SessionContext(session, None, kept, TOK, recount=recount)
    sliced = await session_context(session, None, kept, TOK, recount=recount)
    assert sliced.model_input(100) == whole.model_input(100)
    assert sliced.model_input(100).digests == whole.model_input(100).digests
    assert [e.token_count for e in sliced.entries] == [e.token_count for e in whole.entries]


def _work(x: int) -> int:
    """About a millisecond of CPU (decoding a row of a big restore, say)."""
    deadline = time.perf_counter() + 0.001
    while time.perf_counter() < deadline:
        x += 1
    return x


async def test_sliced_work_does_not_count_toward_the_database_timeout() -> None:
    """runtime.db's timeout is for a database that does not answer: decoding
    rows a slice at a time (letting other calls run between) is neither."""
    async with asyncio.timeout(0.05) as deadline:
        with loop_slices.excluding(deadline):
            out = await loop_slices.mapped(_work, range(200))  # ~0.2 s, in slices
    assert len(out) == 200
    with pytest.raises(TimeoutError):  # the same work, not excluded: the timeout fires
        async with asyncio.timeout(0.05):
            await loop_slices.mapped(_work, range(200))
