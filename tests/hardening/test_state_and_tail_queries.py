"""Driven in-process on both databases: concurrent deltas to one user's and one
project's state lose no key (one per session, from many sessions at once, and on
two replicas), and a tail read's statements read O(page) rows, whatever the
length of the history (the database's own plan and row counts)."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

from sqlalchemy import event

from ctxwarden.core.messages import ContentBlock, Message, Role
from ctxwarden.core.session import Session
from ctxwarden.core.state import StateDelta
from ctxwarden.service.pages import MessageFilter
from tests.support.inproc import replica


def _user(body: str) -> Message:
    return Message(Role.USER, (ContentBlock.of_text(body),))


async def test_concurrent_deltas_of_many_sessions_lose_no_key(backend_url: str) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    async with replica(backend_url) as one, replica(backend_url) as two:
        sids = []
        for i in range(12):
            made = await one.create_session(
                Session(session_id="", user_id="shared", project_id=project),
                f"cc-{uuid.uuid4().hex[:10]}-{i}",
                None,
            )
            sids.append(made.session_id)

        async def change(i: int, sid: str) -> None:
            manager = one if i % 2 else two
            for round_ in range(3):
                key = f"s{i}r{round_}"
                await manager.append(
                    sid,
                    [_user(key)] if round_ % 2 else [],
                    None,
                    None,
                    StateDelta(session={key: i}, user={key: i}, project={key: round_}),
                )

        await asyncio.gather(*(change(i, sid) for i, sid in enumerate(sids)))
        wanted = {f"s{i}r{r}" for i in range(12) for r in range(3)}
        found = await two.get_session_with_state(sids[0])
        assert set(found.user_state) == wanted and set(found.project_state) == wanted
        own = await one.get_session_with_state(sids[5])
        assert set(own.session.state) == {"s5r0", "s5r1", "s5r2"}


async def _fill(manager: Any, sid: str, count: int) -> None:
    for start in range(0, count, 1000):
        batch = [_user(f"m{start + k}") for k in range(min(1000, count - start))]
        await manager.append(sid, batch, None, None)


async def test_a_tail_read_reads_only_its_page(backend_url: str) -> None:
    async with replica(backend_url) as manager:
        sid = (
            await manager.create_session(Session(session_id=""), f"tq-{uuid.uuid4().hex}", None)
        ).session_id
        await _fill(manager, sid, 5000)
        engine = manager.store.engine
        seen: list[tuple[str, Any]] = []

        def capture(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
            if "FROM messages" in statement:
                seen.append((statement, params))

        event.listen(engine.sync_engine, "before_cursor_execute", capture)
        try:
            rows, token = await manager.list_messages(sid, 10, "", MessageFilter(newest_first=True))
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", capture)
        assert [m.seq for m in rows] == list(range(5000, 4990, -1)) and token
        assert len(seen) == 2  # the sizes, then the rows
        async with engine.connect() as conn:
            for statement, params in seen:
                if engine.dialect.name == "sqlite":
                    plan = (
                        await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", params)
                    ).all()
                    detail = " ".join(str(r[-1]) for r in plan)
                    # A range search of the primary key, in its order: no sort of the history.
                    assert "SEARCH messages USING" in detail and "TEMP B-TREE" not in detail, detail
                else:
                    analyzed = await conn.exec_driver_sql(
                        f"ANALYZE FORMAT=JSON {statement}", params
                    )
                    report = str(analyzed.scalar())
                    read = [float(v) for v in re.findall(r'"r_rows":\s*([0-9.]+)', report)]
                    assert read and max(read) <= 11, report  # page_size + 1, of 5,000
                    assert "filesort" not in report, report
