"""Cache-aware background compaction (ContextPolicy.cache_lifetime_seconds).

The policy field against a real server process; the schedule itself in process
(the service and api layers in the test's event loop, over a real database and
a real gRPC socket), because its idle timers run on the scheduler's clock and
sleep, which the test drives by hand: nothing waits on wall-clock time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, cast

import grpc
from bench.cache_schedule import ManualTime
from google.protobuf import field_mask_pb2
from prometheus_client import CollectorRegistry

from ctxwarden.app.server import build_manager
from ctxwarden.config import Settings
from ctxwarden.core.compaction.extractive import ExtractiveSummarizer
from ctxwarden.core.session import CompactionTrigger, ContextPolicy
from ctxwarden.observability.background_metrics import (
    BackgroundCompactionMetrics,
    BackgroundRecorder,
)
from ctxwarden.service.manager import SessionManager
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import NewSession, Stub
from tests.support.errors import expect_error
from tests.support.inproc import api_server, new_session, user_msg

if TYPE_CHECKING:
    from ctxwarden.v1.context_service_pb2_grpc import ContextServiceAsyncStub

# Threshold 3000 tokens; soft threshold 50%: 1500; a waiting session is
# compacted at once from 2250 tokens (halfway to 3000).
EAGER = ContextPolicy(
    context_window=4000,
    reserve_tokens=1000,
    keep_recent_tokens=400,
    tokenizer="heuristic",
    background_compaction_percent=50,
)
AWARE = replace(EAGER, cache_lifetime_seconds=300)
TURN = "the agent keeps working on the uploader " * 10  # about 100 tokens


# -- the policy field, on a real server process --------------------------------------


def test_the_lifetime_round_trips_and_can_be_changed(stub: Stub, new_session: NewSession) -> None:
    policy = ses.ContextPolicy(background_compaction_percent=60, cache_lifetime_seconds=300)
    made = new_session(policy=policy)
    got = stub.GetSession(pb.GetSessionRequest(session_id=made.session_id), timeout=10)
    assert got.policy.cache_lifetime_seconds == 300
    assert got.policy.background_compaction_percent == 60
    policy.cache_lifetime_seconds = 3600
    stub.UpdateSession(
        pb.UpdateSessionRequest(
            session=ses.Session(session_id=made.session_id, policy=policy),
            update_mask=field_mask_pb2.FieldMask(paths=["policy"]),
        ),
        timeout=10,
    )
    got = stub.GetSession(pb.GetSessionRequest(session_id=made.session_id), timeout=10)
    assert got.policy.cache_lifetime_seconds == 3600


def test_a_negative_or_huge_lifetime_is_invalid(stub: Stub) -> None:
    for seconds in (-1, 86_401):
        request = pb.CreateSessionRequest(
            session=ses.Session(policy=ses.ContextPolicy(cache_lifetime_seconds=seconds))
        )
        err = expect_error(
            grpc.StatusCode.INVALID_ARGUMENT, "INVALID_POLICY", stub.CreateSession, request
        )
        assert "policy.cache_lifetime_seconds" in err.details()


# -- the schedule, in process ------------------------------------------------------------


@asynccontextmanager
async def scheduler(url: str) -> AsyncIterator[tuple[SessionManager, ManualTime]]:
    """The service with background compaction whose clock and sleep the test moves."""
    manager = await build_manager(Settings(database_url=url), ExtractiveSummarizer())
    clock = ManualTime()
    manager.background.clock = clock
    manager.background.sleep = clock.sleep
    manager.start()
    try:
        yield manager, clock
    finally:
        await manager.close()


async def turn(m: SessionManager, clock: ManualTime, sid: str, seconds: float) -> int:
    """``seconds`` later, one more turn; the session's tokens after it."""
    await clock.advance(seconds)
    await m.append(sid, [user_msg(TURN)], None, None)
    return (await m.build_model_input(sid, 0)).tokens.total_tokens


