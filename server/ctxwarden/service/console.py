"""The web console's use cases: read-only, over the same runtime as the RPCs (the
same database timeout and error map, the same hot sessions and tenancy rules)."""

from __future__ import annotations

from dataclasses import dataclass

from ctxwarden.core.errors import InvalidArgument, NotFound
from ctxwarden.core.search import SessionQuery
from ctxwarden.core.session import Checkpoint, Session, effective_policy
from ctxwarden.service.console_profile import TokenProfiles
from ctxwarden.service.manager import SessionManager
from ctxwarden.store.console_reads import (
    ConsoleReads,
    HistoryPage,
    SessionHits,
    TokenProfile,
)


@dataclass(frozen=True, slots=True)
class ContextPoint:
    """Context tokens after ``seq`` (the chart's y), and what happened there."""

    seq: int
    tokens: int
    rolled_back: int = 0


@dataclass(frozen=True, slots=True)
class ContextSeries:
    points: list[ContextPoint]
    compactions: list[tuple[int, bool]]
    """(at_seq, superseded) of every checkpoint."""
    width: int
    """Seqs per point."""


MAX_CHECKPOINTS = 500
"""Checkpoints the console lists per session (newest first)."""
MAX_ANCESTORS = 64
"""Ancestors shown at most (store/lineage.py refuses deeper forks anyway)."""


@dataclass(frozen=True, slots=True)
class Ancestor:
    session_id: str
    """Internal key."""
    session: Session | None
    """None: deleted (its rows stay while forks read them; it has no page)."""


@dataclass(frozen=True, slots=True)
class Lineage:
    ancestors: list[Ancestor]
    """The parent first, then the parent's parent, and so on."""
    forks: list[Session]
    """The session's own forks (not theirs), oldest first."""
    more_forks: bool


class ConsoleReader:
    def __init__(self, manager: SessionManager, reads: ConsoleReads) -> None:
        self.manager = manager
        self.runtime = manager.runtime
        self.reads = reads
        self.profiles = TokenProfiles(manager.runtime, reads)

    async def sessions(
        self, query: SessionQuery, after: tuple[int, str] | None, limit: int
    ) -> SessionHits:
        return await self.runtime.db(
            lambda: self.reads.search_sessions(query, after=after, limit=limit)
        )

    async def session(self, session_id: str) -> Session:
        """The session (NotFound when it does not exist for this tenant's ID)."""
        return await self.runtime.get_session(session_id)

    async def history(
        self, session_id: str, after_seq: int | None, before_seq: int | None, limit: int
    ) -> HistoryPage:
        return await self.runtime.db(
            lambda: self.reads.history(
                session_id, after_seq=after_seq, before_seq=before_seq, limit=limit
            )
        )

    async def checkpoints(self, session_id: str) -> list[Checkpoint]:
        out: list[Checkpoint] = []
        token = ""
        while len(out) < MAX_CHECKPOINTS:
            page, token = await self.manager.list_compactions(session_id, 100, token)
            out += page
            if not token:
                break
        return out[:MAX_CHECKPOINTS]

    async def lineage(self, session: Session, tenant: str, max_forks: int) -> Lineage:
        """The session's ancestors (one session row each) and its first forks."""
        ancestors: list[Ancestor] = []
        parent = session.parent_session_id
        while parent and len(ancestors) < MAX_ANCESTORS:
            try:
                found: Session | None = await self.runtime.get_session(parent)
            except (NotFound, InvalidArgument):  # deleted (a retired key when its ID was reused)
                found = None
            ancestors.append(Ancestor(parent, found))
            parent = found.parent_session_id if found is not None else ""
        query = SessionQuery(tenant, sort="created", descending=False, parent=session.session_id)
        hits = await self.sessions(query, None, max_forks)
        return Lineage(ancestors, hits.sessions, hits.cursor is not None)

    async def context_series(
        self, session: Session, base_tokens: int, points: int
    ) -> ContextSeries:
        """Context tokens per seq bucket: the checkpoint in force at the bucket's
        last seq (its tokens after compaction) plus the active messages since it
        was made; before any checkpoint, ``base_tokens`` (system prompt and tools)
        plus every active message so far. A tool result counts as much as the
        view's cut of it can hold (about 3 bytes a token)."""
        policy = effective_policy(session.policy, session.model)
        cap = max(1, min(policy.tool_output_max_bytes // 3, policy.tool_output_max_lines * 40))
        profile = await self.profiles.profile(session, points, cap)
        return series(profile, base_tokens)


def series(profile: TokenProfile, base_tokens: int) -> ContextSeries:
    out: list[ContextPoint] = []
    running = 0
    buckets = -(-profile.last_seq // profile.width) if profile.last_seq else 0
    marks = profile.checkpoints
    for b in range(buckets):
        end = min(profile.last_seq, (b + 1) * profile.width)
        running += profile.tokens.get(b, 0)
        in_force = None
        for mark in marks:
            if mark.at_seq <= end and not (0 < mark.superseded_at_seq <= end):
                in_force = mark
        if in_force is None:
            tokens = base_tokens + running
        else:
            tokens = in_force.tokens_after + running - profile.prefix.get(in_force.at_seq, 0)
        out.append(ContextPoint(end, max(0, tokens), profile.rolled_back.get(b, 0)))
    return ContextSeries(out, [(m.at_seq, m.superseded_at_seq != 0) for m in marks], profile.width)
