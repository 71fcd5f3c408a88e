"""A long session's rendering and restore, in slices (see ctxwarden.util.loop_slices)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import Message
from ctxwarden.core.model_input import ModelInputView
from ctxwarden.core.render import Format, Rendered, RenderState, finished, new_state
from ctxwarden.core.session import Checkpoint, Session
from ctxwarden.core.tokens import Tokenizer
from ctxwarden.util.loop_slices import ENABLED, Slicer

__all__ = ["ENABLED", "feed", "render_view", "session_context"]

THREAD_FROM = 2000
"""Without slicing, a restore of more messages than this is built in a worker thread."""

FEED_STEP = 64
"""Messages rendered between two looks at the clock."""


async def feed(state: RenderState, messages: Sequence[Message], end: int) -> None:
    """Feed ``messages[state.fed:end]`` to a render state, a slice at a time."""
    slicer = Slicer()
    while state.fed < end:
        step = min(end, state.fed + FEED_STEP)
        state.feed(messages[state.fed : step])
        if slicer.due():
            await slicer.pause()


async def render_view(fmt: Format, view: ModelInputView, model: str) -> Rendered:
    """``core.render.render_view`` (not NATIVE), fed in slices."""
    s = view.session
    if not ENABLED:
        from ctxwarden.core.render import render_view as whole

        return await asyncio.to_thread(whole, fmt, view, model=model)
    state = new_state(fmt, s.system_prompt, s.tools, model=model or s.model)
    await feed(state, view.messages, len(view.messages))
    return finished(state)


async def session_context(
    session: Session,
    checkpoint: Checkpoint | None,
    kept: list[Message],
    tokenizer: Tokenizer,
    *,
    recount: bool = False,
) -> SessionContext:
    """``SessionContext(session, checkpoint, kept, tokenizer, recount=...)`` with its
    view built ahead, a slice at a time (a restore or a replay of a long session)."""
    if not ENABLED:

        def whole() -> SessionContext:
            return SessionContext(session, checkpoint, kept, tokenizer, recount=recount)

        return await asyncio.to_thread(whole) if len(kept) > THREAD_FROM else whole()
    ctx = SessionContext(session, checkpoint, (), tokenizer)
    slicer = Slicer()
    for _ in ctx.restore_steps(kept, recount=recount):
        if slicer.due():
            await slicer.pause()
    return ctx
