"""Races and cross-tenant effects in the service layer, driven in-process."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import InvalidArgument, ResourceExhausted
from ctxwarden.core.messages import Usage
from ctxwarden.core.session import Session
from ctxwarden.service.hot import HotSessions
from ctxwarden.service.manager import IdempotencyKey
from ctxwarden.service.pages import MessageFilter
from ctxwarden.store.repository import purge_deleted
from tests.support.inproc import assistant_msg, new_session, replica, user_msg


async def test_eviction_never_splits_a_sessions_lock() -> None:
    """A waiter woken by a release must take the lock the releaser held, even when
    the LRU evicts the session between the release and the waiter's turn."""
    hot = HotSessions(1)
    ctx = cast(SessionContext, object())
    hot.put("x", ctx)
    inside = 0
    most = 0

    async def worker() -> None:
        nonlocal inside, most
        async with hot.lock("x"):
            inside += 1
            most = max(most, inside)
            for _ in range(3):
                await asyncio.sleep(0)
            inside -= 1

    held = hot.lock("x")
    await held.__aenter__()
    waiter = asyncio.create_task(worker())
    await asyncio.sleep(0)  # the waiter now waits for the lock
    await held.__aexit__(None, None, None)  # wakes it; it has not run yet
    hot.put("y", ctx)  # capacity 1: evicts "x"
    latecomer = asyncio.create_task(worker())
    await asyncio.gather(waiter, latecomer)
    assert most == 1
    assert len(hot.locks) == 0  # nobody holds or waits: no lock is kept


async def test_calibration_learned_from_one_tenant_does_not_change_another(
    backend_url: str,
) -> None:
    async with replica(backend_url) as m:
        baseline_sid = await new_session(m, "tenant-b", "base", model="gpt-4o")
        baseline = await m.build_model_input(baseline_sid, 0)
        sid_a = await new_session(m, "tenant-a", "a", model="gpt-4o")
        await m.append(sid_a, [user_msg("hello " * 50)], None, None)
        huge = Usage(input_tokens=1_000_000, output_tokens=10)
        await m.append(sid_a, [assistant_msg("hi", usage=huge, model="gpt-4o")], None, None)
        sid_b = await new_session(m, "tenant-b", "b", model="gpt-4o")
        view = await m.build_model_input(sid_b, 0)
        assert (await m.get_session(sid_b)).estimate_ratio == 1.0
        assert view.tokens.total_tokens == baseline.tokens.total_tokens
        # ... while tenant A's own new sessions do learn from A.
        sid_a2 = await new_session(m, "tenant-a", "a2", model="gpt-4o")
        assert (await m.get_session(sid_a2)).estimate_ratio > 1.0


async def test_purging_a_deleted_session_keeps_a_look_alike_live_sessions_records(
    backend_url: str,
) -> None:
    async with replica(backend_url) as m:
        doomed = await new_session(m, "", "p_q")
        live = await new_session(m, "", "pXq")
        key = IdempotencyKey("req-1", "hash-1")
        await m.append(doomed, [user_msg("bye")], None, key)
        first = await m.append(live, [user_msg("stay")], None, key)
        await m.delete_session(doomed)
        assert await purge_deleted(m.store, deleted_before_us=2**62) >= 1
        again = await m.append(live, [user_msg("stay")], None, key)
        assert again.last_seq == first.last_seq == 1  # replayed, not applied twice
        listed, _ = await m.list_messages(live, 0, "", MessageFilter())
        assert [msg.text for msg in listed] == ["stay"]


async def test_a_metadata_key_named_calib_does_not_break_replay(backend_url: str) -> None:
    async with replica(backend_url) as m:
        sid = await new_session(m, "", "", model="gpt-4o")
        await m.append(sid, [user_msg("question")], None, None)
        usage = Usage(input_tokens=40, output_tokens=5)
        tagged = assistant_msg("answer", usage=usage, metadata={"calib": "x", "calib2": "["})
        await m.append(sid, [tagged], None, None)
        await m.append(sid, [user_msg("next")], None, None)
        live = await m.build_model_input(sid, 0)
        replayed = await m.build_model_input(sid, 0, as_of_seq=4)
        assert [x.text for x in replayed.messages] == [x.text for x in live.messages]
        assert replayed.tokens == live.tokens


async def test_session_quota_holds_under_concurrent_creates(backend_url: str) -> None:
    async with replica(backend_url, max_sessions_per_tenant=10) as m:
        tenant = "race-tenant"
        results = await asyncio.gather(
            *(new_session(m, tenant, f"s{i}") for i in range(40)), return_exceptions=True
        )
        created = [r for r in results if isinstance(r, str)]
        refused = [r for r in results if isinstance(r, ResourceExhausted)]
        assert len(created) == 10
        assert len(refused) == 30
        assert all(r.reason == "SESSION_QUOTA_EXCEEDED" for r in refused)
        # Deleting one frees exactly one slot.
        await m.delete_session(created[0])
        await new_session(m, tenant, "again")
        with pytest.raises(ResourceExhausted):
            await new_session(m, tenant, "too-many")


async def test_storage_quota_counts_settings_and_is_atomic(backend_url: str) -> None:
    limit = 200_000
    async with replica(backend_url, max_stored_bytes_per_tenant=limit) as m:
        tenant = "bytes-tenant"
        sid = await new_session(m, tenant, "big", system_prompt="p" * 120_000)
        with pytest.raises(ResourceExhausted) as info:
            await m.update_session(
                Session(session_id=sid, system_prompt="q" * 120_000), ["system_prompt"], ""
            )
        assert info.value.reason == "STORAGE_QUOTA_EXCEEDED"
        with pytest.raises(ResourceExhausted):
            await new_session(m, tenant, "second", pinned_state="s" * 100_000)
        # Concurrent appends of several sessions never overshoot the quota.
        sids = [await new_session(m, tenant, f"small{i}") for i in range(4)]
        results = await asyncio.gather(
            *(m.append(s, [user_msg("x" * 30_000)], None, None) for s in sids for _ in range(3)),
            return_exceptions=True,
        )
        assert any(isinstance(r, ResourceExhausted) for r in results)
        assert not [
            r for r in results if isinstance(r, Exception) and not isinstance(r, ResourceExhausted)
        ]
        async with m.store.engine.connect() as conn:
            from sqlalchemy import select

            from ctxwarden.store.models import TenantRow

            used = (
                await conn.execute(
                    select(TenantRow.stored_bytes).where(TenantRow.tenant_id == tenant)
                )
            ).scalar_one()
        assert used <= limit


async def test_session_fields_are_bounded_and_nul_free(backend_url: str) -> None:
    async with replica(backend_url) as m:
        for fields, reason in (
            ({"title": "a\x00b"}, "NUL_CHARACTER"),
            ({"system_prompt": "x" * (1024 * 1024 + 1)}, "FIELD_TOO_LARGE"),
            ({"pinned_state": "x" * (256 * 1024 + 1)}, "FIELD_TOO_LARGE"),
            ({"title": "t" * 1025}, "FIELD_TOO_LARGE"),
            ({"labels": {"k\x00": "v"}}, "NUL_CHARACTER"),
            ({"labels": {f"k{i}": "v" for i in range(65)}}, "FIELD_TOO_LARGE"),
        ):
            with pytest.raises(InvalidArgument) as info:
                await new_session(m, "", "", **fields)
            assert info.value.reason == reason, fields
        sid = await new_session(m, "", "", title="ok")
        with pytest.raises(InvalidArgument):
            await m.update_session(Session(session_id=sid, title="a\x00"), ["title"], "")
