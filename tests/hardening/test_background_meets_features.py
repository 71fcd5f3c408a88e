"""Background compaction against the other features, each while the summariser is busy.

A background compaction plans on the session as it is, summarises with the session
lock released, and commits against the plan's base. Whatever another call does to the
session in between must win: a rollback, an archive, a delete, a fork, an explicit
compaction. Each test blocks the summariser (``GatedSummarizer``), does the other
thing, lets the summariser answer and checks what is stored. In-process over a real
database and a real socket, as test_background_compaction.py; nothing waits on time.
"""

from __future__ import annotations

import grpc
import pytest

from ctxwarden.core.session import CompactionTrigger
from ctxwarden.service.manager import SessionManager
from ctxwarden.v1 import context_service_pb2 as pb
from tests.hardening.test_background_compaction import (
    POLICY,
    GatedSummarizer,
    async_stub,
    background_server,
    grow_past_soft_threshold,
    metric,
)
from tests.support.inproc import new_session, replica, user_msg

SUPERSEDED = "ctxwarden_background_compactions_superseded_total"
SUCCEEDED = "ctxwarden_background_compactions_succeeded_total"


async def summarising(m: SessionManager, summ: GatedSummarizer) -> tuple[str, int]:
    """A new session grown past its soft threshold, its background compaction now held
    in the summariser; (its ID, its last seq)."""
    sid = await new_session(m, policy=POLICY)
    last = await grow_past_soft_threshold(m, sid)
    await summ.entered.wait()
    return sid, last


def _seqs(view: pb.ModelInput) -> list[int]:
    return [m.seq for m in view.messages if m.seq]


async def test_a_rollback_meanwhile_wins_and_nothing_rolled_back_comes_back(
    backend_url: str,
) -> None:
    summ = GatedSummarizer()
    async with background_server(backend_url, summ) as (m, obs), async_stub(m) as stub:
        sid, _ = await summarising(m, summ)
        rolled = await stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid, to_seq=2))
        assert rolled.rolled_back_seqs
        summ.gate.set()
        await m.background.idle()
        page = await stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid))
        assert [c for c in page.compactions if not c.superseded] == []
        view = await stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
        assert view.compaction_id == "" and _seqs(view) == [1, 2]
        assert metric(obs, SUPERSEDED) == 1 and metric(obs, SUCCEEDED) == 0


async def test_an_archive_meanwhile_wins_and_the_archived_session_is_not_written(
    backend_url: str,
) -> None:
    summ = GatedSummarizer()
    async with background_server(backend_url, summ) as (m, obs), async_stub(m) as stub:
        sid, last = await summarising(m, summ)
        await stub.ArchiveSession(pb.ArchiveSessionRequest(session_id=sid))
        summ.gate.set()
        await m.background.idle()
        page = await stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid))
        assert list(page.compactions) == []  # read-only: the job wrote nothing
        view = await stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
        assert view.compaction_id == "" and _seqs(view) == list(range(1, last + 1))
        assert metric(obs, SUCCEEDED) == 0
        # Unarchived, it is an ordinary session again: the next growth compacts it.
        await stub.UnarchiveSession(pb.UnarchiveSessionRequest(session_id=sid))
        await m.append(sid, [user_msg("back again")], None, None)
        await m.background.idle()
        page = await stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid))
        assert [c.trigger for c in page.compactions] == [pb.COMPACTION_TRIGGER_BACKGROUND]


async def test_a_delete_meanwhile_wins_and_nothing_is_written_for_the_deleted_session(
    backend_url: str,
) -> None:
    summ = GatedSummarizer()
    async with background_server(backend_url, summ) as (m, obs), async_stub(m) as stub:
        sid, _ = await summarising(m, summ)
        await stub.DeleteSession(pb.DeleteSessionRequest(session_id=sid))
        summ.gate.set()
        await m.background.idle()
        for call in (
            stub.GetSession(pb.GetSessionRequest(session_id=sid)),
            stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert metric(obs, SUCCEEDED) == 0
        assert not m.background.pending(sid)


async def test_a_fork_meanwhile_keeps_the_history_it_was_made_of(backend_url: str) -> None:
    summ = GatedSummarizer()
    async with background_server(backend_url, summ) as (m, _obs), async_stub(m) as stub:
        sid, last = await summarising(m, summ)
        fork = await stub.ForkSession(pb.ForkSessionRequest(session_id=sid))
        summ.gate.set()
        await m.background.idle()
        # The source is compacted; the fork, made before that commit, is not: it shows
        # every message it inherited until its own growth compacts it.
        source = await stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid))
        assert [c.trigger for c in source.compactions] == [pb.COMPACTION_TRIGGER_BACKGROUND]
        forked = await stub.BuildModelInput(pb.BuildModelInputRequest(session_id=fork.session_id))
        assert forked.compaction_id == "" and _seqs(forked) == list(range(1, last + 1))
        compacted = await stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
        assert compacted.compaction_id == source.compactions[0].compaction_id


async def test_an_explicit_compaction_meanwhile_wins(backend_url: str) -> None:
    summ = GatedSummarizer()
    async with background_server(backend_url, summ) as (m, obs), async_stub(m) as stub:
        sid, _ = await summarising(m, summ)
        plan = await stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=sid))
        done = await stub.CommitCompaction(
            pb.CommitCompactionRequest(
                session_id=sid, plan_id=plan.plan_id, summary="the agent's own summary"
            )
        )
        summ.gate.set()
        await m.background.idle()
        page = await stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid))
        live = [c for c in page.compactions if not c.superseded]
        assert [c.compaction_id for c in live] == [done.compaction_id]
        assert metric(obs, SUPERSEDED) == 1 and metric(obs, SUCCEEDED) == 0


async def test_appends_on_another_replica_meanwhile_stay_kept(backend_url: str) -> None:
    """Replica A summarises; replica B (same database) appends. A's checkpoint keeps B's
    messages verbatim, and both replicas then show the same input."""
    summ = GatedSummarizer()
    async with background_server(backend_url, summ) as (a, _obs), replica(backend_url) as b:
        sid, crossed = await summarising(a, summ)
        for i in range(3):
            await b.append(sid, [user_msg(f"on replica B {i}")], None, None)
        summ.gate.set()
        await a.background.idle()
        checkpoints, _ = await a.list_compactions(sid, 10, "")
        assert [c.trigger for c in checkpoints] == [CompactionTrigger.BACKGROUND]
        kept_from = checkpoints[0].first_kept_seq
        assert 1 < kept_from <= crossed
        on_a, on_b = await a.build_model_input(sid, 0), await b.build_model_input(sid, 0)
        for view in (on_a, on_b):
            seqs = [m.seq for m in view.messages if m.seq]
            assert seqs == list(range(kept_from, crossed + 4)), seqs
            assert view.compaction_id == checkpoints[0].compaction_id


async def test_a_rollback_on_another_replica_meanwhile_wins(backend_url: str) -> None:
    summ = GatedSummarizer()
    async with background_server(backend_url, summ) as (a, obs), replica(backend_url) as b:
        sid, _ = await summarising(a, summ)
        await b.rollback(sid, 2, "", None)
        summ.gate.set()
        await a.background.idle()
        checkpoints, _ = await a.list_compactions(sid, 10, "")
        assert [c for c in checkpoints if not c.superseded] == []
        for m in (a, b):
            view = await m.build_model_input(sid, 0)
            assert [msg.seq for msg in view.messages if msg.seq] == [1, 2]
        assert metric(obs, SUCCEEDED) == 0
