"""Session lifecycle in-process, with injected clocks: archived sessions stay out of
memory and refuse writes on every replica, idle eviction, retention rules (each
purges exactly what it names, per tenant) and the schedule that runs them."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import create_engine, text

from ctxwarden.app.server import make_summarizer
from ctxwarden.config import Settings
from ctxwarden.core.errors import FailedPrecondition, NotFound
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.retention import HOUR_US, RetentionRule, RetentionRules, RuleKind
from ctxwarden.core.tenancy import scoped_id
from ctxwarden.observability.lifecycle_metrics import LifecycleMetrics
from ctxwarden.service.manager import IdempotencyKey, SessionManager
from ctxwarden.service.retention import LifecycleSchedule, Retention
from ctxwarden.store.urls import sync_url
from ctxwarden.util import ids
from tests.support.inproc import FakeClock, assistant_msg, new_session, replica, user_msg

DAY_US = 24 * HOUR_US


def _tenant() -> str:
    return f"lc{uuid.uuid4().hex[:10]}"


async def _filled(m: SessionManager, tenant: str = "", **fields: object) -> str:
    sid = await new_session(m, tenant, f"s-{uuid.uuid4().hex[:8]}", **fields)
    for i in range(3):
        await m.append(
            sid, [user_msg(f"question {i} " * 30), assistant_msg(f"a{i} " * 30)], None, None
        )
    return sid


def _rows(url: str, sql: str, **params: object) -> int:
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(sql), params).scalar_one())
    finally:
        engine.dispose()


async def test_archived_session_stays_out_of_memory_and_refuses_writes(backend_url: str) -> None:
    async with replica(backend_url) as a, replica(backend_url) as b:
        a.compactor.summarizer = make_summarizer(Settings(summarizer_kind="extractive"))
        sid = await _filled(a)
        before = await b.build_model_input(sid, 0)  # hot on B
        assert sid in b.hot
        await a.archive_session(sid)
        assert sid not in a.hot and a.hot.evictions["archived"] == 1
        # B's copy is stale: its write loses the compare-and-set, reloads, is refused.
        for write in (
            lambda: b.append(sid, [user_msg("late")], None, None),
            lambda: a.append(sid, [user_msg("late")], None, None),
            lambda: a.compact(sid, "", 0, None),
            lambda: b.rollback(sid, 1, "", None),
        ):
            with pytest.raises(FailedPrecondition) as caught:
                await write()
            assert caught.value.reason == ErrorReason.SESSION_ARCHIVED
        restores = b.restores
        again = await b.build_model_input(sid, 0)
        assert again.messages == before.messages and sid not in b.hot  # read, not kept
        await b.build_model_input(sid, 0)
        assert b.restores == restores + 2
        await b.unarchive_session(sid)
        assert (await a.append(sid, [user_msg("back")], None, None)).last_seq == 7


async def test_archive_is_scoped_to_the_tenant(backend_url: str) -> None:
    async with replica(backend_url) as m:
        mine, other = _tenant(), _tenant()
        sid = await _filled(m, mine)
        name = sid.split("~", 1)[1]
        with pytest.raises(NotFound):
            await m.archive_session(scoped_id(other, name))
        assert not (await m.get_session(sid)).archived


async def test_idle_sessions_are_evicted_by_the_clock(backend_url: str) -> None:
    clock = FakeClock()
    async with replica(backend_url, clock, idle_evict_seconds=60.0) as m:
        old, fresh = await _filled(m), await _filled(m)
        before = await m.build_model_input(old, 0)
        schedule = LifecycleSchedule(m.hot, None, idle_evict_seconds=60.0, clock=clock)
        clock.now += 40
        await m.build_model_input(fresh, 0)  # touched 40 s in
        clock.now += 30  # old idle for 70 s, fresh for 30 s
        await schedule.tick()
        assert old not in m.hot and fresh in m.hot
        assert m.hot.evictions["idle"] == 1
        restores = m.restores
        after = await m.build_model_input(old, 0)
        assert after.messages == before.messages and m.restores == restores + 1
        clock.now += 59
        await schedule.tick()
        assert old in m.hot and fresh not in m.hot


async def test_each_rule_purges_exactly_what_it_names(backend_url: str) -> None:
    t1, t2 = _tenant(), _tenant()
    async with replica(backend_url) as m:
        live1, arch1, del1 = [await _filled(m, t1) for _ in range(3)]
        live2, arch2, del2 = [await _filled(m, t2) for _ in range(3)]
        for sid in (arch1, arch2):
            await m.archive_session(sid)
        for sid in (del1, del2):
            await m.delete_session(sid)
        # t1: archived after 1 day (its own), deleted after 1 day (the default's);
        # t2 names no archived rule. Other tenants in this database: only the
        # default's deleted rule, which the test keeps in the future for them.
        rules = RetentionRules(
            default=RetentionRule(purge_deleted_after_days=1),
            tenants={t1: RetentionRule(purge_archived_after_days=1), t2: RetentionRule()},
        )
        later = ids.now_us() + 2 * DAY_US
        dry = await Retention(m.store, rules, now_us=lambda: later).run(dry_run=True)
        assert dry.counts[(RuleKind.ARCHIVED, t1)] == 1
        assert (RuleKind.ARCHIVED, t2) not in dry.counts
        assert dry.counts[(RuleKind.DELETED, t1)] == dry.counts[(RuleKind.DELETED, t2)] == 1
        assert (await m.get_session(arch1)).archived  # a dry run removes nothing

        registry = CollectorRegistry()
        metrics = LifecycleMetrics(registry)
        done = await Retention(m.store, rules, metrics, now_us=lambda: later).run()
        assert (
            done.counts[(RuleKind.ARCHIVED, t1)] == 1 and (RuleKind.ARCHIVED, t2) not in done.counts
        )
        assert done.counts[(RuleKind.DELETED, t1)] == done.counts[(RuleKind.DELETED, t2)] == 1
        for gone in (arch1, del1, del2):
            for table in ("sessions", "messages", "session_revisions"):
                assert (
                    _rows(
                        backend_url, f"SELECT COUNT(*) FROM {table} WHERE session_id = :s", s=gone
                    )
                    == 0
                )
        for kept in (live1, live2, arch2):
            assert (await m.get_session(kept)).last_seq == 6
        # The purged archived session no longer counts against its tenant's quota.
        assert _rows(backend_url, "SELECT sessions FROM tenants WHERE tenant_id = :t", t=t1) == 1
        assert _rows(backend_url, "SELECT sessions FROM tenants WHERE tenant_id = :t", t=t2) == 2
        sample = registry.get_sample_value(
            "ctxwarden_retention_purged_total", {"rule": "archived_sessions", "tenant": t1}
        )
        assert sample == 1
        # Run again: nothing left that a rule names.
        rerun = await Retention(m.store, rules, now_us=lambda: later).run()
        assert rerun.counts.get((RuleKind.ARCHIVED, t1), 0) == 0
        assert rerun.counts.get((RuleKind.DELETED, t1), 0) == 0


async def test_idempotency_records_purge_gives_their_bytes_back(backend_url: str) -> None:
    purged, kept = _tenant(), _tenant()
    async with replica(backend_url) as m:
        sids = {}
        for tenant in (purged, kept):
            sid = await _filled(m, tenant)
            for i in range(3):
                await m.append(sid, [user_msg(f"r{i}")], None, IdempotencyKey(f"req-{i}", f"h{i}"))
            sids[tenant] = sid
        bytes_before = _rows(
            backend_url, "SELECT stored_bytes FROM sessions WHERE session_id = :s", s=sids[purged]
        )
        rules = RetentionRules(tenants={purged: RetentionRule(purge_idempotency_after_hours=1)})
        soon = ids.now_us() + 30 * 60 * 1_000_000
        assert (await Retention(m.store, rules, now_us=lambda: soon).run()).counts == {}
        later = ids.now_us() + 2 * HOUR_US
        done = await Retention(m.store, rules, now_us=lambda: later).run()
        assert done.counts == {(RuleKind.IDEMPOTENCY, purged): 3}
        count = "SELECT COUNT(*) FROM request_records WHERE tenant_id = :t"
        assert _rows(backend_url, count, t=purged) == 0 and _rows(backend_url, count, t=kept) == 3
        bytes_after = _rows(
            backend_url, "SELECT stored_bytes FROM sessions WHERE session_id = :s", s=sids[purged]
        )
        assert 0 < bytes_after < bytes_before
        # The session itself is untouched; a request_id is a new request again.
        assert (await m.get_session(sids[purged])).last_seq == 9
        again = await m.append(sids[purged], [user_msg("r0")], None, IdempotencyKey("req-0", "h0"))
        assert again.last_seq == 10


async def test_the_schedule_runs_retention_by_the_clock_and_counts_failures(
    backend_url: str,
) -> None:
    clock = FakeClock()
    tenant = _tenant()
    async with replica(backend_url, clock) as m:
        sid = await _filled(m, tenant)
        await m.archive_session(sid)
        rules = RetentionRules(tenants={tenant: RetentionRule(purge_archived_after_days=1)})
        registry = CollectorRegistry()
        metrics = LifecycleMetrics(registry, wall=lambda: 1234.0)
        later = ids.now_us() + 2 * DAY_US
        retention = Retention(m.store, rules, metrics, now_us=lambda: later)
        schedule = LifecycleSchedule(m.hot, retention, purge_interval=600.0, clock=clock)
        await schedule.tick()
        assert (await m.get_session(sid)).archived  # not due yet
        assert registry.get_sample_value("ctxwarden_retention_last_run_timestamp_seconds") == 0
        clock.now += 600
        await schedule.tick()
        with pytest.raises(NotFound):
            await m.get_session(sid)
        assert registry.get_sample_value("ctxwarden_retention_runs_total", {"result": "ok"}) == 1
        assert registry.get_sample_value("ctxwarden_retention_last_run_timestamp_seconds") == 1234
        assert schedule.last_report is not None
        assert schedule.last_report.counts == {(RuleKind.ARCHIVED, tenant): 1}

        def broken() -> int:
            raise RuntimeError("clock broke")

        retention.now_us = broken
        clock.now += 599
        await schedule.tick()  # not due: nothing runs
        assert registry.get_sample_value("ctxwarden_retention_failures_total") == 0
        clock.now += 1
        await schedule.tick()  # due: fails, is counted, and the schedule carries on
        assert registry.get_sample_value("ctxwarden_retention_failures_total") == 1
        assert (
            registry.get_sample_value("ctxwarden_retention_runs_total", {"result": "failed"}) == 1
        )
