"""The store: one object that owns the engine and hands out the repositories.

Each aggregate has its own typed repository (sessions, messages, checkpoints,
plans, requests); every write method of one is one transaction (a unit of work)
that compares-and-sets the session row's ``version``. Restore reads across
them: the session row, its newest valid checkpoint and the kept messages, in
O(kept) (store/restore.py).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxwarden.store import purge
from ctxwarden.store.cluster import check_cluster_member
from ctxwarden.store.compactions import CheckpointRepository
from ctxwarden.store.engine import append_engine
from ctxwarden.store.errors import boundary
from ctxwarden.store.gate import WriteGate
from ctxwarden.store.group_commit import GroupCommitter
from ctxwarden.store.memories import MemoryRepository
from ctxwarden.store.messages import MessageRepository
from ctxwarden.store.plans import PlanRepository, StoredPlan
from ctxwarden.store.quota import TenantQuota
from ctxwarden.store.records import RequestRecord, RequestRepository, RequestScope, StoredRequest
from ctxwarden.store.restore import Snapshot, Tail, load_snapshot, load_tail, replay_snapshot
from ctxwarden.store.sessions import SessionRepository, StoredVersion
from ctxwarden.store.states import SharedStates, StateOwner, StateRepository
from ctxwarden.store.usage import UsageRepository
from ctxwarden.store.version_reader import VersionReader


class Store:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        append_writers: int | None = None,
        observe: Callable[[str, float, bool], None] | None = None,
        max_message_bytes: int = 8 * 1024 * 1024,
        quota: TenantQuota | None = None,
        statement_timeout: float = 0.0,
    ) -> None:
        """``append_writers``: connections that group-commit appends (None: one on
        SQLite, which has a single writer anyway, two elsewhere; 0: no batching,
        every append is its own transaction on a pooled connection). ``observe
        (operation, seconds, ok)`` times the group commit's statements, which bypass
        the engine's events. ``max_message_bytes`` bounds a message's stored body.
        ``statement_timeout``: seconds an append may wait for the database (0: no bound).
        On MySQL/MariaDB the append writers have a pool of their own
        (store/engine.py append_engine): only their connections accept the group
        commit's multi-statement script."""
        self.engine = engine
        self.gate = WriteGate(engine)
        self.quota = quota or TenantQuota()
        if append_writers is None:
            append_writers = 1 if engine.dialect.name == "sqlite" else 2
        self.versions = VersionReader(engine, statement_timeout)
        self.committer = GroupCommitter(
            append_engine(engine, append_writers),
            gate=self.gate,
            writers=append_writers,
            observe=observe,
            max_stored_bytes=self.quota.max_stored_bytes,
            timeout=statement_timeout,
        )
        self.sessions = SessionRepository(engine, self.gate, self.quota, self.versions)
        self.messages = MessageRepository(
            engine, self.gate, self.quota, self.committer, max_message_bytes
        )
        self.checkpoints = CheckpointRepository(engine, self.gate, self.quota)
        self.plans = PlanRepository(engine, self.gate)
        self.requests = RequestRepository(engine)
        self.states = StateRepository(engine, self.gate, self.quota)
        self.memories = MemoryRepository(engine, self.gate, self.quota)
        self.usage = UsageRepository(engine)

    async def close(self) -> None:
        await self.versions.close()
        await self.committer.close()
        if self.committer.engine is not self.engine:
            await self.committer.engine.dispose()
        await self.engine.dispose()

    def unsettled(self, session_id: str) -> bool:
        """Whether an append of the session whose caller went away may still commit."""
        return self.committer.unsettled(session_id)

    @boundary
    async def settled(self, session_id: str) -> None:
        """Wait for the outcome of such an append (store/group_commit.py)."""
        await self.committer.settled(session_id)

    @boundary
    async def ping(self) -> None:
        """The database answers, and (a Galera node) is Synced: store/cluster.py."""
        async with self.engine.connect() as conn:
            await conn.execute(select(1))
            await check_cluster_member(conn)

    @boundary
    async def load_snapshot(self, session_id: str) -> Snapshot | None:
        """Restore reads: session row, newest valid checkpoint, kept active messages.

        Cost is O(kept messages), independent of the length of the history.
        """
        return await load_snapshot(self.engine, session_id)

    @boundary
    async def load_tail(
        self, session_id: str, version: int, last_seq: int, limit: int
    ) -> Tail | None:
        """What was appended since a copy at ``version``, if only appends were:
        O(appended), the reload of a stale copy (restore.load_tail)."""
        return await load_tail(self.engine, session_id, version, last_seq, limit)

    @boundary
    async def replay_snapshot(self, session_id: str, as_of_seq: int) -> Snapshot | None:
        """What the session looked like just before message ``as_of_seq`` was appended."""
        return await replay_snapshot(self.engine, session_id, as_of_seq)


@boundary
async def purge_deleted(
    store: Store,
    *,
    deleted_before_us: int,
    batch: int = 100,
    progress: Callable[[int], None] | None = None,
) -> int:
    """See store.purge.purge_deleted."""
    return await purge.purge_deleted(
        store.engine, deleted_before_us=deleted_before_us, batch=batch, progress=progress
    )


__all__ = [
    "RequestRecord",
    "RequestScope",
    "SharedStates",
    "Snapshot",
    "StateOwner",
    "Store",
    "StoredPlan",
    "StoredRequest",
    "StoredVersion",
    "purge_deleted",
]
