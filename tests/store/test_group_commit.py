"""Group commit: concurrent appends share transactions, each gets its own outcome."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select, text, update

from ctxwarden.core.messages import ContentBlock, Message, Role
from ctxwarden.core.session import Session
from ctxwarden.core.tenancy import scoped_id
from ctxwarden.store.engine import make_engine
from ctxwarden.store.errors import ConcurrentWrite, DuplicateKey, QuotaExceeded
from ctxwarden.store.models import MessageRow, RequestRow, SessionRow
from ctxwarden.store.quota import TenantQuota
from ctxwarden.store.repository import RequestRecord, RequestScope, Store
from ctxwarden.util import ids
from tests.support.databases import SERVER_BACKEND_PARAMS, fresh_database
from tests.support.server import migrate_database

SESSIONS = 40


def _msg(seq: int, message_id: str = "", text: str = "") -> Message:
    return Message(
        role=Role.USER,
        content=(ContentBlock.of_text(text or f"message {seq} " + "y" * 300),),
        seq=seq,
        message_id=message_id or ids.new_id(),
        token_count=80,
        create_time_us=ids.now_us(),
    )


def _advanced(sid: str, last_seq: int) -> Session:
    return Session(session_id=sid, last_seq=last_seq, version=last_seq, update_time_us=ids.now_us())


@pytest.fixture
async def repo(backend_url: str) -> AsyncIterator[Store]:
    r = Store(make_engine(backend_url), append_writers=2)
    yield r
    await r.close()


async def _sessions(repo: Store, n: int) -> list[str]:
    out = []
    for _ in range(n):
        sid = f"gc-{ids.new_id()}"
        now = ids.now_us()
        await repo.sessions.create(Session(session_id=sid, create_time_us=now), None)
        out.append(sid)
    return out


async def _count(repo: Store, sid: str) -> int:
    async with repo.engine.connect() as conn:
        n = await conn.scalar(
            select(func.count()).select_from(MessageRow).where(MessageRow.session_id == sid)
        )
    return int(n or 0)


async def _last_seq(repo: Store, sid: str) -> int:
    async with repo.engine.connect() as conn:
        n = await conn.scalar(select(SessionRow.last_seq).where(SessionRow.session_id == sid))
    return int(n or 0)


async def test_concurrent_appends_share_transactions(repo: Store) -> None:
    sids = await _sessions(repo, SESSIONS)
    rounds = 5

    async def agent(sid: str) -> None:
        for seq in range(1, rounds + 1):
            await repo.messages.append_messages(
                _advanced(sid, seq), expected_version=seq - 1, messages=[_msg(seq)], record=None
            )

    assert repo.committer is not None
    before = repo.committer.batches
    await asyncio.gather(*(agent(s) for s in sids))
    batches = repo.committer.batches - before
    # 200 appends, at most two batches in flight: far fewer commits than appends.
    assert batches < SESSIONS * rounds / 2, batches
    for sid in sids:
        assert await _count(repo, sid) == rounds
        assert await _last_seq(repo, sid) == rounds


async def test_a_conflict_fails_only_its_own_append(repo: Store) -> None:
    sids = await _sessions(repo, 12)
    victim = sids[5]
    # Another writer moved the victim on behind our back.
    async with repo.engine.begin() as conn:
        await conn.execute(
            update(SessionRow).where(SessionRow.session_id == victim).values(last_seq=7, version=7)
        )
    results = await asyncio.gather(
        *(
            repo.messages.append_messages(
                _advanced(s, 1), expected_version=0, messages=[_msg(1)], record=None
            )
            for s in sids
        ),
        return_exceptions=True,
    )
    for sid, result in zip(sids, results, strict=True):
        if sid == victim:
            assert isinstance(result, ConcurrentWrite)
            assert await _count(repo, sid) == 0
            assert await _last_seq(repo, sid) == 7
        else:
            assert result is None
            assert await _count(repo, sid) == 1


async def test_a_duplicate_fails_only_its_own_append(repo: Store) -> None:
    sids = await _sessions(repo, 10)
    scope = RequestScope("AppendMessages", tenant_id=f"t{secrets.token_hex(4)}")
    await repo.messages.append_messages(
        _advanced(sids[0], 1),
        expected_version=0,
        messages=[_msg(1)],
        record=RequestRecord(scope, "req-1", "h", {"ok": 1}, ids.now_us()),
    )
    records = [
        RequestRecord(scope, "req-1" if i == 3 else f"req-x{i}", "h", {}, ids.now_us())
        for i in range(len(sids))
    ]
    results = await asyncio.gather(
        *(
            repo.messages.append_messages(
                _advanced(s, 2 if i == 0 else 1),
                expected_version=1 if i == 0 else 0,
                messages=[_msg(2 if i == 0 else 1)],
                record=records[i],
            )
            for i, s in enumerate(sids)
        ),
        return_exceptions=True,
    )
    for i, (sid, result) in enumerate(zip(sids, results, strict=True)):
        if i == 3:
            assert isinstance(result, DuplicateKey)
            assert await _count(repo, sid) == 0
            assert await _last_seq(repo, sid) == 0  # the UPDATE was rolled back too
        else:
            assert result is None, result
            assert await _count(repo, sid) == (2 if i == 0 else 1)
    async with repo.engine.connect() as conn:
        n = await conn.scalar(
            select(func.count())
            .select_from(RequestRow)
            .where(RequestRow.tenant_id == scope.tenant_id)
        )
    assert n == len(sids)  # req-1 once, plus the nine others


async def test_a_cancelled_caller_does_not_cancel_the_write(repo: Store) -> None:
    (sid,) = await _sessions(repo, 1)
    task = asyncio.create_task(
        repo.messages.append_messages(
            _advanced(sid, 1), expected_version=0, messages=[_msg(1)], record=None
        )
    )
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if await _count(repo, sid) == 1:
            break
        await asyncio.sleep(0.02)
    assert await _count(repo, sid) == 1
    assert await _last_seq(repo, sid) == 1


async def test_without_group_commit_appends_still_work(backend_url: str) -> None:
    repo = Store(make_engine(backend_url), append_writers=0)
    try:
        (sid,) = await _sessions(repo, 1)
        await repo.messages.append_messages(
            _advanced(sid, 1), expected_version=0, messages=[_msg(1)], record=None
        )
        with pytest.raises(ConcurrentWrite):
            await repo.messages.append_messages(
                _advanced(sid, 2), expected_version=0, messages=[_msg(2)], record=None
            )
        assert await _count(repo, sid) == 1
    finally:
        await repo.close()


KILL_OTHERS = {
    "mysql": (
        "SELECT id FROM information_schema.processlist WHERE db = DATABASE() "
        "AND id <> CONNECTION_ID()",
        "KILL CONNECTION {}",
    ),
    "postgres": (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid()",
        "SELECT pg_terminate_backend({})",
    ),
}


@pytest.mark.parametrize("backend", SERVER_BACKEND_PARAMS)
async def test_writer_reconnects_after_losing_its_connection(backend: str, tmp_path: Path) -> None:
    """Database servers only: SQLite has no server connection to lose."""
    with fresh_database(backend, tmp_path, "ctxw_gc") as url:
        migrate_database(url)
        repo = Store(make_engine(url), append_writers=2)
        try:
            (sid,) = await _sessions(repo, 1)
            await repo.messages.append_messages(
                _advanced(sid, 1), expected_version=0, messages=[_msg(1)], record=None
            )
            # Kill every server connection of this database (the writers' included).
            find, kill = KILL_OTHERS[backend]
            killer = make_engine(url, pool_size=1)
            try:
                async with killer.connect() as conn:
                    killed = [pid for (pid,) in (await conn.execute(text(find))).all()]
                    for pid in killed:
                        await conn.execute(text(kill.format(int(pid))))
                    await conn.commit()
            finally:
                await killer.dispose()
            assert killed
            # Nothing was in flight: the next append reconnects instead of failing.
            await repo.messages.append_messages(
                _advanced(sid, 2), expected_version=1, messages=[_msg(2)], record=None
            )
            assert await _count(repo, sid) == 2
        finally:
            await repo.close()


TRICKY = [
    "",
    "plain",
    "quotes ' \" ` and backslashes \\ \\\\ \\' %s %(x)s ?",
    "newlines\n\r\n tabs\t and ctrl-z \x1a",
    "unicode: é ß 中文 العربية 😀 \U0010ffff",
    "0x41 X'41' _binary'x' -- comment /* c */ ; DROP TABLE sessions;",
    "long " + "é😀" * 200_000,  # past the hex-literal limit: escaped by the driver
]


async def test_any_text_round_trips_exactly(repo: Store) -> None:
    sids = await _sessions(repo, len(TRICKY))

    async def one(sid: str, content: str) -> None:
        msg = Message(
            role=Role.USER,
            content=(ContentBlock.of_text(content),),
            seq=1,
            message_id=ids.new_id(),
            token_count=1,
            create_time_us=ids.now_us(),
        )
        await repo.messages.append_messages(
            _advanced(sid, 1), expected_version=0, messages=[msg], record=None
        )

    await asyncio.gather(*(one(sid, c) for sid, c in zip(sids, TRICKY, strict=True)))
    for sid, content in zip(sids, TRICKY, strict=True):
        (stored,) = await repo.messages.get_many(sid, [1])
        assert stored.text == content


async def test_a_lost_compare_and_set_is_reported_before_a_duplicate_key(repo: Store) -> None:
    """Another writer appended the same seq and moved the version on: on MySQL the UPDATE
    and the INSERT go in one round trip and the INSERT's duplicate key raises, but the
    append lost its compare-and-set (ConcurrentWrite: plan again), not a duplicate."""
    (sid,) = await _sessions(repo, 1)
    await repo.messages.append_messages(
        _advanced(sid, 1), expected_version=0, messages=[_msg(1)], record=None
    )
    with pytest.raises(ConcurrentWrite):
        await repo.messages.append_messages(
            _advanced(sid, 1), expected_version=0, messages=[_msg(1)], record=None
        )
    assert await _count(repo, sid) == 1
    assert await _last_seq(repo, sid) == 1


async def test_a_batch_past_one_statement_budget_is_written_whole(
    backend_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On MySQL the writers' statement budget drops to its floor (64 KiB): the first INSERT
    goes with the UPDATE, the others follow one by one, all in the batch's transaction."""
    monkeypatch.setattr("ctxwarden.store.mysql_sql.DEFAULT_BUDGET", 1)
    repo = Store(make_engine(backend_url), append_writers=1)
    try:
        (sid,) = await _sessions(repo, 1)
        assert repo.committer is not None
        operations: list[str] = []
        repo.committer._observe = lambda operation, seconds, ok: operations.append(operation)
        big = [_msg(seq, text=f"{seq} " + "z" * 30_000) for seq in range(1, 9)]
        await repo.messages.append_messages(
            _advanced(sid, 8), expected_version=0, messages=big, record=None
        )
        if backend_url.startswith("mysql"):  # UPDATE + first INSERT, the rest, COMMIT
            assert operations[0] == "INSERT" and operations[-1] == "COMMIT", operations
            assert len(operations) > 3, operations
        stored = await repo.messages.get_many(sid, list(range(1, 9)))
        assert [m.text for m in stored] == [m.text for m in big]
        assert await _last_seq(repo, sid) == 8
        with pytest.raises(ConcurrentWrite):  # the version moved: nothing more is written
            await repo.messages.append_messages(
                _advanced(sid, 9), expected_version=0, messages=[_msg(9)], record=None
            )
        assert await _count(repo, sid) == 8
    finally:
        await repo.close()


