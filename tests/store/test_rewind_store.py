"""A rewind across a checkpoint, through the store, over more rows than one statement binds."""

from __future__ import annotations

from sqlalchemy import func, select

from ctxwarden.core.messages import ContentBlock, Message, MessageState, Role
from ctxwarden.core.session import Checkpoint, Session
from ctxwarden.store.engine import make_engine
from ctxwarden.store.models import CompactionRow, MessageRow
from ctxwarden.store.repository import Store
from ctxwarden.util import ids

MESSAGES = 1_300
"""More than the rewind's 500 seqs per UPDATE (and SQLite's bound-parameter limit)."""


def _msg(seq: int) -> Message:
    return Message(
        role=Role.USER,
        content=(ContentBlock.of_text(f"m{seq}"),),
        seq=seq,
        message_id=ids.new_id(),
        token_count=3,
        create_time_us=ids.now_us(),
    )


async def test_rewind_before_a_checkpoint_over_many_messages(backend_url: str) -> None:
    store = Store(make_engine(backend_url))
    try:
        sid = f"rw-{ids.new_id()}"
        await store.sessions.create(Session(session_id=sid, create_time_us=ids.now_us()), None)
        session = Session(session_id=sid, last_seq=MESSAGES, version=1, update_time_us=ids.now_us())
        await store.messages.append_messages(
            session,
            expected_version=0,
            messages=[_msg(s) for s in range(1, MESSAGES + 1)],
            record=None,
        )
        checkpoint = Checkpoint(
            compaction_id=ids.new_id(),
            session_id=sid,
            summary="everything so far",
            first_kept_seq=1_200,
            tokens_before=4_000,
            create_time_us=ids.now_us(),
            at_seq=MESSAGES,
        )
        session = Session(session_id=sid, last_seq=MESSAGES, version=2, update_time_us=1)
        await store.checkpoints.commit(checkpoint, session, expected_version=1)

        rewound = Session(session_id=sid, last_seq=MESSAGES, version=3, update_time_us=2)
        rewind = await store.checkpoints.rollback_across_checkpoints(
            rewound, expected_version=2, to_seq=100, record=lambda _: None
        )

        assert rewind.rolled_back == tuple(range(101, MESSAGES + 1))
        assert rewind.current == ""
        async with store.engine.connect() as conn:
            active = await conn.scalar(
                select(func.count())
                .select_from(MessageRow)
                .where(MessageRow.session_id == sid, MessageRow.state == int(MessageState.ACTIVE))
            )
            superseded = await conn.scalar(
                select(CompactionRow.superseded_at_seq).where(
                    CompactionRow.compaction_id == checkpoint.compaction_id
                )
            )
        assert active == 100
        assert superseded == MESSAGES
        snapshot = await store.load_snapshot(sid)
        assert snapshot is not None
        assert snapshot.checkpoint is None
        assert [m.seq for m in snapshot.kept] == list(range(1, 101))
    finally:
        await store.close()
