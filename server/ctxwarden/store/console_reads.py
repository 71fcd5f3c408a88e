"""Read-only queries of the web console: session search, history pages in both
directions, and the per-seq token profile of a session (aggregated in SQL, so a
100,000-message session is never read whole)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, case, func, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxwarden.core.messages import Message, MessageState, Role
from ctxwarden.core.search import SessionQuery
from ctxwarden.core.session import Session
from ctxwarden.store.codec import message_from_row, session_from_row
from ctxwarden.store.errors import boundary
from ctxwarden.store.tables import C, M, S

SORT_COLUMNS = {  # core.search.SESSION_SORTS
    "created": S.c.create_time_us,
    "updated": S.c.update_time_us,
    "seq": S.c.last_seq,
    "tokens": S.c.context_tokens,
}
"""The orders the session list offers (each with the session ID as tie-breaker)."""


@dataclass(frozen=True, slots=True)
class SessionHits:
    sessions: list[Session]
    cursor: tuple[int, str] | None
    """(sort value, session ID) of the last row scanned, when more may follow."""


@dataclass(frozen=True, slots=True)
class HistoryPage:
    messages: list[Message]
    more_before: bool
    more_after: bool


@dataclass(frozen=True, slots=True)
class CheckpointMark:
    compaction_id: str
    at_seq: int
    first_kept_seq: int
    tokens_before: int
    tokens_after: int
    superseded_at_seq: int


@dataclass(frozen=True, slots=True)
class TokenProfile:
    """Active message tokens per bucket of ``width`` seqs (bucket i covers seqs
    ``i*width+1 .. (i+1)*width``), rolled-back messages per bucket, and the
    checkpoints; ``prefix`` maps a checkpoint's ``at_seq`` to the active tokens
    of the seqs up to it."""

    last_seq: int
    width: int
    tokens: dict[int, int]
    rolled_back: dict[int, int]
    checkpoints: list[CheckpointMark]
    prefix: dict[int, int]


def _like(text: str) -> str:
    escaped = text.replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return f"%{escaped}%"


def _label_matches(session: Session, key: str, value: str) -> bool:
    if key not in session.labels:
        return False
    return not value or session.labels[key] == value


class ConsoleReads:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @boundary
    async def search_sessions(
        self, query: SessionQuery, *, after: tuple[int, str] | None, limit: int
    ) -> SessionHits:
        """Up to ``limit`` live sessions of the tenant matching ``query``, in its order."""
        column = SORT_COLUMNS.get(query.sort, S.c.create_time_us)
        where: list[ColumnElement[bool]] = [
            S.c.tenant_id == query.tenant,
            S.c.delete_time_us == 0,
        ]
        if query.user_id:
            where.append(S.c.user_id == query.user_id)
        if query.project_id:
            where.append(S.c.project_id == query.project_id)
        if query.title:
            where.append(func.lower(S.c.title).like(_like(query.title.lower()), escape="!"))
        if query.label_key:
            # labels_json is compact JSON with sorted keys (store/codec.py); the match
            # is confirmed on the decoded labels below.
            needle = json.dumps(query.label_key, ensure_ascii=False) + ":"
            if query.label_value:
                needle += json.dumps(query.label_value, ensure_ascii=False)
            where.append(S.c.labels_json.like(_like(needle), escape="!"))
        if after is not None:
            value, sid = after
            if query.descending:
                where.append(or_(column < value, and_(column == value, S.c.session_id < sid)))
            else:
                where.append(or_(column > value, and_(column == value, S.c.session_id > sid)))
        order = (
            (column.desc(), S.c.session_id.desc())
            if query.descending
            else (column.asc(), S.c.session_id.asc())
        )
        q = select(S).where(*where).order_by(*order).limit(limit + 1)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(q)).all()
        scanned = [session_from_row(r) for r in rows[:limit]]
        cursor = None
        if len(rows) > limit and scanned:
            last = rows[limit - 1]
            cursor = (int(getattr(last, column.name)), str(last.session_id))
        if query.label_key:
            scanned = [s for s in scanned if _label_matches(s, query.label_key, query.label_value)]
        return SessionHits(scanned, cursor)

    @boundary
    async def history(
        self, session_id: str, *, after_seq: int | None, before_seq: int | None, limit: int
    ) -> HistoryPage:
        """Up to ``limit`` stored messages (rolled back included) after ``after_seq``,
        or else before ``before_seq``, in seq order."""
        where = [M.c.session_id == session_id]
        backwards = after_seq is None
        if backwards:
            where.append(M.c.seq < (before_seq if before_seq is not None else 2**62))
            q = select(M).where(*where).order_by(M.c.seq.desc()).limit(limit + 1)
        else:
            where.append(M.c.seq > after_seq)
            q = select(M).where(*where).order_by(M.c.seq).limit(limit + 1)
        async with self.engine.connect() as conn:
            rows = list((await conn.execute(q)).all())
            more = len(rows) > limit
            rows = rows[:limit]
            if backwards:
                rows.reverse()
            other = False
            if rows:
                edge = (
                    M.c.seq > rows[-1].seq if backwards else M.c.seq < rows[0].seq
                )  # is there anything on the other side of the page?
                probe = select(M.c.seq).where(M.c.session_id == session_id, edge).limit(1)
                other = (await conn.execute(probe)).first() is not None
        messages = [message_from_row(r) for r in rows]
        if backwards:
            return HistoryPage(messages, more_before=more, more_after=other)
        return HistoryPage(messages, more_before=other, more_after=more)

    @staticmethod
    def _counted(tool_cap: int) -> ColumnElement[int]:
        """A message's tokens; a tool result at most ``tool_cap`` (the view cuts it)."""
        return case(
            (and_(M.c.role == int(Role.TOOL_RESULT), M.c.token_count > tool_cap), tool_cap),
            else_=M.c.token_count,
        )

    @boundary
    async def bucket_sums(
        self, session_id: str, *, width: int, after_seq: int, tool_cap: int
    ) -> tuple[dict[int, int], dict[int, int]]:
        """Active message tokens and rolled-back messages per bucket of ``width`` seqs
        (bucket i: seqs ``i*width+1 .. (i+1)*width``) for the seqs after ``after_seq``:
        one aggregate read of that range."""
        bucket = ((M.c.seq - 1) // width).label("b")
        active = M.c.state == int(MessageState.ACTIVE)
        q = (
            select(
                bucket,
                func.sum(case((active, self._counted(tool_cap)), else_=0)),
                func.sum(case((active, 0), else_=1)),
            )
            .where(M.c.session_id == session_id, M.c.seq > after_seq)
            .group_by(bucket)
        )
        tokens: dict[int, int] = {}
        rolled: dict[int, int] = {}
        async with self.engine.connect() as conn:
            for b, t, r in await conn.execute(q):
                tokens[int(b)] = int(t or 0)
                if r:
                    rolled[int(b)] = int(r)
        return tokens, rolled

    @boundary
    async def range_tokens(
        self, session_id: str, after_seq: int, to_seq: int, tool_cap: int
    ) -> int:
        """Active message tokens of the seqs ``after_seq < seq <= to_seq``."""
        q = select(func.coalesce(func.sum(self._counted(tool_cap)), 0)).where(
            M.c.session_id == session_id,
            M.c.state == int(MessageState.ACTIVE),
            M.c.seq > after_seq,
            M.c.seq <= to_seq,
        )
        async with self.engine.connect() as conn:
            return int((await conn.execute(q)).scalar_one())

    @boundary
    async def checkpoint_marks(self, session_id: str) -> list[CheckpointMark]:
        q = select(C).where(C.c.session_id == session_id).order_by(C.c.at_seq)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(q)).all()
        return [
            CheckpointMark(
                r.compaction_id,
                int(r.at_seq),
                int(r.first_kept_seq),
                int(r.tokens_before),
                int(r.tokens_after),
                int(r.superseded_at_seq),
            )
            for r in rows
        ]
