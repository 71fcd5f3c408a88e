"""Read-only queries of the web console: session search, history pages in both
directions, and the per-seq token profile of a session (aggregated in SQL, so a
100,000-message session is never read whole).

A fork's history and profile are its lineage chain's (store/lineage.py): the rows
it inherited from its ancestors, as it sees them, then its own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.core.messages import Message, Role
from ctxwarden.core.search import SessionQuery
from ctxwarden.core.session import Session
from ctxwarden.store.codec import session_from_row
from ctxwarden.store.errors import boundary
from ctxwarden.store.labels import labelled
from ctxwarden.store.lineage import Segment, chain_of
from ctxwarden.store.lineage import messages as seen_messages
from ctxwarden.store.lineage import where as lineage_where
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


class ConsoleReads:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @boundary
    async def search_sessions(
        self, query: SessionQuery, *, after: tuple[int, str] | None, limit: int
    ) -> SessionHits:
        """Up to ``limit`` sessions of the tenant (not deleted) matching ``query``, in its
        order."""
        column = SORT_COLUMNS.get(query.sort, S.c.create_time_us)
        where: list[ColumnElement[bool]] = [
            S.c.tenant_id == query.tenant,
            S.c.delete_time_us == 0,
        ]
        if query.archived == "live":
            where.append(S.c.archive_time_us == 0)
        elif query.archived == "archived":
            where.append(S.c.archive_time_us > 0)
        if query.parent:
            where.append(S.c.parent_key == query.parent)
        if query.user_id:
            where.append(S.c.user_id == query.user_id)
        if query.project_id:
            where.append(S.c.project_id == query.project_id)
        if query.title:
            where.append(func.lower(S.c.title).like(_like(query.title.lower()), escape="!"))
        if query.label_key:
            # Exact equality on the labels' rows (store/labels.py), of this tenant only.
            wanted = query.label_value or None  # "": any value
            where.append(S.c.session_id.in_(labelled(query.tenant, query.label_key, wanted)))
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
        return SessionHits(scanned, cursor)

    @boundary
    async def history(
        self, session_id: str, *, after_seq: int | None, before_seq: int | None, limit: int
    ) -> HistoryPage:
        """Up to ``limit`` messages of the session's history (rolled back included;
        a fork's inherited ones as it sees them) after ``after_seq``, or else before
        ``before_seq``, in seq order."""
        backwards = after_seq is None
        async with self.engine.connect() as conn:
            chain = await chain_of(conn, session_id)
            if backwards:
                rows = await _rows(conn, chain, None, before_seq, limit + 1)
            else:
                rows = await _rows(conn, chain, after_seq, None, limit + 1)
            more = len(rows) > limit
            rows = rows[-limit:] if backwards else rows[:limit]
            other = False
            if rows:  # is there anything on the other side of the page?
                if backwards:
                    other = bool(await _rows(conn, chain, rows[-1].seq, None, 1))
                else:
                    other = bool(await _rows(conn, chain, None, rows[0].seq, 1))
        messages = seen_messages(chain, rows)
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
        tokens: dict[int, int] = {}
        rolled: dict[int, int] = {}
        async with self.engine.connect() as conn:
            chain = await chain_of(conn, session_id)
            # Active as the session sees it (a fork: as its parent was when it forked).
            active = lineage_where(chain, active_only=True, lo=after_seq + 1)
            q = (
                select(
                    bucket,
                    func.sum(case((active, self._counted(tool_cap)), else_=0)),
                    func.sum(case((active, 0), else_=1)),
                )
                .where(lineage_where(chain, lo=after_seq + 1))
                .group_by(bucket)
            )
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
        async with self.engine.connect() as conn:
            chain = await chain_of(conn, session_id)
            q = select(func.coalesce(func.sum(self._counted(tool_cap)), 0)).where(
                lineage_where(chain, active_only=True, lo=after_seq + 1, hi=to_seq)
            )
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


async def _rows(
    conn: AsyncConnection,
    chain: Sequence[Segment],
    after_seq: int | None,
    before_seq: int | None,
    want: int,
) -> list[Any]:
    """Up to ``want`` rows of the chain in seq order: the first ones after
    ``after_seq``, or (``after_seq`` None) the last ones before ``before_seq``.

    The segments' seq ranges do not overlap: each is read in turn, nearest the
    bound first, by its primary key, until ``want`` rows are found."""
    backwards = after_seq is None
    out: list[Any] = []
    for segment in sorted(chain, key=lambda seg: seg.lo, reverse=backwards):
        if after_seq is None:
            bound = M.c.seq < (before_seq if before_seq is not None else 2**62)
            order = M.c.seq.desc()
        else:
            bound, order = M.c.seq > after_seq, M.c.seq.asc()
        q = select(M).where(lineage_where([segment]), bound).order_by(order)
        out += (await conn.execute(q.limit(want - len(out)))).all()
        if len(out) >= want:
            break
    if backwards:
        out.reverse()
    return out
