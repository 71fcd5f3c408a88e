"""Message use cases: append (unary and streamed) and list the history."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ctxwarden.core.context import AppendPlan, SessionContext
from ctxwarden.core.errors import (
    Aborted,
    FailedPrecondition,
    InvalidArgument,
)
from ctxwarden.core.messages import Message
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.state import MAX_STATE_BYTES, StateDelta, merge_state, state_size, too_large
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.core.usage_ledger import (
    EMPTY_LEDGER,
    ledger_after_messages,
)
from ctxwarden.core.validation import (
    check_key,
    check_messages,
    check_session_id,
)
from ctxwarden.service.errors import store_error
from ctxwarden.service.pages import LIST_PAGE_BYTES, MessageFilter, clamp_page_size
from ctxwarden.service.results import (
    AppendResult,
    IdempotencyKey,
)
from ctxwarden.service.runtime import SessionRuntime
from ctxwarden.service.usage import observe_ledger
from ctxwarden.store.errors import DuplicateKey, TooLarge
from ctxwarden.store.repository import RequestScope, StateOwner
from ctxwarden.util import ids

log = logging.getLogger(__name__)


def text_chars(messages: Sequence[Message]) -> int:
    return sum(len(b.text) + len(b.arguments_json) for m in messages for b in m.content)


def append_scope(session_id: str) -> RequestScope:
    """The idempotency scope of appends (AppendMessages, StreamMessages, AppendModelOutput)."""
    return RequestScope("AppendMessages", session_id, tenant_of(session_id))


BIG_WORK_CHARS = 64 * 1024
"""Tokenizing more text than this runs in a worker thread, off the event loop."""


@dataclass(slots=True)
class _Attempt:
    """One AppendMessages call's state across its tries."""

    ctx: SessionContext
    delta: StateDelta = field(default_factory=StateDelta)
    """The request's state changes (applied with the messages)."""
    stored_dups: dict[str, Message] = field(default_factory=dict)
    """Messages found stored by message_id although older than the kept history."""


def append_outcome(plan: AppendPlan) -> dict[str, Any]:
    """What an append's idempotency record answers a resend with."""
    return {
        "seqs": [m.seq for m in plan.messages],
        "last_seq": plan.last_seq,
        "context_tokens": plan.context_tokens,
    }


def install_append(rt: SessionRuntime, ctx: SessionContext, plan: AppendPlan) -> None:
    """Install a written plan in the hot session and learn what it calibrated
    (``observe_appended`` counts what it adds)."""
    calibrated = plan.calibration.samples > ctx.session.estimate_samples
    ctx.apply_append(plan)
    if calibrated:
        tenant = tenant_of(ctx.session.session_id)
        rt.model_calibration.learn(tenant, ctx.session.model, plan.calibration.ratio)


