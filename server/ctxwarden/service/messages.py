"""Message use cases: append (unary and streamed) and list the history."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ctxwarden import ids
from ctxwarden.core.context import AppendPlan, SessionContext
from ctxwarden.core.errors import (
    Aborted,
    FailedPrecondition,
    InvalidArgument,
    Unavailable,
)
from ctxwarden.core.messages import Message
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.core.validation import (
    check_key,
    check_messages,
    check_session_id,
)
from ctxwarden.service.errors import store_error
from ctxwarden.service.pages import (
    LIST_PAGE_BYTES,
    clamp_page_size,
    decode_token,
    message_page_token,
    token_int,
)
from ctxwarden.service.results import (
    AppendResult,
    IdempotencyKey,
)
from ctxwarden.service.runtime import SessionRuntime
from ctxwarden.store.errors import ConcurrentWrite, DuplicateKey, TooLarge
from ctxwarden.store.repository import RequestScope

log = logging.getLogger(__name__)


def _chars(messages: Sequence[Message]) -> int:
    return sum(len(b.text) + len(b.arguments_json) for m in messages for b in m.content)


BIG_WORK_CHARS = 64 * 1024
"""Tokenizing more text than this runs in a worker thread, off the event loop."""


class Messages:
    """AppendMessages / StreamMessages and ListMessages."""

    def __init__(self, rt: SessionRuntime) -> None:
        self.rt = rt

    # -- messages -------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        messages: Sequence[Message],
        expected_last_seq: int | None,
        key: IdempotencyKey | None,
    ) -> AppendResult:
        check_messages(messages, self.rt.settings.limits.max_messages_per_request)
        if key is not None:
            check_key(key.request_id, "request_id")
        check_session_id(session_id)
        scope = RequestScope("AppendMessages", session_id, tenant_of(session_id))
        async with self.rt.hot.lock(session_id):
            ctx = await self.rt.context_locked(session_id)
            stored_dups: dict[str, Message] = {}
            for attempt in range(3):
                try:
                    plan = await self._plan(ctx, messages, stored_dups)
                    if not plan.new:
                        return AppendResult(plan.messages, ctx.session.last_seq, ctx.context_tokens)
                    if expected_last_seq is not None and expected_last_seq != ctx.session.last_seq:
                        if expected_last_seq > ctx.session.last_seq and attempt == 0:
                            # Our copy may be stale (another replica appended): reload.
                            ctx = await self.rt.reload(session_id)
                            continue
                        raise Aborted(
                            f"expected_last_seq {expected_last_seq} does not match the "
                            f"session's last_seq {ctx.session.last_seq}; nothing was written",
                            reason="LAST_SEQ_MISMATCH",
                            metadata={"last_seq": str(ctx.session.last_seq)},
                        )
                except (Aborted, FailedPrecondition):
                    # A resend of a request that was applied (its answer was lost) no
                    # longer fits the session it changed (its tool call is answered,
                    # last_seq moved on): answer it from the request log.
                    stored = await self.rt.replay(scope, key)
                    if stored is not None:
                        return await self._stored_append(ctx, session_id, stored.outcome)
                    raise
                now = ids.now_us()
                base = ctx.session
                new_session = replace(
                    base,
                    last_seq=plan.last_seq,
                    version=base.version + 1,
                    context_tokens=plan.context_tokens,
                    update_time_us=now,
                    consecutive_failures=ctx.failures_after(plan.new),
                    # The calibration this append learned is stored with it (a
                    # restart right after must not fall back to the previous one).
                    estimate_ratio=plan.calibration.ratio,
                    estimate_samples=plan.calibration.samples,
                )
                outcome = {
                    "seqs": [m.seq for m in plan.messages],
                    "last_seq": plan.last_seq,
                    "context_tokens": plan.context_tokens,
                }
                record = self.rt.record(scope, key, outcome)
                try:
                    op = self.rt.repo.encode_append(
                        new_session,
                        expected_version=base.version,
                        messages=plan.new,
                        record=record,
                    )
                except TooLarge as exc:
                    raise store_error(exc) from None
                try:
                    await self.rt.db(lambda o=op: self.rt.repo.append(o))  # type: ignore[misc]
                except ConcurrentWrite:
                    if attempt < 2:
                        # Another replica changed the session: reload and plan again
                        # on the current state (never write on a stale copy).
                        ctx = await self.rt.reload(session_id)
                        continue
                    raise self.rt.concurrent(session_id) from None
                except (Unavailable, asyncio.CancelledError):
                    # The commit may or may not have happened (a cancelled
                    # caller's write still goes on): forget our copy.
                    self.rt.hot.evict(session_id)
                    raise
                except DuplicateKey:
                    stored = await self.rt.replay(scope, key)
                    if stored is not None:
                        return await self._stored_append(ctx, session_id, stored.outcome)
                    wanted = [m.message_id for m in messages if m.message_id]
                    found = await self.rt.db(
                        lambda w=wanted: self.rt.repo.find_by_message_ids(session_id, w)  # type: ignore[misc]
                    )
                    if not found or found.keys() <= stored_dups.keys():
                        raise self.rt.concurrent(session_id) from None
                    stored_dups = found
                    continue
                samples_before = base.estimate_samples
                ctx.apply_append(plan, now, new_session.version)
                ctx.checked_at = self.rt.clock()
                if plan.calibration.samples > samples_before:
                    self.rt.model_calibration.learn(
                        tenant_of(session_id), ctx.session.model, plan.calibration.ratio
                    )
                self.rt.metrics.observe_append(len(plan.new))
                return AppendResult(plan.messages, plan.last_seq, plan.context_tokens)
            raise self.rt.concurrent(session_id)

    async def _plan(
        self, ctx: SessionContext, messages: Sequence[Message], dups: dict[str, Message]
    ) -> AppendPlan:
        def plan() -> AppendPlan:
            return ctx.plan_append(
                messages,
                now_us=ids.now_us(),
                new_message_id=iter(ids.new_id, None),
                stored_duplicates=dups,
            )

        if _chars(messages) > BIG_WORK_CHARS:
            return await asyncio.to_thread(plan)
        return plan()

    async def _stored_append(
        self, ctx: SessionContext, session_id: str, outcome: dict[str, Any]
    ) -> AppendResult:
        seqs = [int(s) for s in outcome["seqs"]]
        by_seq = {m.seq: m for m in ctx.active_messages}
        missing = [s for s in seqs if s not in by_seq]
        if missing:
            for m in await self.rt.db(lambda: self.rt.repo.get_messages(session_id, missing)):
                by_seq[m.seq] = m
        return AppendResult(
            tuple(by_seq[s] for s in seqs if s in by_seq),
            int(outcome["last_seq"]),
            int(outcome["context_tokens"]),
        )

    async def list_messages(
        self, session_id: str, page_size: int, page_token: str, include_rolled_back: bool
    ) -> tuple[list[Message], str]:
        await self.rt.get_session(session_id)
        size = clamp_page_size(page_size, 100)
        after = 0
        if page_token:
            tok = decode_token(page_token)
            if tok.get("s") != session_id or tok.get("r") != include_rolled_back:
                raise InvalidArgument(
                    "page_token was issued for a different session or filter",
                    reason="INVALID_PAGE_TOKEN",
                    field="page_token",
                )
            after = token_int(tok, "a")
        rows, more = await self.rt.db(
            lambda: self.rt.repo.list_messages(
                session_id,
                after_seq=after,
                limit=size,
                include_rolled_back=include_rolled_back,
                max_bytes=LIST_PAGE_BYTES,
            )
        )
        token = message_page_token(session_id, include_rolled_back, rows[-1].seq) if more else ""
        return rows, token
