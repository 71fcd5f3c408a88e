"""Compaction use cases: Compact, PrepareCompaction, CommitCompaction, ListCompactions.

A history too long for the summariser's window is summarised chunk by chunk
(see ctxwarden.core.compaction.chunks), each chunk's prompt updating the
running summary. The steps are held server-side and only the final one
commits a checkpoint: the effective context changes once, atomically, and the
in-memory view is rebuilt once (rebuilding a 100,000-message context costs
seconds, so a checkpoint per chunk would make a long compaction quadratic).
For the agent the running summary lives in the next step's stored plan, so a
step survives a server restart until the plan expires.

The session lock is held only to plan and to commit, never while a
summariser runs, so appends continue during a slow LLM call. A commit checks
that the plan is still current (same checkpoint, no rollback since) and the
database enforces the same with a compare-and-set on the session's current
checkpoint, so of two concurrent compactions exactly one wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctxwarden.core.anchors import Anchor, AnchorCategory, span_anchor_steps
from ctxwarden.core.compaction.chunks import SummaryWindow
from ctxwarden.core.compaction.planner import Plan, plan_compaction_steps
from ctxwarden.core.compaction.steps import after_step, step_plan
from ctxwarden.core.compaction.terms import PlanTerms
from ctxwarden.core.compaction.types import Summarizer
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import FailedPrecondition, InvalidArgument, NotFound
from ctxwarden.core.memory import DurableFact, MemoryWrite
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Checkpoint, CompactionTrigger
from ctxwarden.core.summarizer_usage import collecting
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.core.usage_ledger import SummarizerSpend
from ctxwarden.core.validation import KEY_RE, check_key
from ctxwarden.service.compaction_commit import CommitRequest, check_current, commit_compaction
from ctxwarden.service.memories import MemoryBlocks
from ctxwarden.service.pages import clamp_page_size, decode_token, encode_token, token_id, token_int
from ctxwarden.service.summarize import run_summarizer, summarizer_window
from ctxwarden.store.errors import DuplicateKey
from ctxwarden.store.plans import StoredPlan
from ctxwarden.store.repository import RequestScope
from ctxwarden.util import ids
from ctxwarden.util.loop_slices import finished

if TYPE_CHECKING:
    from ctxwarden.service.results import IdempotencyKey
    from ctxwarden.service.runtime import SessionRuntime


@dataclass(frozen=True, slots=True)
class PlanHandle:
    plan_id: str
    plan: Plan
    expire_time_us: int
    step: int = 1
    step_count: int = 1
    anchors: tuple[Anchor, ...] = ()
    """The anchors of what this step summarises (``core.anchors.span_anchors``)."""


class Compactor:
    def __init__(self, runtime: SessionRuntime, summarizer: Summarizer | None) -> None:
        self.m = runtime
        self.summarizer = summarizer
        self.blocks = MemoryBlocks(runtime)

    # -- planning -------------------------------------------------------------

    async def _plan(
        self,
        ctx: SessionContext,
        keep_recent_tokens: int,
        instructions: str,
        *,
        window: SummaryWindow | None = None,
    ) -> Plan:
        """The plan, made a slice at a time (it reads the whole kept history: for a
        long session that is seconds of work, which must not hold the loop)."""
        if keep_recent_tokens < 0:
            raise InvalidArgument(
                "keep_recent_tokens must be >= 0",
                reason=ErrorReason.INVALID_KEEP_RECENT_TOKENS,
                field="keep_recent_tokens",
            )
        limit = self.summarizer.max_output_tokens if self.summarizer else 0
        steps = plan_compaction_steps(
            session_id=ctx.session.session_id,
            active=ctx.active_messages,
            checkpoint=ctx.checkpoint,
            at_seq=ctx.session.last_seq,
            tokens_before=ctx.view_tokens(),
            keep_recent_tokens=keep_recent_tokens or ctx.policy.keep_recent_tokens,
            reserve_tokens=ctx.policy.reserve_tokens,
            summarizer_limit=limit,
            pinned_state=ctx.session.pinned_state,
            instructions=instructions,
            file_tools=self.m.settings.file_tools,
            durable_facts=ctx.session.policy.memory_write_mode is not MemoryWrite.OFF,
            window=window,
        )
        return await finished(steps)

    async def prepare(
        self,
        session_id: str,
        instructions: str,
        keep_recent_tokens: int,
        context_window: int = 0,
    ) -> PlanHandle:
        if context_window < 0:
            raise InvalidArgument(
                "summarizer_context_window must be >= 0 (0: no limit)",
                reason=ErrorReason.INVALID_SUMMARIZER_CONTEXT_WINDOW,
                field="summarizer_context_window",
            )
        async with self.m.hot.lock(session_id):
            ctx = await self.m.context_locked(session_id, verify=True)
            window = SummaryWindow(context_window, ctx.tokenizer.count) if context_window else None
            plan = await self._plan(ctx, keep_recent_tokens, instructions, window=window)
            terms = PlanTerms.of(plan, CompactionTrigger.MANUAL)
            if window is not None and plan.chunks is not None:
                plan = step_plan(session_id, terms, ctx, window, ctx.session.pinned_state)
        return await self._save_plan(session_id, plan, terms)

    async def _save_plan(self, session_id: str, plan: Plan, terms: PlanTerms) -> PlanHandle:
        # What the plan summarises may be the whole of a long session: its anchors
        # are found a slice at a time, outside the session's lock.
        anchors = await finished(span_anchor_steps((*plan.history, *plan.turn_prefix)))
        plan_id = ids.new_id()
        now = ids.now_us()
        expire = now + int(self.m.settings.plan_ttl_seconds * 1_000_000)
        stored = StoredPlan(plan_id, session_id, terms, expire, "")
        await self.m.db(lambda: self.m.store.plans.save(stored, now))
        return PlanHandle(plan_id, plan, expire, terms.step, terms.step_count, anchors)

    async def _next_step(self, session_id: str, done: PlanTerms, summary: str) -> PlanHandle:
        """Record ``summary`` as the running summary of a chunked compaction's
        step ``done`` (not its final one) in the next step's plan."""
        if not summary.strip():
            raise InvalidArgument(
                "summary is empty; send the LLM's answer to history_prompt",
                reason=ErrorReason.MISSING_FIELD,
                field="summary",
            )
        async with self.m.hot.lock(session_id):
            ctx = await self.m.context_locked(session_id, verify=True)
            check_current(ctx, done)
            window = SummaryWindow(done.context_window, ctx.tokenizer.count)
            terms = after_step(done, summary, window)
            plan = step_plan(session_id, terms, ctx, window, ctx.session.pinned_state)
        return await self._save_plan(session_id, plan, terms)

    # -- committing -----------------------------------------------------------

    async def commit(
        self,
        session_id: str,
        plan_id: str,
        summary: str,
        turn_prefix_summary: str,
        proposed: Sequence[DurableFact] = (),
        min_survival: Mapping[AnchorCategory, float] | None = None,
    ) -> tuple[Checkpoint | None, PlanHandle | None]:
        """The checkpoint; or, for a step of a chunked compaction before its
        final one, no checkpoint and the next step's plan."""
        if not plan_id:
            raise InvalidArgument(
                "plan_id is required", reason=ErrorReason.MISSING_FIELD, field="plan_id"
            )
        # Plan IDs are server-made ASCII: anything else names no plan (and must not
        # reach MySQL's ASCII column, where it is an illegal mix of collations).
        found = (
            await self.m.db(lambda: self.m.store.plans.get(plan_id))
            if KEY_RE.fullmatch(plan_id)
            else None
        )
        if found is None or found.session_id != session_id:
            raise NotFound(
                f"compaction plan {plan_id!r} does not exist for session {session_id!r}",
                reason=ErrorReason.PLAN_NOT_FOUND,
            )
        committed = found.committed_compaction_id
        if committed:
            done = await self.m.db(lambda: self.m.store.checkpoints.get(committed))
            if done is not None:
                return done, None
        if ids.now_us() > found.expire_time_us:
            raise FailedPrecondition(
                f"compaction plan {plan_id!r} expired; call PrepareCompaction again",
                reason=ErrorReason.PLAN_EXPIRED,
            )
        if not found.terms.final_step:
            return None, await self._next_step(session_id, found.terms, summary)
        req = CommitRequest(
            summary,
            turn_prefix_summary,
            "agent",
            found.terms.trigger,
            plan_id=plan_id,
            proposed=proposed,
            min_survival=min_survival,
        )
        checkpoint = await commit_compaction(self.m, self.blocks, session_id, found.terms, req)
        return checkpoint, None

    # -- server-side summariser -------------------------------------------------

    async def compact(
        self,
        session_id: str,
        instructions: str,
        keep_recent_tokens: int,
        key: IdempotencyKey | None,
        trigger: CompactionTrigger = CompactionTrigger.MANUAL,
    ) -> Checkpoint:
        cleared = await self.clear(session_id, key, trigger)
        if cleared is not None:
            return cleared
        summarizer = self.summarizer
        if summarizer is None:
            raise FailedPrecondition(
                "no summariser is configured on this server: start it with --summarizer "
                "(openai, anthropic or extractive), or summarise on the agent side with "
                "PrepareCompaction and CommitCompaction",
                reason=ErrorReason.NO_SUMMARIZER,
            )
        if key is not None:
            check_key(key.request_id, "request_id")
        scope = RequestScope("Compact", session_id, tenant_of(session_id))
        stored = await self.m.replay(scope, key)
        if stored is not None:
            stored_id = str(stored.outcome["compaction_id"])
            done = await self.m.db(lambda: self.m.store.checkpoints.get(stored_id))
            if done is not None:
                return done
        window = await summarizer_window(summarizer, self.m.settings.summarizer_context_window)
        async with self.m.hot.lock(session_id):
            ctx = await self.m.context_locked(session_id, verify=True)
            plan = await self._plan(ctx, keep_recent_tokens, instructions, window=window)
            pinned = ctx.session.pinned_state
        with collecting() as calls:
            summary, prefix = await self.m.metrics.timed_summarize(
                summarizer.name, run_summarizer(summarizer, plan, pinned, instructions, window)
            )
        spent = SummarizerSpend.of(summarizer, calls)
        return await self._commit_final(
            session_id, plan, summary, prefix, summarizer.name, trigger, scope, key, spent
        )

    async def clear(
        self, session_id: str, key: IdempotencyKey | None, trigger: CompactionTrigger
    ) -> Checkpoint | None:
        """Commit a checkpoint that makes a summary unnecessary, when one suffices;
        None: summarise. This compactor has none (LayeredCompactor clears tool results)."""
        del session_id, key, trigger
        return None

    async def _commit_final(
        self,
        session_id: str,
        plan: Plan,
        summary: str,
        prefix: str,
        summarizer: str,
        trigger: CompactionTrigger,
        scope: RequestScope,
        key: IdempotencyKey | None,
        spent: SummarizerSpend | None = None,
    ) -> Checkpoint:
        """Commit Compact's last step with its idempotency record."""
        try:
            req = CommitRequest(
                summary, prefix, summarizer, trigger, record_scope=scope, key=key, spent=spent
            )
            terms = PlanTerms.of(plan, trigger)
            return await commit_compaction(self.m, self.blocks, session_id, terms, req)
        except DuplicateKey:
            again = await self.m.replay(scope, key)
            if again is None:
                raise self.m.concurrent(session_id) from None
            first_id = str(again.outcome["compaction_id"])
            done = await self.m.db(lambda: self.m.store.checkpoints.get(first_id))
            if done is None:
                raise self.m.concurrent(session_id) from None
            return done

    # -- reading ------------------------------------------------------------------

    async def list(
        self, session_id: str, page_size: int, page_token: str
    ) -> tuple[list[Checkpoint], str]:
        await self.m.get_session(session_id)
        size = clamp_page_size(page_size, 50)
        before = None
        if page_token:
            tok = decode_token(page_token)
            if tok.get("s") != session_id:
                raise InvalidArgument(
                    "page_token was issued for a different session",
                    reason=ErrorReason.INVALID_PAGE_TOKEN,
                    field="page_token",
                )
            before = (token_int(tok, "t"), token_id(tok, "i"))
        rows = await self.m.db(
            lambda: self.m.store.checkpoints.page(session_id, limit=size + 1, before=before)
        )
        token = ""
        if len(rows) > size:
            rows = rows[:size]
            last = rows[-1]
            token = encode_token(
                {"s": session_id, "t": last.create_time_us, "i": last.compaction_id}
            )
        return rows, token
