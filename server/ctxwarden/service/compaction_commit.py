"""Committing a compaction: the checkpoint, the durable facts its summary proposes
and the memory block selected again, written in one transaction on the plan's
base (under the session's lock, compare-and-set on the session's version)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ctxwarden.core.anchors import AnchorCategory
from ctxwarden.core.compaction.history_index import covered_digest_of
from ctxwarden.core.compaction.loss import require_survival
from ctxwarden.core.compaction.terms import PlanTerms
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import Aborted
from ctxwarden.core.memory import DurableFact, MemoryWrite, split_durable_facts
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Checkpoint, CompactionTrigger, Session
from ctxwarden.core.usage_ledger import EMPTY_LEDGER, SummarizerSpend, spent_on
from ctxwarden.service.checkpoint import checkpoint_built
from ctxwarden.service.memories import MemoryBlocks
from ctxwarden.service.usage import observe_ledger
from ctxwarden.store.repository import RequestRecord, RequestScope
from ctxwarden.util import ids

if TYPE_CHECKING:
    from ctxwarden.service.results import IdempotencyKey
    from ctxwarden.service.runtime import SessionRuntime

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CommitRequest:
    """A summary to commit and where it came from: an agent's CommitCompaction
    (``plan_id``, ``proposed``, ``min_survival``) or Compact (``record_scope``,
    ``key``, ``spent``)."""

    summary: str
    turn_prefix_summary: str
    summarizer: str
    trigger: CompactionTrigger
    plan_id: str = ""
    record_scope: RequestScope | None = None
    key: IdempotencyKey | None = None
    proposed: Sequence[DurableFact] = ()
    min_survival: Mapping[AnchorCategory, float] | None = None
    spent: SummarizerSpend | None = None


def check_current(ctx: SessionContext, terms: PlanTerms) -> None:
    """A plan commits only on the state it was made on (ABORTED PLAN_STALE otherwise)."""
    current = ctx.checkpoint.compaction_id if ctx.checkpoint else ""
    if current != terms.base_compaction_id:
        raise Aborted(
            "the plan is stale: another compaction was committed since it was made; "
            "prepare a new plan",
            reason=ErrorReason.PLAN_STALE,
            metadata={"compaction_id": current},
        )
    if covered_digest_of(ctx, terms.at_seq) != terms.covered_digest:
        raise Aborted(
            "the plan is stale: messages it covers were rolled back since it was made; "
            "prepare a new plan",
            reason=ErrorReason.PLAN_STALE,
        )


async def commit_compaction(
    rt: SessionRuntime,
    blocks: MemoryBlocks,
    session_id: str,
    terms: PlanTerms,
    req: CommitRequest,
) -> Checkpoint:
    """Commit ``req`` on the plan ``terms``; the checkpoint now in effect."""
    async with rt.hot.lock(session_id):
        ctx = await rt.context_locked(session_id, verify=True)
        check_current(ctx, terms)
        if req.min_survival:  # checked on the summary as sent, before anything is stored
            sent = await checkpoint_built(
                ctx, terms, req.summary, req.turn_prefix_summary, "", req.trigger
            )
            require_survival(sent.loss_report, req.min_survival)
        checkpoint, with_block = await _with_memory(blocks, ctx, terms, req)
        record = (
            rt.record(req.record_scope, req.key, {"compaction_id": checkpoint.compaction_id})
            if req.record_scope is not None
            else None
        )
        await store_checkpoint(
            rt,
            ctx,
            checkpoint,
            with_block,
            ids.now_us(),
            plan_id=req.plan_id,
            record=record,
            memory_changed=with_block.memory != ctx.session.memory,
        )
        observe_ledger(rt, spent_on(EMPTY_LEDGER, req.spent))
        log.info(
            "compacted session %s: %d -> %d tokens, first kept seq %d (%s)",
            session_id,
            checkpoint.tokens_before,
            checkpoint.tokens_after,
            checkpoint.first_kept_seq,
            req.summarizer,
        )
        return checkpoint


async def _with_memory(
    blocks: MemoryBlocks, ctx: SessionContext, terms: PlanTerms, req: CommitRequest
) -> tuple[Checkpoint, Session]:
    """The checkpoint and the session it leaves: the durable facts proposed (or
    split off the summary) stored, the memory block selected again (a compaction
    rewrites the prefix anyway), the summariser's spend charged."""
    mode = ctx.session.policy.memory_write_mode
    summary, facts = req.summary, tuple(req.proposed)
    if mode is not MemoryWrite.OFF and not facts:
        summary, facts = split_durable_facts(summary)
    memory_ids = await blocks.store_facts(ctx.session, facts, mode)
    block = await blocks.select(ctx.session, ctx.tokenizer)
    with_block = replace(ctx.session, memory=block, usage=spent_on(ctx.session.usage, req.spent))
    checkpoint = await checkpoint_built(
        ctx, terms, summary, req.turn_prefix_summary, req.summarizer, req.trigger, with_block
    )
    checkpoint = replace(
        checkpoint,
        proposed_memory_ids=memory_ids,
        memory_tokens=blocks.tokens(with_block, ctx.tokenizer),
        summarizer_usage=req.spent.usage if req.spent is not None else None,
    )
    return checkpoint, with_block


async def store_checkpoint(
    rt: SessionRuntime,
    ctx: SessionContext,
    checkpoint: Checkpoint,
    base: Session,
    now_us: int,
    *,
    plan_id: str = "",
    record: RequestRecord | None = None,
    memory_changed: bool = False,
) -> None:
    """Write ``checkpoint`` with ``base`` as the session's next version and put
    both in effect in memory (the caller holds the lock). ABORTED when another
    writer came first; DuplicateKey (a concurrent retry) is the caller's."""
    expected = ctx.session.version
    session = replace(
        base,
        version=expected + 1,
        context_tokens=checkpoint.tokens_after,
        update_time_us=now_us,
    )
    written = await rt.write(
        ctx.session.session_id,
        lambda: rt.store.checkpoints.commit(
            checkpoint,
            session,
            expected_version=expected,
            plan_id=plan_id,
            record=record,
            memory_changed=memory_changed,
        ),
    )
    if not written:
        raise rt.concurrent(ctx.session.session_id)
    ctx.session = base
    ctx.apply_checkpoint(checkpoint)
    ctx.session = replace(ctx.session, version=session.version)
    ctx.checked_at = rt.clock()
    rt.metrics.observe_compaction(checkpoint)
