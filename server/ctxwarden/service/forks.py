"""ForkSession: a new session that starts as another one was at a seq.

The fork shares the source's stored history (store/lineage.py): what it
writes is one session row, one settings revision and a copy of the checkpoint
in force at the fork point, however long the history is. It is built in
memory from the source as it was then: at the end, from the source's own hot
context, sharing its entries and the view built so far (``SessionContext.forked``:
O(1) in the history; a cold source is restored first, O(kept)); elsewhere, from
a replay (what ``BuildModelInput(as_of_seq)`` reads, O(messages since the
checkpoint in force there)).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.messages import Message
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Checkpoint, Session, born, effective_policy
from ctxwarden.core.tenancy import scoped_id, visible_id
from ctxwarden.core.usage_ledger import EMPTY_LEDGER
from ctxwarden.core.validation import check_key, check_session_id
from ctxwarden.service.results import IdempotencyKey
from ctxwarden.service.runtime import SessionRuntime
from ctxwarden.service.tokenizer_access import tokenizer_for
from ctxwarden.store.errors import ConcurrentWrite, DuplicateKey
from ctxwarden.store.repository import RequestScope
from ctxwarden.util import ids
from ctxwarden.util.loop_slices import stepped

VIEW_AHEAD_FROM = 2000
"""A source's view missing more messages than this is built ahead in slices."""


class Forks:
    def __init__(self, rt: SessionRuntime) -> None:
        self.rt = rt

    async def fork_session(
        self,
        source_id: str,
        at_seq: int,
        new_session_id: str,
        key: IdempotencyKey | None,
        tenant: str = "",
    ) -> Session:
        """``source_id`` and ``new_session_id`` are internal (tenant-prefixed);
        ``at_seq`` 0 forks at the end; ``new_session_id`` "" makes a sortable ID."""
        if key is not None:
            check_key(key.request_id, "request_id")
        check_session_id(source_id)
        if new_session_id:
            check_session_id(new_session_id, "new_session_id")
        scope = RequestScope("ForkSession", tenant_id=tenant)
        stored = await self.rt.replay(scope, key)
        if stored is not None:
            return await self.rt.get_session(str(stored.outcome["session_id"]))
        source = await self.rt.context(source_id, verify=True)
        if source.view_behind() > VIEW_AHEAD_FROM:
            # A fork at the end starts from the source's view: one never built (a
            # session only appended to) is built first, a slice at a time; then the
            # source is looked up again (it may have moved on meanwhile).
            await stepped(source.view_steps())
            source = await self.rt.context(source_id, verify=True)
        at = _fork_point(source, at_seq)
        kept: list[Message] | None = None
        if at == source.session.last_seq + 1:  # the source as it is (nothing awaited since)
            base, checkpoint = source.session, source.checkpoint
        else:
            base, checkpoint, kept = await self._source_at(source, at)
        sid = new_session_id or scoped_id(tenant, ids.new_id())
        fork = _fork_of(base, source.session, sid, at)
        own = replace(checkpoint, session_id=sid) if checkpoint is not None else None
        if kept is None:
            ctx = source.forked(fork, own)  # shares the source's entries and view: O(1)
        else:
            ctx = await self._build(fork, own, kept)
        ctx.session = replace(fork, context_tokens=ctx.context_tokens)
        return await self._create(ctx, source.session, checkpoint, scope, key)

    async def _create(
        self,
        ctx: SessionContext,
        source: Session,
        inherited: Checkpoint | None,
        scope: RequestScope,
        key: IdempotencyKey | None,
    ) -> Session:
        """Store the fork ``ctx.session`` (one transaction with its idempotency
        record, serialised on the source's row) and keep it hot."""
        fork = ctx.session
        sid = fork.session_id
        record = self.rt.record(scope, key, {"session_id": sid})
        try:
            created = await self.rt.db(
                lambda: self.rt.store.sessions.create(
                    fork,
                    record,
                    inherited=inherited,
                    parent_created_us=source.create_time_us,
                )
            )
        except ConcurrentWrite:
            raise await self._source_changed(source.session_id) from None
        except DuplicateKey:
            return await self.rt.taken_id(scope, key, sid)
        return self.rt.install_created(ctx, created.version)

    async def _source_changed(self, source_id: str) -> Exception:
        """Why the source refused the fork: gone (deleted or purged meanwhile:
        NOT_FOUND), else changed by another writer (ABORTED, retry)."""
        self.rt.hot.evict(source_id)
        stored = await self.rt.db(lambda: self.rt.store.sessions.get(source_id))
        if stored is None or stored.deleted:
            return self.rt.not_found(source_id)
        return self.rt.concurrent(source_id)

    @staticmethod
    async def _build(fork: Session, own: Checkpoint | None, kept: list[Message]) -> SessionContext:
        tokenizer = await tokenizer_for(effective_policy(fork.policy, fork.model).tokenizer)

        def build() -> SessionContext:
            return SessionContext(fork, own, kept, tokenizer)

        return await asyncio.to_thread(build) if len(kept) > 2000 else build()

    async def _source_at(
        self, source: SessionContext, at: int
    ) -> tuple[Session, Checkpoint | None, list[Message]]:
        """The source as it was just before message ``at`` (not its end) was
        appended: its settings, the checkpoint in force and the kept messages."""
        sid = source.session.session_id
        snap = await self.rt.db(lambda: self.rt.store.replay_snapshot(sid, at))
        if snap is None:
            raise self.rt.not_found(sid)
        return snap.session, snap.checkpoint, snap.kept


def _fork_point(source: SessionContext, at_seq: int) -> int:
    """The seq the fork starts at (``at_seq`` 0: the end), INVALID_SEQ out of range."""
    last = source.session.last_seq
    at = at_seq or last + 1
    if not 1 <= at <= last + 1:
        raise InvalidArgument(
            f"at_seq {at_seq} is out of range: session "
            f"{visible_id(source.session.session_id)!r} can be "
            f"forked at 1 to {last + 1} (its last_seq + 1; 0 means the end)",
            reason=ErrorReason.INVALID_SEQ,
            field="at_seq",
            metadata={"last_seq": str(last)},
        )
    return at


def _fork_of(base: Session, source: Session, sid: str, at: int) -> Session:
    """The fork's row: ``base`` (the source's settings at the fork point) as a
    new, live session ``sid`` whose history is the source's before ``at``."""
    return born(
        base,
        sid,
        at - 1,
        ids.now_us(),
        archive_time_us=0,  # a new, live session, whatever the source's state
        usage=EMPTY_LEDGER,  # what the source's providers reported stays the source's
        state=source.state,
        parent_session_id=source.session_id,
        parent_seq=at - 1,
        fork_seq=at,
    )