async def test_a_crossed_quota_is_reported_before_a_duplicate_request(backend_url: str) -> None:
    """The append crosses the tenant's storage quota and repeats a request ID: on MySQL
    both statements run in one round trip and the duplicate raises, but the quota was
    crossed first (QuotaExceeded, as on the other backends), and nothing is written."""
    tenant = f"t{secrets.token_hex(4)}"
    repo = Store(make_engine(backend_url), quota=TenantQuota(max_stored_bytes=4_000))
    try:
        sid = scoped_id(tenant, f"gc-{ids.new_id()}")
        await repo.sessions.create(Session(session_id=sid, create_time_us=ids.now_us()), None)
        scope = RequestScope("AppendMessages", tenant_id=tenant)
        record = RequestRecord(scope, "req-1", "h", {"ok": 1}, ids.now_us())
        await repo.messages.append_messages(
            _advanced(sid, 1), expected_version=0, messages=[_msg(1)], record=record
        )
        big = _msg(2, text="q" * 8_000)
        with pytest.raises(QuotaExceeded):
            await repo.messages.append_messages(
                _advanced(sid, 2), expected_version=1, messages=[big], record=record
            )
        assert await _count(repo, sid) == 1
        assert await _last_seq(repo, sid) == 1
    finally:
        await repo.close()
