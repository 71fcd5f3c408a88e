"""Restore reads O(kept), not O(history): asserted on the SQL it issues."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, insert

from ctxwarden.config import Settings
from ctxwarden.core.messages import ContentBlock, Message, Role
from ctxwarden.core.session import Session
from ctxwarden.service.manager import SessionManager
from ctxwarden.store.engine import make_engine
from ctxwarden.store.models import CompactionRow
from ctxwarden.store.repository import Store
from ctxwarden.util import ids

HISTORY = 50_000
KEPT = 100


def _msg(seq: int) -> Message:
    return Message(
        role=Role.USER if seq % 2 else Role.ASSISTANT,
        content=(ContentBlock.of_text(f"message number {seq} " + "x" * 200),),
        seq=seq,
        message_id=f"m{seq}",
        token_count=55,
        create_time_us=1,
    )


async def test_restore_of_long_history_reads_only_kept_messages(backend_url: str) -> None:
    repo = Store(make_engine(backend_url))
    sid = f"long-{ids.new_id()}"
    now = ids.now_us()
    session = Session(session_id=sid, create_time_us=now, update_time_us=now)
    await repo.sessions.create(session, None)
    for version, start in enumerate(range(1, HISTORY + 1, 2000)):
        batch = [_msg(s) for s in range(start, min(start + 2000, HISTORY + 1))]
        new_last = batch[-1].seq
        await repo.messages.append_messages(
            Session(session_id=sid, last_seq=new_last, version=version + 1, update_time_us=now),
            expected_version=version,
            messages=batch,
            record=None,
        )
    first_kept = HISTORY - KEPT + 1
    async with repo.engine.begin() as conn:
        await conn.execute(
            insert(CompactionRow).values(
                compaction_id=f"c-{sid}",
                session_id=sid,
                summary="Goal: test restore.",
                first_kept_seq=first_kept,
                tokens_before=HISTORY * 55,
                tokens_after=KEPT * 55,
                at_seq=HISTORY,
                superseded_at_seq=0,
                details_json="{}",
                created_at=now,
            )
        )

    statements: list[tuple[str, Any]] = []

    def record(
        conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: Any
    ) -> None:
        statements.append((statement, params))

    event.listen(repo.engine.sync_engine, "before_cursor_execute", record)
    manager = SessionManager(repo, Settings())  # cold cache: the next call restores
    view = await manager.build_model_input(sid, 0)
    event.remove(repo.engine.sync_engine, "before_cursor_execute", record)

    selects = [s for s, _ in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 3, selects  # session row, newest checkpoint, kept messages
    message_query = [(s, p) for s, p in statements if "FROM messages" in s]
    assert len(message_query) == 1
    assert first_kept in tuple(message_query[0][1]), message_query[0][1]
    assert manager.restores == 1
    assert view.first_kept_seq == first_kept and view.compaction_id == f"c-{sid}"
    assert len(view.messages) == KEPT + 1  # the summary message + the kept tail
    assert view.messages[0].metadata["ctxwarden.summary"] == f"c-{sid}"
    assert [m.seq for m in view.messages[1:]] == list(range(first_kept, HISTORY + 1))
    assert view.tokens.message_tokens == KEPT * 55
    await repo.close()
