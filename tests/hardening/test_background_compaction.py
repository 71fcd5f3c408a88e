"""Background compaction (policy.background_compaction_percent), driven in-process.

The service and api layers run in the test's event loop over a real database
and a real gRPC socket; the summariser is a fake the test opens and closes
with events, and the retry backoff waits on a sleep the test records, so
nothing here waits on wall-clock time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

import grpc
import pytest

from ctxwarden.app.server import build_manager
from ctxwarden.config import Settings
from ctxwarden.core.compaction.types import SummarizerError, SummaryRequest
from ctxwarden.core.session import CompactionTrigger, ContextPolicy
from ctxwarden.observability.metrics import Metrics
from ctxwarden.service.manager import SessionManager
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses
from tests.support.inproc import api_server, new_session, user_msg

if TYPE_CHECKING:
    from ctxwarden.v1.context_service_pb2_grpc import ContextServiceAsyncStub

# Threshold 3000 tokens; soft threshold 50% of it: 1500.
POLICY = ContextPolicy(
    context_window=4000,
    reserve_tokens=1000,
    keep_recent_tokens=400,
    tokenizer="heuristic",
    background_compaction_percent=50,
)
TURN = "background compaction keeps the agent moving " * 12  # ~100-150 tokens


class GatedSummarizer:
    """A summariser that answers only when the test opens the gate, and fails
    its first ``failures`` calls (retryable)."""

    def __init__(self, failures: int = 0, *, open_gate: bool = False) -> None:
        self.calls = 0
        self.failures = failures
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        if open_gate:
            self.gate.set()

    @property
    def name(self) -> str:
        return "gated"

    @property
    def max_output_tokens(self) -> int:
        return 2048

    async def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        self.entered.set()
        await self.gate.wait()
        if self.failures > 0:
            self.failures -= 1
            raise SummarizerError("503 the engine is overloaded", retryable=True)
        return "## Goal\nkeep going\n\n## Progress\nmany turns"


class RecordedSleep:
    """The scheduler's backoff sleep: records each delay and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@asynccontextmanager
async def async_stub(m: SessionManager) -> AsyncIterator[ContextServiceAsyncStub]:
    """The api layer over ``m`` on a loopback socket (an aio stub)."""
    async with api_server(m) as stub:
        yield cast("ContextServiceAsyncStub", stub)


@asynccontextmanager
async def background_server(
    url: str, summarizer: GatedSummarizer, **settings: Any
) -> AsyncIterator[tuple[SessionManager, Metrics]]:
    manager = await build_manager(Settings(database_url=url, **settings), summarizer)
    obs = Metrics(process=False)
    manager.runtime.metrics.install(obs)
    manager.start()
    try:
        yield manager, obs
    finally:
        await manager.close()


def metric(obs: Metrics, name: str) -> float:
    value = obs.registry.get_sample_value(name)
    return 0.0 if value is None else value


async def grow_past_soft_threshold(m: SessionManager, sid: str) -> int:
    """Append turns until a background compaction is queued; the last seq."""
    for _ in range(40):
        result = await m.append(sid, [user_msg(TURN)], None, None)
        if m.background.pending(sid):
            return result.last_seq
    raise AssertionError("the soft threshold was never crossed")


