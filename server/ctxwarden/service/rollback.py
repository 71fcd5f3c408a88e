"""RollbackTurn: roll back the trailing failed turn, or rewind to a seq."""

from __future__ import annotations

import logging
from dataclasses import replace

from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import Aborted
from ctxwarden.core.provider_errors import ProviderError, classify_provider_error
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.recovery import Recovery, decide, decide_recovery
from ctxwarden.core.rollback import last_failure_message
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.core.validation import check_key, check_session_id
from ctxwarden.service.results import (
    IdempotencyKey,
    RollbackResult,
    rollback_from_outcome,
    rollback_outcome,
)
from ctxwarden.service.runtime import SessionRuntime
from ctxwarden.store.errors import ConcurrentWrite, DuplicateKey
from ctxwarden.store.repository import RequestRecord, RequestScope
from ctxwarden.util import ids

log = logging.getLogger(__name__)


class Rollbacks:
    """RollbackTurn: the trailing failed turn, or a rewind to a seq (across checkpoints too)."""

    def __init__(self, rt: SessionRuntime) -> None:
        self.rt = rt

    # -- rollback ---------------------------------------------------------------

    async def rollback(
        self,
        session_id: str,
        to_seq: int | None,
        error_message: str,
        key: IdempotencyKey | None,
        provider_error: ProviderError | None = None,
        *,
        expected_last_seq: int | None = None,
    ) -> RollbackResult:
        """RollbackTurn. ``provider_error`` (the provider's raw error) is classified
        by the provider's codes and headers, before ``error_message``. With
        ``expected_last_seq`` nothing is rolled back unless it is the session's
        last_seq (LAST_SEQ_MISMATCH, as AppendMessages)."""
        if key is not None:
            check_key(key.request_id, "request_id")
        check_session_id(session_id)
        scope = RequestScope("RollbackTurn", session_id, tenant_of(session_id))
        async with self.rt.hot.lock(session_id):
            ctx = await self.rt.context_locked(session_id, verify=True)
            stored = await self.rt.replay(scope, key)
            if stored is not None:
                return rollback_from_outcome(stored.outcome)
            _check_last_seq(ctx, expected_last_seq)
            if ctx.crosses_checkpoint(to_seq):
                assert to_seq is not None
                return await self._rollback_across(
                    ctx, to_seq, error_message, provider_error, scope, key
                )
            return await self._rollback_within(
                ctx, to_seq, error_message, provider_error, scope, key
            )

    async def _rollback_within(
        self,
        ctx: SessionContext,
        to_seq: int | None,
        error_message: str,
        provider_error: ProviderError | None,
        scope: RequestScope,
        key: IdempotencyKey | None,
    ) -> RollbackResult:
        """Drop the trailing failed turn (``to_seq`` None) or the messages from
        ``to_seq`` on, all after the current checkpoint (caller holds the lock)."""
        sid = ctx.session.session_id
        seqs = ctx.plan_rollback(to_seq)
        failures = ctx.session.consecutive_failures + (1 if seqs and to_seq is None else 0)
        result = self._decide(ctx, seqs, failures, error_message, provider_error)
        if not seqs and key is None:
            return result  # nothing to store
        now = ids.now_us()
        gone = set(seqs)
        remaining = sum(e.token_count for e in ctx.entries if e.message.seq not in gone)
        new_session = replace(
            ctx.session,
            consecutive_failures=failures,
            context_tokens=ctx.fixed_tokens + remaining,
            update_time_us=now,
            version=ctx.session.version + 1,
        )
        try:
            written = await self.rt.write(
                sid,
                lambda: self.rt.store.messages.rollback(
                    new_session,
                    expected_version=ctx.session.version,
                    seqs=seqs,
                    record=self.rt.record(scope, key, rollback_outcome(result)),
                ),
            )
        except DuplicateKey:
            stored = await self.rt.replay(scope, key)
            if stored is None:
                raise self.rt.concurrent(sid) from None
            return rollback_from_outcome(stored.outcome)
        if not written:
            raise self.rt.concurrent(sid)
        ctx.apply_rollback(seqs, failures, now)
        ctx.session = replace(ctx.session, version=new_session.version)
        if seqs and ctx.session.parent_session_id and min(seqs) <= ctx.session.parent_seq:
            # The fork now holds what it inherited from there on.
            ctx.session = replace(ctx.session, parent_seq=min(seqs) - 1)
        ctx.checked_at = self.rt.clock()
        if seqs:
            self.rt.hot.recheck_forks_of(sid)
        return result

    def _decide(
        self,
        ctx: SessionContext,
        seqs: list[int],
        failures: int,
        error_message: str,
        provider_error: ProviderError | None,
    ) -> RollbackResult:
        """What the agent should do next (retry, compact, fail) after this rollback."""
        error = error_message or last_failure_message(ctx.active_messages, seqs)
        recovery = self._recovery(error, provider_error, failures)
        if not seqs and not error and provider_error is None:
            reason = "nothing to roll back"
        else:
            reason = recovery.reason
        return RollbackResult(tuple(seqs), recovery.action, recovery.retry_after_seconds, reason)

    def _recovery(
        self, error_message: str, provider_error: ProviderError | None, failures: int
    ) -> Recovery:
        retries = self.rt.settings.max_retries
        if provider_error is None:
            return decide_recovery(error_message, failures, retries)
        seen = classify_provider_error(provider_error, ids.now_us() / 1_000_000)
        text = f"{seen.code}: {seen.message}" if seen.code else seen.message
        return decide(seen.kind, text, failures, retries, seen.retry_after_seconds)

    async def _rollback_across(
        self,
        ctx: SessionContext,
        to_seq: int,
        error_message: str,
        provider_error: ProviderError | None,
        scope: RequestScope,
        key: IdempotencyKey | None,
    ) -> RollbackResult:
        """Rewind to before the checkpoint: supersede it, fall back, reload."""
        ctx.plan_rollback(to_seq)  # validates to_seq
        sid = ctx.session.session_id
        failures = ctx.session.consecutive_failures
        recovery = self._recovery(error_message, provider_error, failures)
        now = ids.now_us()
        session = replace(ctx.session, update_time_us=now, version=ctx.session.version + 1)
        told = error_message or provider_error is not None
        reason = recovery.reason if told else f"rewound to seq {to_seq}"

        def record(seqs: list[int]) -> RequestRecord | None:
            result = RollbackResult(
                tuple(seqs), recovery.action, recovery.retry_after_seconds, reason
            )
            return self.rt.record(scope, key, rollback_outcome(result))

        try:
            rewind = await self.rt.db(
                lambda: self.rt.store.checkpoints.rollback_across_checkpoints(
                    session, expected_version=ctx.session.version, to_seq=to_seq, record=record
                )
            )
        except ConcurrentWrite:
            raise self.rt.concurrent(sid) from None
        except DuplicateKey:
            stored = await self.rt.replay(scope, key)
            if stored is None:
                raise self.rt.concurrent(sid) from None
            return rollback_from_outcome(stored.outcome)
        finally:
            # The effective context now starts at an older checkpoint (or at the
            # beginning): reload it from the database on the next call.
            self.rt.hot.evict(sid)
            self.rt.hot.recheck_forks_of(sid)
        log.info("session %s rewound to %d; checkpoint now %r", sid, to_seq, rewind.current)
        return RollbackResult(
            rewind.rolled_back, recovery.action, recovery.retry_after_seconds, reason
        )


def _check_last_seq(ctx: SessionContext, expected_last_seq: int | None) -> None:
    """LAST_SEQ_MISMATCH unless ``expected_last_seq`` (when given) is the last_seq."""
    last_seq = ctx.session.last_seq
    if expected_last_seq is not None and expected_last_seq != last_seq:
        raise Aborted(
            f"expected_last_seq {expected_last_seq} does not match the "
            f"session's last_seq {last_seq}; nothing was rolled back",
            reason=ErrorReason.LAST_SEQ_MISMATCH,
            metadata={"last_seq": str(last_seq)},
        )
