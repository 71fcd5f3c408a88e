"""Session use cases: create, list, update settings, delete."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ctxwarden.core.context import SessionContext, counting_profile
from ctxwarden.core.errors import (
    Aborted,
    InvalidArgument,
)
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Session, born, effective_policy
from ctxwarden.core.tenancy import scoped_id, tenant_of
from ctxwarden.core.validation import (
    check_key,
    check_session_fields,
    check_session_id,
)
from ctxwarden.service.hot import EvictionCause
from ctxwarden.service.memories import MemoryBlocks
from ctxwarden.service.pages import (
    clamp_page_size,
    decode_token,
    encode_token,
    token_id,
    token_int,
)
from ctxwarden.service.results import (
    IdempotencyKey,
)
from ctxwarden.service.runtime import SessionRuntime
from ctxwarden.service.tokenizer_access import check_client_tokenizer, tokenizer_for
from ctxwarden.store.errors import DuplicateKey
from ctxwarden.store.repository import RequestScope, StateOwner
from ctxwarden.util import ids

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SessionWithState:
    session: Session
    user_state: Mapping[str, Any]
    project_state: Mapping[str, Any]


class Sessions:
    """CreateSession, ListSessions, UpdateSession, DeleteSession."""

    def __init__(self, rt: SessionRuntime) -> None:
        self.rt = rt
        self.blocks = MemoryBlocks(rt)

    # -- sessions -------------------------------------------------------------

    async def create_session(
        self, session: Session, session_id: str, key: IdempotencyKey | None, tenant: str = ""
    ) -> Session:
        """``session_id`` is internal (tenant-prefixed); "" makes a sortable one."""
        if key is not None:
            check_key(key.request_id, "request_id")
        if session_id:
            check_session_id(session_id)
        check_session_fields(session)
        check_client_tokenizer(session.policy.tokenizer, self.rt.settings.hf_tokenizer_dirs)
        sid = session_id or scoped_id(tenant, ids.new_id())
        policy = effective_policy(session.policy, session.model)
        tokenizer = await tokenizer_for(policy.tokenizer)
        now = ids.now_us()
        prior = self.rt.model_calibration.prior(tenant, session.model)
        fresh = born(session, sid, 0, now, estimate_ratio=prior.ratio, estimate_samples=0)
        # Cold start: a session that opts in has its memory block from the first call.
        fresh = replace(fresh, memory=await self.blocks.select(fresh, tokenizer))
        ctx = SessionContext(fresh, None, (), tokenizer)
        fresh = replace(fresh, context_tokens=ctx.context_tokens)
        ctx.session = fresh
        scope = RequestScope("CreateSession", tenant_id=tenant)
        try:
            created = await self.rt.db(
                lambda: self.rt.store.sessions.create(
                    fresh, self.rt.record(scope, key, {"session_id": sid})
                )
            )
        except DuplicateKey:
            return await self.rt.taken_id(scope, key, sid)
        # A deleted session's ID made a new one: the version continues after it.
        return self.rt.install_created(ctx, created.version)

    async def get_session_with_state(self, session_id: str) -> SessionWithState:
        """GetSession: the session and the states it shares with its user's and
        its project's other sessions."""
        session = await self.rt.get_session(session_id)
        owner = StateOwner(tenant_of(session_id), session.project_id, session.user_id)
        shared = await self.rt.db(lambda: self.rt.store.states.get(owner))
        return SessionWithState(session, shared.user, shared.project)

    async def list_sessions(
        self,
        user_id: str,
        project_id: str,
        page_size: int,
        page_token: str,
        tenant: str = "",
        parent: str = "",
        show_archived: bool = False,
    ) -> tuple[list[Session], str]:
        """``parent`` (internal): only the forks of that session."""
        size = clamp_page_size(page_size, 50)
        if parent:
            check_session_id(parent, "parent_session_id")
        before: tuple[int, str] | None = None
        if page_token:
            tok = decode_token(page_token)
            filters = (tok.get("u"), tok.get("p"), tok.get("f", ""), bool(tok.get("a", False)))
            if filters != (user_id, project_id, parent, show_archived):
                raise InvalidArgument(
                    "page_token was issued for different filters",
                    reason=ErrorReason.INVALID_PAGE_TOKEN,
                    field="page_token",
                )
            before = (token_int(tok, "t"), token_id(tok, "i"))
        rows = await self.rt.db(
            lambda: self.rt.store.sessions.page(
                tenant=tenant,
                user_id=user_id,
                project_id=project_id,
                limit=size + 1,
                before=before,
                parent=parent,
                show_archived=show_archived,
            )
        )
        token = ""
        if len(rows) > size:
            rows = rows[:size]
            last = rows[-1]
            fields = {
                "u": user_id,
                "p": project_id,
                "a": show_archived,
                "t": last.create_time_us,
                "i": last.session_id,
            }
            token = encode_token({**fields, "f": parent} if parent else fields)
        # A hot session's row may lag its in-memory counters by nothing: rows are
        # written before memory changes, so the row is authoritative here.
        return rows, token

    async def update_session(self, updated: Session, paths: Sequence[str], etag: str) -> Session:
        sid = updated.session_id
        check_session_id(sid, "session.session_id")
        async with self.rt.hot.lock(sid):
            ctx = await self.rt.context_locked(sid, verify=True)
            current = ctx.session
            if etag and etag != current.etag:
                raise Aborted(
                    f"etag {etag} is stale (current {current.etag}); re-read the session",
                    reason=ErrorReason.ETAG_MISMATCH,
                    metadata={"etag": current.etag},
                )
            changes: dict[str, Any] = {p: getattr(updated, p) for p in paths}
            if "policy" in changes:
                check_client_tokenizer(updated.policy.tokenizer, self.rt.settings.hf_tokenizer_dirs)
            now = ids.now_us()
            new = replace(
                current,
                **changes,
                revision=current.revision + 1,
                version=current.version + 1,
                update_time_us=now,
            )
            check_session_fields(new)
            if new.policy.memory_max_tokens != current.policy.memory_max_tokens:
                # A new budget changes the prefix anyway: the block is selected again.
                new = replace(new, memory=await self.blocks.select(new, ctx.tokenizer))
            new, rebuilt, counts = await self._recount(ctx, new)
            written = await self.rt.write(
                sid,
                lambda: self.rt.store.sessions.update(
                    new,
                    expected_version=current.version,
                    token_counts=counts,
                    memory_changed=new.memory != current.memory,
                    labels_changed=new.labels != current.labels,
                ),
            )
            if not written:
                raise self.rt.concurrent(sid)
            if rebuilt is not None:
                self.rt.hot.put_rebuilt(sid, rebuilt)
            else:
                ctx.replace_session(new)
                ctx.session = replace(ctx.session, context_tokens=ctx.context_tokens)
                new = ctx.session
            return new

    @staticmethod
    async def _recount(
        ctx: SessionContext, new: Session
    ) -> tuple[Session, SessionContext | None, list[tuple[int, int, str]]]:
        """The new settings' token counts: (session with its context_tokens, the
        rebuilt context when the tokenizer or model changed, the recounted
        (seq, count, tokenizer) to store with them)."""
        new_spec = effective_policy(new.policy, new.model).tokenizer
        tokenizer = ctx.tokenizer if new_spec == ctx.tokenizer.spec else None
        if tokenizer is None:
            tokenizer = await tokenizer_for(new_spec)
        profile = counting_profile(new.model, tokenizer)
        if profile.key == ctx.profile.key:
            probe = SessionContext(new, ctx.checkpoint, ctx.active_messages, ctx.tokenizer)
            return replace(new, context_tokens=probe.context_tokens), None, []
        active, checkpoint, tok = ctx.active_messages, ctx.checkpoint, tokenizer
        # A new tokenizer or model: every kept message is recounted (once, here)
        # and the new counts are stored with the settings.
        rebuilt = await asyncio.to_thread(
            lambda: SessionContext(new, checkpoint, active, tok, recount=True)
        )
        new = replace(new, context_tokens=rebuilt.context_tokens)
        rebuilt.session = new
        return new, rebuilt, [(m.seq, m.token_count, profile.key) for m in rebuilt.active_messages]

    async def delete_session(self, session_id: str) -> None:
        check_session_id(session_id)
        async with self.rt.hot.lock(session_id):
            deleted = await self.rt.db(
                lambda: self.rt.store.sessions.delete(session_id, ids.now_us())
            )
            self.rt.hot.evict(session_id, EvictionCause.DELETED)
        if not deleted:
            raise self.rt.not_found(session_id)