async def triggers(m: SessionManager, sid: str) -> list[CompactionTrigger]:
    return [c.trigger for c in (await m.list_compactions(sid, 50, ""))[0]]


async def test_a_busy_session_waits_and_is_compacted_once_idle_for_the_lifetime(
    backend_url: str,
) -> None:
    async with scheduler(backend_url) as (m, clock), api_server(m) as sync_typed:
        stub = cast("ContextServiceAsyncStub", sync_typed)  # an aio stub at run time
        metrics = BackgroundCompactionMetrics(CollectorRegistry())
        m.background.metrics = BackgroundRecorder(lambda: metrics)
        sid = await new_session(m, policy=AWARE)
        tokens = 0
        while not m.background.waiting(sid):
            tokens = await turn(m, clock, sid, 20)
        assert 1500 < tokens < 2250 and not m.background.pending(sid)
        assert metrics.waiting_for_idle._value.get() == 1
        # Busy: a turn every 100 s for 400 s, longer than the lifetime in all,
        # but never idle that long; inputs are built meanwhile (auto_compact too).
        for _ in range(4):
            await clock.advance(100)
            await stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, auto_compact=True))
        tokens = await turn(m, clock, sid, 10)
        assert tokens < 2250
        await m.background.idle()
        assert m.background.waiting(sid) and await triggers(m, sid) == []
        # Idle: one second short of the lifetime, nothing; at the lifetime, compacted.
        await clock.advance(299)
        await m.background.idle()
        assert await triggers(m, sid) == [] and m.background.waiting(sid)
        await clock.advance(1)
        await m.background.idle()
        assert await triggers(m, sid) == [CompactionTrigger.BACKGROUND]
        assert not m.background.waiting(sid) and m.background.queued_after_idle == 1
        assert metrics.after_idle._value.get() == 1 and metrics.waiting_for_idle._value.get() == 0
        # The next input shows the compaction the idle gap made free.
        view = await stub.BuildModelInput(
            pb.BuildModelInputRequest(session_id=sid, report_cache_prefix=True)
        )
        assert view.compaction_id and view.tokens.total_tokens < 1500


async def test_a_waiting_session_is_compacted_at_once_past_the_wait_limit(
    backend_url: str,
) -> None:
    async with scheduler(backend_url) as (m, clock):
        sid = await new_session(m, policy=AWARE)
        tokens = 0
        while tokens < 2250:
            assert await triggers(m, sid) == []
            tokens = await turn(m, clock, sid, 5)
            await m.background.idle()
        assert await triggers(m, sid) == [CompactionTrigger.BACKGROUND]
        assert m.background.queued_after_idle == 0 and not m.background.waiting(sid)


async def test_a_compaction_in_between_ends_the_wait(backend_url: str) -> None:
    async with scheduler(backend_url) as (m, clock):
        sid = await new_session(m, policy=AWARE)
        while not m.background.waiting(sid):
            await turn(m, clock, sid, 20)
        await m.compact(sid, "", 0, None)
        await clock.advance(300)  # the timer fires, finds nothing left to do
        await m.background.idle()
        assert await triggers(m, sid) == [CompactionTrigger.MANUAL]
        assert m.background.queued_after_idle == 1 and not m.background.waiting(sid)


async def test_without_a_lifetime_it_compacts_at_once_as_before(backend_url: str) -> None:
    async with scheduler(backend_url) as (m, clock):
        sid = await new_session(m, policy=EAGER)
        tokens = 0
        while not m.background.pending(sid):
            assert not m.background.waiting(sid)
            tokens = await turn(m, clock, sid, 5)
        assert 1500 < tokens < 2250  # well below where a waiting session would compact
        await m.background.idle()
        assert await triggers(m, sid) == [CompactionTrigger.BACKGROUND]
        assert clock.sleepers == 0 and m.background.queued_after_idle == 0
