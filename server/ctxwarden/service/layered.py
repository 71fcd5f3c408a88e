"""Layered compaction: clear old tool results first, summarise only if that is not enough.

With ``policy.clear_tool_results_at_least`` set, ``Compact`` and
``BuildModelInput(auto_compact)`` first try a clearing (core.clearing): if it
frees at least that many tokens and the input is then within the compaction
threshold, it is committed as a checkpoint of its own (``clearing_only``: the
previous checkpoint's summary and cut, a new ``tool_results_cleared_through``)
and no summariser runs. Otherwise the compaction summarises as before, and
carries any earlier clearing forward.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from ctxwarden.core.clearing import plan_clearing_steps
from ctxwarden.core.compaction.loss import assess_steps, cleared_span
from ctxwarden.core.context import SessionContext
from ctxwarden.core.session import CLEARING_SUMMARIZER, Checkpoint, CompactionTrigger
from ctxwarden.core.stepwise import Steps, in_one_go
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.core.validation import check_key
from ctxwarden.core.view import make_stub
from ctxwarden.service.compaction import Compactor
from ctxwarden.service.compaction_commit import store_checkpoint
from ctxwarden.service.results import IdempotencyKey
from ctxwarden.store.errors import DuplicateKey
from ctxwarden.store.repository import RequestScope
from ctxwarden.util import ids
from ctxwarden.util.loop_slices import finished

log = logging.getLogger(__name__)


def build_clearing_steps(
    ctx: SessionContext, trigger: CompactionTrigger, compaction_id: str, now_us: int
) -> Steps[Checkpoint | None]:
    """The clearing checkpoint for ``ctx``, or None when clearing is off, would
    free too little, or would still leave the input over the threshold. In steps
    (core.stepwise): it stubs and reports on every tool result it clears."""
    policy = ctx.policy
    decided = yield from plan_clearing_steps(
        ctx.entries,
        cleared_through=ctx.cleared_through,
        keep=policy.clear_tool_results_keep,
        at_least=policy.clear_tool_results_at_least,
        stub_tokens=lambda m: make_stub(m, ctx.profile).token_count,
    )
    if decided is None:
        return None
    session = ctx.session
    previous = ctx.checkpoint or Checkpoint(
        compaction_id="",
        session_id=session.session_id,
        summary="",  # no summary yet: the input gets no summary message
        first_kept_seq=ctx.first_kept_seq,
        tokens_before=0,
        create_time_us=0,
    )
    checkpoint = replace(
        previous,
        compaction_id=compaction_id,
        tokens_before=ctx.view_tokens(),
        create_time_us=now_us,
        summarizer=CLEARING_SUMMARIZER,
        trigger=trigger,
        at_seq=session.last_seq,
        superseded=False,
        tool_results_cleared_through=decided.through_seq,
        tool_results_cleared=decided.results,
        tool_result_tokens_cleared=decided.tokens_freed,
    )
    span = cleared_span(ctx, decided.through_seq)
    checkpoint = yield from assess_steps(ctx, checkpoint, session, span)
    after = ctx.tokens_with(checkpoint)
    if after > ctx.threshold():
        return None  # not enough: summarise instead
    return replace(checkpoint, tokens_after=after)


build_clearing = in_one_go(build_clearing_steps)
"""``build_clearing_steps`` in one go."""


class LayeredCompactor(Compactor):
    """Compact: a clearing when it suffices, else the summarising compaction."""

    async def clear(
        self, session_id: str, key: IdempotencyKey | None, trigger: CompactionTrigger
    ) -> Checkpoint | None:
        """Commit a clearing if one suffices; None leaves the decision to summarising.

        A repeated ``request_id`` returns the first result whichever layer made it.
        """
        if key is not None:
            check_key(key.request_id, "request_id")
        scope = RequestScope("Compact", session_id, tenant_of(session_id))
        if key is not None and await self.m.replay(scope, key) is not None:
            return None  # the summarising path replays it
        async with self.m.hot.lock(session_id):
            ctx = await self.m.context_locked(session_id, verify=True)
            if ctx.policy.clear_tool_results_at_least <= 0:
                return None
            steps = build_clearing_steps(ctx, trigger, ids.new_id(), ids.now_us())
            checkpoint = await finished(steps)
            if checkpoint is None:
                return None
            record = self.m.record(scope, key, {"compaction_id": checkpoint.compaction_id})
            try:
                await store_checkpoint(
                    self.m, ctx, checkpoint, ctx.session, checkpoint.create_time_us, record=record
                )
            except DuplicateKey:
                return None  # a concurrent retry of the same request won; replay it
            log.info(
                "cleared %d tool results of session %s through seq %d: %d -> %d tokens",
                checkpoint.tool_results_cleared,
                session_id,
                checkpoint.tool_results_cleared_through,
                checkpoint.tokens_before,
                checkpoint.tokens_after,
            )
            return checkpoint