def observe_appended(rt: SessionRuntime, new: Sequence[Message], model: str) -> None:
    """Count committed new messages and the usage they report in the metrics (a
    merged run counts all its requests' at once)."""
    rt.metrics.observe_append(len(new))
    if any(m.usage is not None for m in new):  # else the ledger adds nothing
        observe_ledger(rt, ledger_after_messages(EMPTY_LEDGER, new, model))


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
        delta: StateDelta | None = None,
    ) -> AppendResult:
        """Plan on the hot copy under the session's lock, write through the group
        commit, install what was written. A try that finds the copy stale (another
        replica appended, or a message_id is stored older than the kept history)
        plans again on the current state; three tries at most. An append with a
        state ``delta`` (it may have no messages) is a transaction of its own."""
        delta = delta or StateDelta()
        if messages or delta.empty:
            check_messages(messages, self.rt.settings.limits.max_messages_per_request)
        if key is not None:
            check_key(key.request_id, "request_id")
        check_session_id(session_id)
        scope = append_scope(session_id)
        async with self.rt.hot.lock(session_id):
            state = _Attempt(await self.rt.context_locked(session_id), delta)
            for first in (True, False, False):
                result = await self._try(state, messages, expected_last_seq, scope, key, first)
                if result is not None:
                    self.rt.grew(state.ctx)
                    return result
            raise self.rt.concurrent(session_id)

    async def _try(
        self,
        state: _Attempt,
        messages: Sequence[Message],
        expected_last_seq: int | None,
        scope: RequestScope,
        key: IdempotencyKey | None,
        first: bool,
    ) -> AppendResult | None:
        """One try: the result, or None to try again on ``state`` (updated)."""
        ctx = state.ctx
        try:
            plan = await self._plan(ctx, messages, state.stored_dups)
            if not plan.new and state.delta.empty:
                return AppendResult(plan.messages, ctx.session.last_seq, ctx.context_tokens)
            last_seq = ctx.session.last_seq
            if expected_last_seq is not None and expected_last_seq != last_seq:
                if expected_last_seq > last_seq and first:
                    # Our copy may be stale (another replica appended): reload.
                    state.ctx = await self.rt.reload(scope.session_id)
                    return None
                raise Aborted(
                    f"expected_last_seq {expected_last_seq} does not match the "
                    f"session's last_seq {last_seq}; nothing was written",
                    reason=ErrorReason.LAST_SEQ_MISMATCH,
                    metadata={"last_seq": str(last_seq)},
                )
        except (Aborted, FailedPrecondition) as exc:
            # A resend of a request that was applied (its answer was lost) no longer
            # fits the session it changed (its tool call is answered, last_seq moved
            # on): answer it from the request log.
            stored = await self.rt.replay(scope, key)
            if stored is None:
                raise exc from None
            return await self._stored_append(ctx, scope.session_id, stored.outcome)
        return await self._write(state, plan, messages, scope, key)

    async def _write(
        self,
        state: _Attempt,
        plan: AppendPlan,
        messages: Sequence[Message],
        scope: RequestScope,
        key: IdempotencyKey | None,
    ) -> AppendResult | None:
        ctx, sid = state.ctx, scope.session_id
        outcome = append_outcome(plan)
        delta = state.delta
        if delta.session is not None:
            merged = merge_state(ctx.session.state, delta.session)
            if state_size(merged) > MAX_STATE_BYTES:
                raise too_large("state_delta.session", state_size(merged))
            plan = replace(plan, session=replace(plan.session, state=merged))
        try:
            op = self.rt.store.messages.encode_append(
                plan.session,
                expected_version=ctx.session.version,
                messages=plan.new,
                record=self.rt.record(scope, key, outcome),
            )
        except TooLarge as exc:
            raise store_error(exc) from None
        s = ctx.session
        owner = StateOwner(tenant_of(sid), s.project_id, s.user_id)

        async def write() -> None:
            if delta.empty:
                await self.rt.store.messages.append(op)
            else:
                await self.rt.store.states.append(op, owner, delta)

        try:
            written = await self.rt.write(sid, write)
        except DuplicateKey:
            return await self._after_duplicate(state, messages, scope, key)
        if not written:
            # Another replica changed the session: plan again on the current state
            # (never write on a stale copy).
            state.ctx = await self.rt.reload(sid)
            return None
        install_append(self.rt, ctx, plan)
        observe_appended(self.rt, plan.new, ctx.session.model)
        ctx.checked_at = self.rt.clock()
        return AppendResult(plan.messages, plan.last_seq, plan.context_tokens)

    async def _after_duplicate(
        self,
        state: _Attempt,
        messages: Sequence[Message],
        scope: RequestScope,
        key: IdempotencyKey | None,
    ) -> AppendResult | None:
        """A request_id or message_id is already stored: answer from the request log,
        or plan again with the stored messages (None), or give up."""
        sid = scope.session_id
        stored = await self.rt.replay(scope, key)
        if stored is not None:
            return await self._stored_append(state.ctx, sid, stored.outcome)
        wanted = [m.message_id for m in messages if m.message_id]
        found = await self.rt.db(lambda: self.rt.store.messages.find_by_ids(sid, wanted))
        if not found or found.keys() <= state.stored_dups.keys():
            raise self.rt.concurrent(sid) from None
        state.stored_dups = found
        return None

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

        if text_chars(messages) > BIG_WORK_CHARS:
            return await asyncio.to_thread(plan)
        return plan()

    async def replayed(self, session_id: str, key: IdempotencyKey) -> AppendResult | None:
        """The answer of the applied append with ``key``, from the request log
        (None when no request with its request_id was applied)."""
        stored = await self.rt.replay(append_scope(session_id), key)
        if stored is None:
            return None
        ctx = await self.rt.context(session_id)
        return await self._stored_append(ctx, session_id, stored.outcome)

    async def _stored_append(
        self, ctx: SessionContext, session_id: str, outcome: dict[str, Any]
    ) -> AppendResult:
        seqs = [int(s) for s in outcome["seqs"]]
        by_seq = {m.seq: m for m in ctx.active_messages}
        missing = [s for s in seqs if s not in by_seq]
        if missing:
            for m in await self.rt.db(lambda: self.rt.store.messages.get_many(session_id, missing)):
                by_seq[m.seq] = m
        return AppendResult(
            tuple(by_seq[s] for s in seqs if s in by_seq),
            int(outcome["last_seq"]),
            int(outcome["context_tokens"]),
        )

    async def list_messages(
        self, session_id: str, page_size: int, page_token: str, wanted: MessageFilter
    ) -> tuple[list[Message], str]:
        """A page of the history; ``wanted.newest_first`` reads it from the end."""
        await self.rt.get_session(session_id)
        size = clamp_page_size(page_size, 100)
        if wanted.after_seq is not None and wanted.after_seq < 0:
            raise InvalidArgument(
                "after_seq must be >= 0", reason=ErrorReason.INVALID_SEQ, field="after_seq"
            )
        cursor = wanted.cursor(session_id, page_token)
        after = wanted.after_seq or 0
        before = 0
        if wanted.newest_first:
            before = cursor
        else:
            after = max(after, cursor)
        page = await self.rt.db(
            lambda: self.rt.store.messages.page(
                session_id,
                after_seq=after,
                limit=size,
                include_rolled_back=wanted.include_rolled_back,
                max_bytes=LIST_PAGE_BYTES,
                newest_first=wanted.newest_first,
                before_seq=before,
                after_time_us=wanted.after_time_us,
            )
        )
        rows = page.messages
        return rows, wanted.token(session_id, rows[-1].seq) if page.more else ""