async def test_build_model_input_does_not_wait_and_later_messages_stay_kept(
    backend_url: str,
) -> None:
    summ = GatedSummarizer()
    async with background_server(backend_url, summ) as (m, obs), async_stub(m) as stub:
        sid = await new_session(m, policy=POLICY)
        crossed = await grow_past_soft_threshold(m, sid)
        await summ.entered.wait()  # the summariser is now blocked
        assert metric(obs, "ctxwarden_background_compactions_in_flight") == 1
        # The agent goes on: inputs are built (auto_compact too, below the hard
        # threshold) and turns appended while the summariser is blocked.
        view = await asyncio.wait_for(
            stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, auto_compact=True)),
            timeout=10,
        )
        assert view.compaction_id == "" and view.first_kept_seq == 1
        during = [await m.append(sid, [user_msg(f"meanwhile {i}")], None, None) for i in range(3)]
        assert summ.calls == 1
        summ.gate.set()
        await m.background.idle()
        page = await stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid))
        assert len(page.compactions) == 1
        done = page.compactions[0]
        assert done.trigger == pb.COMPACTION_TRIGGER_BACKGROUND
        assert 1 < done.first_kept_seq <= crossed
        after = await stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
        assert after.compaction_id == done.compaction_id
        seqs = [msg.seq for msg in after.messages if msg.seq]
        assert seqs == list(range(done.first_kept_seq, during[-1].last_seq + 1))
        assert metric(obs, "ctxwarden_background_compactions_started_total") == 1
        assert metric(obs, "ctxwarden_background_compactions_succeeded_total") == 1
        assert metric(obs, "ctxwarden_background_compactions_in_flight") == 0
        assert (
            obs.registry.get_sample_value(
                "ctxwarden_compactions_total", {"trigger": "background", "summarizer": "gated"}
            )
            == 1
        )


async def test_failures_are_retried_with_backoff_and_counted(backend_url: str) -> None:
    summ = GatedSummarizer(failures=2, open_gate=True)
    sleep = RecordedSleep()
    settings = {"background_retry_seconds": 1.5, "background_retry_max_seconds": 60.0}
    async with background_server(backend_url, summ, **settings) as (m, obs):
        m.background.sleep = sleep
        sid = await new_session(m, policy=POLICY)
        await grow_past_soft_threshold(m, sid)
        await m.background.idle()
        assert sleep.delays == [1.5, 3.0]
        assert summ.calls == 3
        assert metric(obs, "ctxwarden_background_compactions_started_total") == 3
        assert metric(obs, "ctxwarden_background_compactions_retried_total") == 2
        assert metric(obs, "ctxwarden_background_compactions_succeeded_total") == 1
        assert metric(obs, "ctxwarden_background_compactions_failed_total") == 0
        checkpoints, _ = await m.list_compactions(sid, 10, "")
        assert [c.trigger for c in checkpoints] == [CompactionTrigger.BACKGROUND]


async def test_a_compaction_that_keeps_failing_is_given_up_and_changes_nothing(
    backend_url: str,
) -> None:
    summ = GatedSummarizer(failures=100, open_gate=True)
    sleep = RecordedSleep()
    settings = {"background_max_attempts": 3, "background_retry_seconds": 2.0}
    async with background_server(backend_url, summ, **settings) as (m, obs):
        m.background.sleep = sleep
        sid = await new_session(m, policy=POLICY)
        last = await grow_past_soft_threshold(m, sid)
        await m.background.idle()
        assert sleep.delays == [2.0, 4.0]
        assert metric(obs, "ctxwarden_background_compactions_failed_total") == 1
        assert metric(obs, "ctxwarden_background_compactions_retried_total") == 2
        assert (await m.list_compactions(sid, 10, ""))[0] == []
        view = await m.build_model_input(sid, 0)
        assert view.first_kept_seq == 1 and view.last_seq == last
        # The next growth queues it again.
        await m.append(sid, [user_msg(TURN)], None, None)
        assert m.background.pending(sid)


async def test_one_job_per_session_and_bounded_concurrency(backend_url: str) -> None:
    summ = GatedSummarizer()
    async with background_server(backend_url, summ, background_compactions=1) as (m, obs):
        first = await new_session(m, policy=POLICY)
        second = await new_session(m, policy=POLICY)
        await grow_past_soft_threshold(m, first)
        await summ.entered.wait()
        await grow_past_soft_threshold(m, second)
        # More turns on the first session queue nothing more for it.
        await m.append(first, [user_msg(TURN)], None, None)
        for _ in range(50):  # let any other worker run (there must be none)
            await asyncio.sleep(0)
        assert summ.calls == 1
        assert metric(obs, "ctxwarden_background_compactions_in_flight") == 1
        assert metric(obs, "ctxwarden_background_compactions_queued") == 1
        assert metric(obs, "ctxwarden_background_compactions_pending") == 2
        summ.gate.set()
        await m.background.idle()
        assert metric(obs, "ctxwarden_background_compactions_pending") == 0
        assert summ.calls == 2
        assert metric(obs, "ctxwarden_background_compactions_started_total") == 2
        for sid in (first, second):
            checkpoints, _ = await m.list_compactions(sid, 10, "")
            assert len(checkpoints) == 1


