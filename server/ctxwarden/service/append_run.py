"""Streamed appends merged: plain requests of one session that wait on a stream
together are planned as one run and written in one transaction.

Every answer is the one the request would get alone (same seqs, IDs,
last_seq, context_tokens, idempotency records); only the work per request
shrinks (one plan, one compare-and-set of the session row, one commit). What
is not plain (see ``AppendRuns.append_run``) is left to the one-by-one path,
which keeps every edge case's exact semantics and error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from ctxwarden.core.append import AppendPlan, planned_run
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import CtxwardenError, Unavailable
from ctxwarden.core.messages import Message
from ctxwarden.core.validation import check_key, check_messages, check_session_id
from ctxwarden.service.messages import (
    BIG_WORK_CHARS,
    append_outcome,
    append_scope,
    install_append,
    observe_appended,
    text_chars,
)
from ctxwarden.service.results import AppendResult, IdempotencyKey
from ctxwarden.service.runtime import SessionRuntime
from ctxwarden.store.errors import DuplicateKey, TooLarge
from ctxwarden.util import ids


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One request of a run: its messages and its idempotency key."""

    messages: Sequence[Message]
    key: IdempotencyKey | None


class AppendRuns:
    """The merged path of StreamMessages."""

    def __init__(self, rt: SessionRuntime) -> None:
        self.rt = rt

    async def append_run(
        self, session_id: str, run: Sequence[RunRequest]
    ) -> list[AppendResult] | None:
        """Append ``run`` (requests without state delta or expected_last_seq) in
        one write: one result per request, in order. None when the run is not
        plain and nothing was written: the caller appends the requests one by one
        (an invalid request, a duplicate message_id or request_id, a lost
        compare-and-set, an error while planning, much text, a stored body over
        the limit, a write refused: quota, database). An unknown outcome (the
        database was lost) is raised as a lone append raises it."""
        if not self._valid(session_id, run):
            return None
        async with self.rt.hot.lock(session_id):
            try:
                ctx = await self.rt.context_locked(session_id)
                plans = planned_run(
                    ctx, [r.messages for r in run], ids.now_us(), iter(ids.new_id, None), {}
                )
            except CtxwardenError:
                return None
            if any(len(p.new) != len(p.messages) or not p.new for p in plans):
                return None  # a duplicate: its answer is the stored message
            if not await self._write(ctx, run, plans):
                return None
            for plan in plans:
                install_append(self.rt, ctx, plan)
            observe_appended(self.rt, [m for p in plans for m in p.new], ctx.session.model)
            ctx.checked_at = self.rt.clock()
            self.rt.grew(ctx)
        self.rt.metrics.observe_merged(len(run))
        return [AppendResult(p.messages, p.last_seq, p.context_tokens) for p in plans]

    async def _write(
        self, ctx: SessionContext, run: Sequence[RunRequest], plans: Sequence[AppendPlan]
    ) -> bool:
        """Write every plan's messages and every request's record in one append;
        False when nothing was written and the run must go one by one."""
        sid = ctx.session.session_id
        scope = append_scope(sid)
        records = [
            record
            for r, p in zip(run, plans, strict=True)
            if (record := self.rt.record(scope, r.key, append_outcome(p))) is not None
        ]
        try:
            op = self.rt.store.messages.encode_append(
                plans[-1].session,
                expected_version=ctx.session.version,
                messages=[m for p in plans for m in p.new],
                record=None,
                more_records=records,
            )
        except TooLarge:
            return False
        try:
            written = await self.rt.write(sid, lambda: self.rt.store.messages.append(op))
        except DuplicateKey:
            return False
        except Unavailable:
            raise  # the outcome is unknown: no request may be written again
        except CtxwardenError:
            return False  # refused, nothing written (a quota the first requests may fit)
        if not written:
            # Another writer moved the session on: the copy catches up (or is
            # restored) for the one-by-one path, as a lone append's retry does.
            with contextlib.suppress(CtxwardenError):
                await self.rt.reload(sid)
        return written

    def _valid(self, session_id: str, run: Sequence[RunRequest]) -> bool:
        """Whether every request passes the checks a lone append makes first, the
        request_ids differ and the text is small enough to plan on the loop."""
        limit = self.rt.settings.limits.max_messages_per_request
        try:
            check_session_id(session_id)
            for r in run:
                check_messages(r.messages, limit)
                if r.key is not None:
                    check_key(r.key.request_id, "request_id")
        except CtxwardenError:
            return False
        keys = [r.key.request_id for r in run if r.key is not None]
        if len(set(keys)) != len(keys):
            return False
        return sum(text_chars(r.messages) for r in run) <= BIG_WORK_CHARS


__all__ = ["AppendRuns", "RunRequest"]
