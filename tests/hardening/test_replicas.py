"""Two replicas on one database: neither serves nor writes on state the other changed.

Every mutation advances the session's version; every write compares-and-sets it
and every read that serves the effective context verifies it, so a replica that
holds a stale copy reloads (or answers ABORTED) instead of serving it.
"""

from __future__ import annotations

from ctxwarden.core.messages import Usage
from ctxwarden.core.session import Session
from ctxwarden.service.manager import SessionManager
from tests.support.inproc import (
    FakeClock,
    assistant_msg,
    new_session,
    replica,
    tool_result_msg,
    user_msg,
)


async def _texts(m: SessionManager, sid: str) -> list[str]:
    view = await m.build_model_input(sid, 0)
    return [msg.text for msg in view.messages]


async def _seed(a: SessionManager, b: SessionManager, n: int = 4) -> str:
    sid = await new_session(a, system_prompt="prompt v1")
    for i in range(1, n + 1):
        await a.append(sid, [user_msg(f"q{i}") if i % 2 else assistant_msg(f"a{i}")], None, None)
    assert len(await _texts(b, sid)) == n  # hot on B now
    return sid


async def test_rollback_on_a_is_seen_by_b(backend_url: str) -> None:
    async with replica(backend_url) as a, replica(backend_url) as b:
        sid = await _seed(a, b)
        await a.rollback(sid, 2, "", None)
        assert await _texts(b, sid) == ["q1", "a2"]
        appended = await b.append(sid, [user_msg("q5")], None, None)
        assert appended.last_seq == 5
        assert await _texts(b, sid) == ["q1", "a2", "q5"]
        assert await _texts(a, sid) == ["q1", "a2", "q5"]


async def test_b_stores_a_result_for_a_call_a_rolled_back_as_an_orphan(backend_url: str) -> None:
    """B's copy still holds the call, but B plans on the current session: the
    result is stored after the rollback, its call stays rolled back, and the
    views of both leave the result out."""
    async with replica(backend_url) as a, replica(backend_url) as b:
        sid = await _seed(a, b, 2)
        call = assistant_msg("reading", calls=(("call-9", "read", '{"path": "x"}'),))
        await a.append(sid, [call], None, None)
        await b.build_model_input(sid, 0)  # B holds the call
        await a.rollback(sid, 2, "", None)
        stored = await b.append(sid, [tool_result_msg("call-9", "content")], None, None)
        assert [m.seq for m in stored.messages] == [4]
        for m in (a, b):
            view = await m.build_model_input(sid, 0)
            assert [msg.text for msg in view.messages] == ["q1", "a2"]
            assert [(n.code, n.seq) for n in view.notices] == [("ORPHANED_TOOL_RESULT_OMITTED", 4)]


async def test_settings_changed_on_a_are_served_by_b(backend_url: str) -> None:
    async with replica(backend_url) as a, replica(backend_url) as b:
        sid = await _seed(a, b)
        await a.update_session(
            Session(session_id=sid, system_prompt="prompt v2"), ["system_prompt"], ""
        )
        view = await b.build_model_input(sid, 0)
        assert view.session.system_prompt == "prompt v2"
        assert (await b.get_session(sid)).system_prompt == "prompt v2"


async def test_compaction_on_a_is_served_by_b_and_not_overwritten(backend_url: str) -> None:
    async with replica(backend_url) as a, replica(backend_url) as b:
        sid = await _seed(a, b, 12)
        plan = await a.prepare_compaction(sid, "", 1)
        checkpoint, _ = await a.commit_compaction(sid, plan.plan_id, "## Goal\nsummary", "prefix")
        assert checkpoint is not None
        view = await b.build_model_input(sid, 0)
        assert view.compaction_id == checkpoint.compaction_id
        assert view.first_kept_seq == checkpoint.first_kept_seq
        after = await b.append(sid, [user_msg("more")], None, None)
        stored = await a.store.sessions.get(sid)
        assert stored is not None
        assert stored.context_tokens == after.context_tokens
        # B's input starts with A's summary and keeps only what A's cut kept.
        texts = await _texts(b, sid)
        assert view.messages[0].metadata["ctxwarden.summary"] == checkpoint.compaction_id
        assert len(texts) == 1 + (12 - checkpoint.first_kept_seq + 1) + 1


async def test_a_stale_rollback_on_b_rolls_back_what_a_appended(backend_url: str) -> None:
    async with replica(backend_url) as a, replica(backend_url) as b:
        sid = await _seed(a, b)
        await a.append(sid, [assistant_msg(failed=True)], None, None)
        result = await b.rollback(sid, None, "", None)
        assert result.rolled_back_seqs == (5,)
        assert result.reason != "nothing to roll back"


async def test_concurrent_appends_on_two_replicas_lose_nothing(backend_url: str) -> None:
    async with replica(backend_url) as a, replica(backend_url) as b:
        sid = await _seed(a, b, 2)
        for i in range(6):
            writer = a if i % 2 else b
            await writer.append(sid, [user_msg(f"w{i}")], None, None)
        texts = await _texts(a, sid)
        assert texts == await _texts(b, sid)
        assert texts == ["q1", "a2", *(f"w{i}" for i in range(6))]


async def test_usage_reported_on_a_is_not_lost_by_b(backend_url: str) -> None:
    async with replica(backend_url) as a, replica(backend_url) as b:
        sid = await _seed(a, b, 2)
        usage = Usage(input_tokens=900, output_tokens=10)
        await a.append(sid, [assistant_msg("answer", usage=usage)], None, None)
        view = await b.build_model_input(sid, 0)
        assert view.tokens.anchored_total_tokens > 0


async def test_a_configured_staleness_bound_is_the_longest_b_serves_a_stale_copy(
    backend_url: str,
) -> None:
    clock = FakeClock()
    async with (
        replica(backend_url) as a,
        replica(backend_url, clock, max_read_staleness_seconds=2.0) as b,
    ):
        sid = await _seed(a, b)
        await a.rollback(sid, 2, "", None)
        clock.now += 1.9
        assert len(await _texts(b, sid)) == 4  # within the documented bound: not checked
        clock.now += 0.2
        assert await _texts(b, sid) == ["q1", "a2"]
        # Writes never rely on the bound: they compare-and-set the version.
        await a.append(sid, [user_msg("from a")], None, None)
        appended = await b.append(sid, [user_msg("from b")], None, None)
        assert appended.last_seq == 6  # seqs 3-4 stay stored, rolled back
        assert await _texts(a, sid) == ["q1", "a2", "from a", "from b"]
