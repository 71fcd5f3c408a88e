"""Messages: appends (through the group committer), rollbacks, and reads of the
history by id, by seq and in pages. History rows are never deleted or rewritten
(a rollback only marks them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxwarden.core.messages import Message, MessageState
from ctxwarden.core.session import Session
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.store.codec import message_row_values, stored_message_bytes
from ctxwarden.store.errors import ConcurrentWrite, TooLarge, boundary
from ctxwarden.store.gate import WriteGate
from ctxwarden.store.group_commit import AppendOp, GroupCommitter
from ctxwarden.store.lineage import chain_of, hand_over, take_over
from ctxwarden.store.lineage import messages as seen_messages
from ctxwarden.store.lineage import where as lineage_where
from ctxwarden.store.quota import TenantQuota
from ctxwarden.store.records import (
    RequestRecord,
    advance,
    insert_record,
    record_bytes,
    record_values,
)
from ctxwarden.store.tables import M, S


@dataclass(frozen=True, slots=True)
class MessagePage:
    messages: list[Message]
    more: bool
    """Whether messages follow the page."""


class MessageRepository:
    def __init__(
        self,
        engine: AsyncEngine,
        gate: WriteGate,
        quota: TenantQuota,
        committer: GroupCommitter,
        max_message_bytes: int,
    ) -> None:
        self.engine = engine
        self.gate = gate
        self.quota = quota
        self.committer = committer
        self.max_message_bytes = max_message_bytes

    def encode_append(
        self,
        session: Session,
        *,
        expected_version: int,
        messages: Sequence[Message],
        record: RequestRecord | None,
        more_records: Sequence[RequestRecord] = (),
    ) -> AppendOp:
        """Encode an append for the writers; raises TooLarge (nothing written) when a
        message's stored body is over the limit. ``more_records``: the records of the
        other requests a streamed run writes with this one."""
        rows = []
        added = 0
        for i, m in enumerate(messages):
            values = message_row_values(session.session_id, m)
            size = len(values["data"])
            if size > self.max_message_bytes:
                raise TooLarge(f"messages[{i}]", size, self.max_message_bytes)
            rows.append(values)
            added += stored_message_bytes(values)
        records = [*([] if record is None else [record]), *more_records]
        stored = [record_values(r) for r in records]
        added += sum(record_bytes(values) for values in stored)
        return AppendOp(
            session, expected_version, rows, stored, added, tenant_of(session.session_id)
        )

    @boundary
    async def append(self, op: AppendOp) -> None:
        """Insert the messages and advance the session row, atomically.

        ``op.session`` carries the new last_seq, version, context_tokens, update
        time and failure count. Raises ConcurrentWrite when another writer changed
        the session first, DuplicateKey when a message_id or request_id exists,
        QuotaExceeded when the tenant's storage quota would be crossed.
        Concurrent appends share transactions (see group_commit); each returns
        only after its own transaction committed.
        """
        await self.committer.submit(op)

    @boundary
    async def append_messages(
        self,
        session: Session,
        *,
        expected_version: int,
        messages: Sequence[Message],
        record: RequestRecord | None,
    ) -> None:
        """encode_append + append."""
        await self.append(
            self.encode_append(
                session, expected_version=expected_version, messages=messages, record=record
            )
        )

    @boundary
    async def rollback(
        self,
        session: Session,
        *,
        expected_version: int,
        seqs: Sequence[int],
        record: RequestRecord | None,
    ) -> None:
        """Mark messages rolled back (never deleted) and update the session row,
        compare-and-set on the version."""
        async with self.gate.begin() as conn:
            added = await insert_record(conn, record)
            if seqs:
                # A fork copies what it inherited from there on before marking it,
                # and forks made at this very point take over what is marked.
                added += await take_over(conn, session.session_id, min(seqs))
                handed = await hand_over(conn, session.session_id, session.last_seq, min(seqs))
                await self.quota.add_bytes(conn, tenant_of(session.session_id), handed)
            await advance(
                conn,
                session,
                expected_version,
                stored_bytes=S.c.stored_bytes + added,
            )
            await self.quota.add_bytes(conn, tenant_of(session.session_id), added)
            if seqs:
                result = await conn.execute(
                    update(M)
                    .where(
                        M.c.session_id == session.session_id,
                        M.c.seq.in_(list(seqs)),
                        M.c.state == int(MessageState.ACTIVE),
                    )
                    .values(
                        state=int(MessageState.ROLLED_BACK),
                        rolled_back_at_seq=session.last_seq,
                    )
                )
                if result.rowcount != len(seqs):
                    raise ConcurrentWrite(session.session_id)

    @boundary
    async def find_by_ids(self, session_id: str, message_ids: Sequence[str]) -> dict[str, Message]:
        if not message_ids:
            return {}
        async with self.engine.connect() as conn:
            chain = await chain_of(conn, session_id)
            rows = (
                await conn.execute(
                    select(M).where(lineage_where(chain), M.c.message_id.in_(message_ids))
                )
            ).all()
        return {m.message_id: m for m in seen_messages(chain, rows)}

    @boundary
    async def get_many(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        async with self.engine.connect() as conn:
            chain = await chain_of(conn, session_id)
            rows = (
                await conn.execute(
                    select(M).where(lineage_where(chain), M.c.seq.in_(list(seqs))).order_by(M.c.seq)
                )
            ).all()
        return seen_messages(chain, rows)

    @boundary
    async def get(self, session_id: str, seq: int) -> Message | None:
        async with self.engine.connect() as conn:
            chain = await chain_of(conn, session_id)
            row = (
                await conn.execute(select(M).where(lineage_where(chain, lo=seq, hi=seq)))
            ).first()
        return seen_messages(chain, [row])[0] if row is not None else None

    @boundary
    async def page(
        self,
        session_id: str,
        *,
        after_seq: int,
        limit: int,
        include_rolled_back: bool,
        max_bytes: int = 0,
        newest_first: bool = False,
        before_seq: int = 0,
        after_time_us: int = 0,
    ) -> MessagePage:
        """Up to ``limit`` messages with ``after_seq < seq`` (and ``seq < before_seq``
        when set, and created after ``after_time_us`` when set), and whether more
        follow. Ascending by seq, or descending with ``newest_first``: the primary
        key (session_id, seq) is read from the end, so the newest N messages cost
        O(N) whatever the length of the history.

        With ``max_bytes`` the page also stops before its stored bodies pass that
        many bytes (always at least one message): the sizes are read first, so a
        page of huge messages never loads more than it returns.
        """
        order = M.c.seq.desc() if newest_first else M.c.seq
        async with self.engine.connect() as conn:
            chain = await chain_of(conn, session_id)
            where = [
                lineage_where(chain, active_only=not include_rolled_back),
                M.c.seq > after_seq,
            ]
            if before_seq > 0:
                where.append(M.c.seq < before_seq)
            if after_time_us > 0:
                where.append(M.c.create_time_us > after_time_us)
            if max_bytes <= 0:
                rows = (
                    await conn.execute(select(M).where(*where).order_by(order).limit(limit + 1))
                ).all()
                return MessagePage(seen_messages(chain, rows[:limit]), len(rows) > limit)
            size = func.coalesce(func.length(M.c.data), 0) + func.coalesce(func.length(M.c.body), 0)
            sizes = (
                await conn.execute(
                    select(M.c.seq, size.label("size"))
                    .where(*where)
                    .order_by(order)
                    .limit(limit + 1)
                )
            ).all()
            if not sizes:
                return MessagePage([], False)
            total, last = 0, sizes[0].seq
            for i, r in enumerate(sizes[:limit]):
                total += int(r.size)
                if i > 0 and total > max_bytes:
                    break
                last = r.seq
            bound = M.c.seq >= last if newest_first else M.c.seq <= last
            rows = (await conn.execute(select(M).where(*where, bound).order_by(order))).all()
        return MessagePage(seen_messages(chain, rows), sizes[-1].seq != last)
