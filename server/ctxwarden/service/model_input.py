"""BuildModelInput: the live input (compacting first if asked) or an exact replay."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

import ctxwarden.service.slices as slices
from ctxwarden.core.context import ModelInputView, SessionContext
from ctxwarden.core.errors import (
    FailedPrecondition,
    InvalidArgument,
)
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.render import Format, Rendered
from ctxwarden.core.session import CompactionTrigger, effective_policy
from ctxwarden.service.cache_ledger import CachePrefixes
from ctxwarden.service.compaction import Compactor
from ctxwarden.service.memories import MemoryBlocks
from ctxwarden.service.rendered_cache import RenderedCache, plan, run
from ctxwarden.service.runtime import SessionRuntime
from ctxwarden.service.tokenizer_access import tokenizer_for

log = logging.getLogger(__name__)


class ModelInputs:
    """BuildModelInput: the live input (compacting first if asked) or an exact replay."""

    def __init__(
        self,
        rt: SessionRuntime,
        compactor: Compactor,
        wait_running: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        """``wait_running(session_id)``: wait for the session's background
        compaction summarising now, if any (True: there was one)."""
        self.rt = rt
        self.compactor = compactor
        self.wait_running = wait_running
        self.blocks = MemoryBlocks(rt)
        self.rendered = RenderedCache(max(0, rt.settings.encoding_cache_mb) * 1024 * 1024)
        self.prefixes = CachePrefixes(rt, len(Format) * rt.settings.max_hot_sessions)

    # -- model input ------------------------------------------------------------

    async def build_model_input(
        self,
        session_id: str,
        max_output_tokens: int,
        auto_compact: bool = False,
        as_of_seq: int | None = None,
        fmt: int = 0,
        refresh_memory: bool = False,
        *,
        count_cache: bool = False,
        report_cache: bool = False,
    ) -> ModelInputView:
        """``count_cache``: count a live input in the cache ledger (service.cache_ledger);
        ``report_cache``: and return what it shares with the previous one."""
        if refresh_memory and as_of_seq is None:
            await self.blocks.refresh(session_id)
        view = await self._build_model_input(session_id, max_output_tokens, auto_compact, as_of_seq)
        if fmt in (0, Format.NATIVE):
            return await self._cache_prefix(view, fmt, count_cache, report_cache)
        try:
            target = Format(fmt)
        except ValueError:
            raise InvalidArgument(
                f"format {fmt} is unknown", reason=ErrorReason.INVALID_FORMAT, field="format"
            ) from None
        rendered = await self._render(target, view, max_output_tokens)
        view = replace(view, notices=view.notices + tuple(rendered.notices), rendered=rendered)
        return await self._cache_prefix(view, fmt, count_cache, report_cache)

    async def _cache_prefix(
        self, view: ModelInputView, fmt: int, count: bool, report: bool
    ) -> ModelInputView:
        if not view.live or not (count or report):
            return view
        prefix = await self.prefixes.observe(view, fmt)
        return replace(view, cache=prefix) if report else view

    async def _render(
        self, target: Format, view: ModelInputView, max_output_tokens: int
    ) -> Rendered:
        """The view rendered for ``target``, continuing the session's render state."""
        model = view.session.model
        if not (view.live and view.digests):  # a one-off: nothing to continue or keep
            return await slices.render_view(target, view, model)
        key = (view.session.session_id, int(target))
        entry = self.rendered.take(key)
        memo = (view.session.version, max_output_tokens)
        if entry is not None and entry.last is not None and entry.last[0] == memo:
            self.rendered.hits += 1
            rendered = entry.last[1]
        else:
            job = plan(entry, target, view, model)
            if job.entry is entry:
                self.rendered.resumed += 1
            if job.inline:
                rendered = run(job, view)
            elif slices.ENABLED:  # a first rendering of a long session: in slices
                await slices.feed(job.entry.state, view.messages, view.stable_messages)
                rendered = run(job, view)
            else:
                rendered = await asyncio.to_thread(run, job, view)
            entry = job.entry
            entry.last = (memo, rendered)
        self.rendered.put(key, entry)
        return rendered

    async def _build_model_input(
        self,
        session_id: str,
        max_output_tokens: int,
        auto_compact: bool,
        as_of_seq: int | None,
    ) -> ModelInputView:
        if max_output_tokens < 0:
            raise InvalidArgument(
                "max_output_tokens must be >= 0",
                reason=ErrorReason.INVALID_MAX_OUTPUT_TOKENS,
                field="max_output_tokens",
            )
        ctx = await self.rt.context(session_id)
        if as_of_seq is not None:
            return await self._replay_input(ctx, as_of_seq, max_output_tokens)
        view = ctx.model_input(max_output_tokens)
        # An archived session is read-only: a read never compacts it.
        may_compact = auto_compact and not ctx.session.archived
        has_summarizer = self.compactor.summarizer is not None
        waits = may_compact and view.compaction_recommended and has_summarizer
        # Past the hard threshold: wait for a background compaction summarising
        # now rather than start a second one, and compact here only if still needed.
        if waits and self.wait_running is not None and await self.wait_running(session_id):
            ctx = await self.rt.context(session_id)
            view = ctx.model_input(max_output_tokens)
        # Layered clearing (service.layered) needs no summariser.
        layered = ctx.policy.clear_tool_results_at_least > 0
        if may_compact and view.compaction_recommended and (self.compactor.summarizer or layered):
            try:
                await self.compactor.compact(session_id, "", 0, None, CompactionTrigger.THRESHOLD)
            except FailedPrecondition as exc:
                if exc.reason not in (ErrorReason.NOTHING_TO_COMPACT, ErrorReason.NO_SUMMARIZER):
                    raise
            ctx = await self.rt.context(session_id)
            view = ctx.model_input(max_output_tokens)
        self.rt.grew(ctx)
        self.rt.metrics.observe_model_input(view.tokens)
        return view

    async def _replay_input(
        self, live: SessionContext, as_of_seq: int, max_output_tokens: int
    ) -> ModelInputView:
        """The input exactly as it was just before message ``as_of_seq`` was appended."""
        sid = live.session.session_id
        last = live.session.last_seq
        if not 1 <= as_of_seq <= last + 1:
            raise InvalidArgument(
                f"as_of_seq must be between 1 and last_seq + 1 ({last + 1})",
                reason=ErrorReason.INVALID_SEQ,
                field="as_of_seq",
            )
        snap = await self.rt.db(lambda: self.rt.store.replay_snapshot(sid, as_of_seq))
        if snap is None:
            raise self.rt.not_found(sid)
        s = snap.session
        tokenizer = await tokenizer_for(effective_policy(s.policy, s.model).tokenizer)

        # Counts are recomputed with the tokenizer and model of that time (a later
        # change of either re-counted the stored ones); built a slice at a time.
        ctx = await slices.session_context(s, snap.checkpoint, snap.kept, tokenizer, recount=True)
        # A one-off input: its encodings would only crowd out those of hot sessions.
        return replace(ctx.model_input(max_output_tokens), live=False)
