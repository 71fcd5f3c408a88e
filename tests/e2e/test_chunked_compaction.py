"""A 100,000-message session compacted through a summariser whose window is
32k tokens: by the server's summariser (Compact) and by the agent step by step
(PrepareCompaction, then CommitCompaction until no next_plan). Every prompt
must fit the window (the fake provider refuses one that does not, with the
provider's own error), the steps must chain the running summary, and the
final checkpoint must keep exactly what the plan's first step said it would.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from ctxwarden.core.session import ContextPolicy, Session
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from tests.summarizers.windowed import WindowedProvider, last_tag
from tests.support.builders import assistant, result, user
from tests.support.seed import History, seed_session
from tests.support.server import ServerProcess

WINDOW = 32_768
MESSAGES = 100_000
BATCH = 1000
KEY_ENV = "CTXWARDEN_TEST_CHUNKED_KEY"
pytestmark = pytest.mark.large

HUGE_AT = 40_001
"""Seq of a user message longer than the whole window (shown truncated)."""


@pytest.fixture(scope="module")
def chunked(
    backend_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[WindowedProvider, pb_grpc.ContextServiceStub]]:
    os.environ[KEY_ENV] = "sk-test-chunked"
    fake = WindowedProvider("openai", context_window=WINDOW)
    with fake:
        server = ServerProcess(
            backend_url,
            log_dir=Path(tmp_path_factory.mktemp("chunked-logs")),
            extra_args=[
                "--summarizer",
                "openai",
                "--summarizer-base-url",
                fake.base_url,
                "--summarizer-model",
                "gpt-4o-mini",
                "--summarizer-api-key-env",
                KEY_ENV,
                "--summarizer-context-window",
                str(WINDOW),
                # The first call restores 100,000 messages that no checkpoint
                # shortens yet: O(history) by nature, past the default 5 s bound.
                "--db-timeout",
                "120",
            ],
        )
        server.start()
        try:
            with grpc.insecure_channel(server.target) as ch:
                yield fake, pb_grpc.ContextServiceStub(ch)
        finally:
            server.stop()


def huge_text() -> str:
    return "HUGE-START " + " ".join(f"word{i}" for i in range(30_000)) + " HUGE-END"


def message(seq: int) -> m.Message:
    """Message ``seq`` of the session: turns of user, assistant call, result,
    assistant answer, each tagged ``<mSEQ>`` so a summary can say what it saw."""
    tag = f"<m{seq}>"
    if seq == HUGE_AT:
        return user(f"{tag} {huge_text()}")
    match seq % 4:
        case 1:
            return user(f"{tag} please look at item {seq}")
        case 2:
            path = f"src/f{seq % 64}.py"
            return assistant(f"{tag} reading", [(f"c{seq}", "read", {"path": path})])
        case 3:
            return result(f"c{seq - 1}", f"{tag} contents of f{(seq - 1) % 64}.py", name="read")
        case _:
            return assistant(f"{tag} item {seq} is fine")


HISTORY = History(MESSAGES, message, batch=BATCH)


def new_long_session(url: str) -> tuple[str, float]:
    """A session of MESSAGES messages, written as appends of BATCH through the
    store layer (tests/support/seed.py); (id, seconds taken)."""
    sid = f"chunk-{uuid.uuid4().hex[:10]}"
    policy = ContextPolicy(context_window=50_000_000, keep_recent_tokens=2000)
    started = time.monotonic()
    asyncio.run(
        seed_session(url, sid, Session(session_id="", model="gpt-4o", policy=policy), HISTORY)
    )
    return sid, time.monotonic() - started


def all_compactions(stub: pb_grpc.ContextServiceStub, sid: str) -> list[pb.Compaction]:
    out: list[pb.Compaction] = []
    token = ""
    while True:
        page = stub.ListCompactions(
            pb.ListCompactionsRequest(session_id=sid, page_size=1000, page_token=token)
        )
        out.extend(page.compactions)
        token = page.next_page_token
        if not token:
            return out[::-1]  # oldest first


def check_chain(fake: WindowedProvider, final: pb.Compaction, target: int) -> None:
    """Every prompt fitted, each history prompt updated the previous reply,
    and the last one covered the history up to the final cut."""
    assert fake.rejected == []
    assert all(a.prompt_tokens + a.max_tokens <= WINDOW for a in fake.answered)
    history = [a for a in fake.answered if "## Key Decisions" in a.user]
    assert len(history) >= 10
    for before, after in itertools.pairwise(history):
        assert before.reply in after.user  # the running summary is updated, not restarted
        assert int(last_tag(before.user)[1:]) < int(last_tag(after.user)[1:])
    assert history[-1].reply in final.summary
    assert int(last_tag(history[-1].user)[1:]) < target
    assert any("HUGE-START" in a.user and "HUGE-END" in a.user for a in history)
    assert all(a.user.count("word15000 ") == 0 for a in history)  # its middle is not shown


def test_compact_a_100k_message_session_in_chunks(
    chunked: tuple[WindowedProvider, pb_grpc.ContextServiceStub], backend_url: str
) -> None:
    fake, stub = chunked
    sid, append_seconds = new_long_session(backend_url)
    fake.answered.clear()
    started = time.monotonic()
    done = stub.Compact(pb.CompactRequest(session_id=sid), timeout=600)
    seconds = time.monotonic() - started
    print(
        f"\nappend {MESSAGES}: {append_seconds:.1f}s; Compact: {seconds:.1f}s, "
        f"{len(fake.answered)} summariser requests"
    )
    assert [c.compaction_id for c in all_compactions(stub, sid)] == [done.compaction_id]
    check_chain(fake, done, done.first_kept_seq)
    # The cut is the one keep_recent_tokens asks for: about 2,000 tokens kept.
    assert MESSAGES - 400 < done.first_kept_seq <= MESSAGES
    session = stub.GetSession(pb.GetSessionRequest(session_id=sid))
    assert session.context_tokens == done.tokens_after < done.tokens_before // 5


def ask(fake: WindowedProvider, prompt: pb.SummaryPrompt) -> str:
    """What an agent does with a plan's prompt: one Chat Completions call."""
    reply = httpx.post(
        f"{fake.base_url}/chat/completions",
        json={
            "model": "agent-llm",
            "messages": [
                {"role": "system", "content": prompt.system},
                {"role": "user", "content": prompt.user},
            ],
            "max_tokens": prompt.max_tokens,
        },
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


def test_agent_works_through_a_100k_message_plan_step_by_step(
    chunked: tuple[WindowedProvider, pb_grpc.ContextServiceStub], backend_url: str
) -> None:
    fake, stub = chunked
    sid, _ = new_long_session(backend_url)
    fake.answered.clear()
    started = time.monotonic()
    plan = stub.PrepareCompaction(
        pb.PrepareCompactionRequest(session_id=sid, summarizer_context_window=WINDOW)
    )
    target = plan.first_kept_seq
    assert plan.step == 1 and plan.step_count >= 10
    assert MESSAGES - 400 < target <= MESSAGES
    plans = [plan]
    while True:
        assert plan.summarizer_context_window == WINDOW
        assert plan.first_kept_seq == target and plan.step_count == plans[0].step_count
        summary = ask(fake, plan.history_prompt)
        # turn_prefix_prompt comes with the last step only (split_turn is the plan's).
        has_prefix = plan.HasField("turn_prefix_prompt")
        assert has_prefix == (plan.split_turn and plan.step == plan.step_count)
        prefix = ask(fake, plan.turn_prefix_prompt) if has_prefix else ""
        done = stub.CommitCompaction(
            pb.CommitCompactionRequest(
                session_id=sid,
                plan_id=plan.plan_id,
                summary=summary,
                turn_prefix_summary=prefix,
            )
        )
        if not done.HasField("next_plan"):
            assert plan.step == plan.step_count and done.compaction_id
            break
        assert not done.compaction_id  # nothing is stored before the last step
        nxt = done.next_plan
        assert nxt.step == plan.step + 1
        assert nxt.summarized_from_seq == plan.summarized_to_seq + 1
        assert nxt.previous_summary == summary
        plan = nxt
        plans.append(plan)
    seconds = time.monotonic() - started
    print(f"\nagent path: {len(plans)} steps in {seconds:.1f}s")
    assert done.first_kept_seq == target
    check_chain(fake, done, target)
    assert [c.compaction_id for c in all_compactions(stub, sid)] == [done.compaction_id]
    assert done.summarizer == "agent"
    # A retried commit of the last step answers the same checkpoint.
    again = stub.CommitCompaction(
        pb.CommitCompactionRequest(session_id=sid, plan_id=plan.plan_id, summary="other")
    )
    assert again.compaction_id == done.compaction_id