async def test_past_the_hard_threshold_build_model_input_joins_the_running_one(
    backend_url: str,
) -> None:
    summ = GatedSummarizer()
    async with background_server(backend_url, summ) as (m, _obs):
        sid = await new_session(m, policy=POLICY)
        await grow_past_soft_threshold(m, sid)
        await summ.entered.wait()
        while not (await m.build_model_input(sid, 0)).compaction_recommended:
            await m.append(sid, [user_msg(TURN)], None, None)
        waiting = asyncio.create_task(m.build_model_input(sid, 0, auto_compact=True))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done()  # past the hard threshold it does wait ...
        summ.gate.set()
        view = await waiting
        # ... for the background compaction, not a second summariser call.
        assert summ.calls == 1
        assert view.compaction_id and not view.compaction_recommended


async def test_shutdown_cancels_in_flight_work_without_losing_anything(
    backend_url: str,
) -> None:
    summ = GatedSummarizer()
    async with background_server(backend_url, summ) as (m, obs):
        sid = await new_session(m, policy=POLICY)
        last = await grow_past_soft_threshold(m, sid)
        await summ.entered.wait()
        await m.background.close(0)  # the grace period is over: cancel it
        assert metric(obs, "ctxwarden_background_compactions_in_flight") == 0
        assert not m.background.pending(sid)
        assert await m.background.wait_running(sid) is False
    summ2 = GatedSummarizer(open_gate=True)
    async with background_server(backend_url, summ2) as (m, _obs):
        view = await m.build_model_input(sid, 0)
        assert view.compaction_id == "" and view.last_seq == last  # every message, as before
        await m.background.idle()  # that build queued it again; now it commits
        assert len((await m.list_compactions(sid, 10, ""))[0]) == 1


async def test_shutdown_lets_in_flight_work_finish_within_the_grace_period(
    backend_url: str,
) -> None:
    summ = GatedSummarizer()
    async with background_server(backend_url, summ) as (m, _obs):
        sid = await new_session(m, policy=POLICY)
        await grow_past_soft_threshold(m, sid)
        await summ.entered.wait()
        closing = asyncio.create_task(m.background.close(30))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not closing.done()
        summ.gate.set()
        await closing
        assert len((await m.list_compactions(sid, 10, ""))[0]) == 1


async def test_policy_field_round_trips_and_is_validated(backend_url: str) -> None:
    summ = GatedSummarizer(open_gate=True)
    async with background_server(backend_url, summ) as (m, _obs), async_stub(m) as stub:
        made = await stub.CreateSession(
            pb.CreateSessionRequest(
                session=ses.Session(policy=ses.ContextPolicy(background_compaction_percent=80))
            )
        )
        got = await stub.GetSession(pb.GetSessionRequest(session_id=made.session_id))
        assert got.policy.background_compaction_percent == 80
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.CreateSession(
                pb.CreateSessionRequest(
                    session=ses.Session(policy=ses.ContextPolicy(background_compaction_percent=100))
                )
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "background_compaction_percent" in (err.value.details() or "")


async def test_without_the_policy_field_nothing_runs_in_the_background(
    backend_url: str,
) -> None:
    summ = GatedSummarizer(open_gate=True)
    async with background_server(backend_url, summ) as (m, obs):
        sid = await new_session(m, policy=ContextPolicy(context_window=4000, reserve_tokens=1000))
        for _ in range(15):
            await m.append(sid, [user_msg(TURN)], None, None)
            assert not m.background.pending(sid)
        assert (await m.build_model_input(sid, 0)).tokens.total_tokens > 1500  # 50% would run
        assert not m.background.pending(sid)
        assert summ.calls == 0
        assert metric(obs, "ctxwarden_background_compactions_started_total") == 0
