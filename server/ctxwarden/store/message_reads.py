"""The history side of the repository: messages by id, by seq, and in pages."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxwarden.core.messages import Message, MessageState
from ctxwarden.store.codec import message_from_row
from ctxwarden.store.errors import boundary
from ctxwarden.store.tables import M


class MessageReads:
    engine: AsyncEngine

    @boundary
    async def find_by_message_ids(
        self, session_id: str, message_ids: Sequence[str]
    ) -> dict[str, Message]:
        if not message_ids:
            return {}
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(M).where(M.c.session_id == session_id, M.c.message_id.in_(message_ids))
                )
            ).all()
        return {r.message_id: message_from_row(r) for r in rows}

    @boundary
    async def get_messages(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(M)
                    .where(M.c.session_id == session_id, M.c.seq.in_(list(seqs)))
                    .order_by(M.c.seq)
                )
            ).all()
        return [message_from_row(r) for r in rows]

    @boundary
    async def get_message(self, session_id: str, seq: int) -> Message | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(select(M).where(M.c.session_id == session_id, M.c.seq == seq))
            ).first()
        return message_from_row(row) if row is not None else None

    @boundary
    async def list_messages(
        self,
        session_id: str,
        *,
        after_seq: int,
        limit: int,
        include_rolled_back: bool,
        max_bytes: int = 0,
    ) -> tuple[list[Message], bool]:
        """Up to ``limit`` messages after ``after_seq`` and whether more follow.

        With ``max_bytes`` the page also stops before its stored bodies pass that
        many bytes (always at least one message): the sizes are read first, so a
        page of huge messages never loads more than it returns.
        """
        where = [M.c.session_id == session_id, M.c.seq > after_seq]
        if not include_rolled_back:
            where.append(M.c.state == int(MessageState.ACTIVE))
        async with self.engine.connect() as conn:
            if max_bytes <= 0:
                rows = (
                    await conn.execute(select(M).where(*where).order_by(M.c.seq).limit(limit + 1))
                ).all()
                return [message_from_row(r) for r in rows[:limit]], len(rows) > limit
            size = func.coalesce(func.length(M.c.data), 0) + func.coalesce(func.length(M.c.body), 0)
            sizes = (
                await conn.execute(
                    select(M.c.seq, size.label("size"))
                    .where(*where)
                    .order_by(M.c.seq)
                    .limit(limit + 1)
                )
            ).all()
            if not sizes:
                return [], False
            total, last = 0, sizes[0].seq
            for i, r in enumerate(sizes[:limit]):
                total += int(r.size)
                if i > 0 and total > max_bytes:
                    break
                last = r.seq
            rows = (
                await conn.execute(select(M).where(*where, M.c.seq <= last).order_by(M.c.seq))
            ).all()
        return [message_from_row(r) for r in rows], sizes[-1].seq > last
