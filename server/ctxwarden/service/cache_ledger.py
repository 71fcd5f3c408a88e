"""The cache ledger's bookkeeping: the previous live input of each session and
format (its shape, by reference), each new input compared with it
(core.cache_prefix), and the session's totals moved on in its hot copy (they
are stored with the session's next write, like every progress column)."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from ctxwarden.core.cache_prefix import CachePrefix, InputShape, compare_steps, message_bytes
from ctxwarden.core.model_input import ModelInputView, tools_text
from ctxwarden.core.render import Format
from ctxwarden.util.loop_slices import finished

if TYPE_CHECKING:
    from ctxwarden.service.runtime import SessionRuntime


def shape_of(view: ModelInputView, prev: InputShape | None) -> InputShape:
    """``view``'s shape; byte counts of unchanged parts are taken from ``prev``."""
    s, t = view.session, view.tokens
    lead = view.messages[: view.summary_messages]
    if prev is not None and prev.system_prompt is s.system_prompt and prev.tools is s.tools:
        head_bytes = prev.head_bytes
    else:
        head_bytes = len(s.system_prompt.encode()) + len(tools_text(s.tools).encode())
    lead_key = (view.summary, s.memory.text)
    if prev is not None and prev.lead_key == lead_key:
        lead_bytes = prev.lead_bytes
    else:
        lead_bytes = sum(message_bytes(m) for m in lead)
    return InputShape(
        model=s.model,
        system_prompt=s.system_prompt,
        tools=s.tools,
        head_tokens=t.system_tokens + t.tools_tokens,
        head_bytes=head_bytes,
        checkpoint=view.compaction_id,
        lead_key=lead_key,
        lead_tokens=t.memory_tokens + t.summary_tokens,
        lead_bytes=lead_bytes,
        kept=view.messages[view.summary_messages :],
        digests=view.digests,
        kept_tokens=t.message_tokens,
        kept_bytes=0,
        marks=view.rendered.marks if view.rendered is not None else None,
    )


class CachePrefixes:
    """The previous input of the ``capacity`` most recently built (session, format)s."""

    def __init__(self, rt: SessionRuntime, capacity: int) -> None:
        self.rt = rt
        self.capacity = max(1, capacity)
        self._previous: OrderedDict[tuple[str, int], InputShape] = OrderedDict()
        # A copy rebuilt with a new tokenizer or model keeps them: the messages are the
        # same to a provider, only counted anew (core.cache_prefix compares them so).
        rt.hot.on_evict(self.forget, on_rebuild=False)

    async def observe(self, view: ModelInputView, fmt: int) -> CachePrefix:
        """Compare a live input with the previous one and count it in the ledger. A
        first input measures every kept message: that is done a slice at a time."""
        sid = view.session.session_id
        key = (sid, fmt if fmt else int(Format.NATIVE))
        prev = self._previous.get(key)
        prefix, shape = await finished(compare_steps(prev, shape_of(view, prev)))
        self._previous.pop(key, None)  # the newest input of the key, most recently used
        self._previous[key] = shape
        if len(self._previous) > self.capacity:
            self._previous.popitem(last=False)
        self.rt.hot.count_build(sid, prefix)
        self.rt.metrics.observe_cache_prefix(prefix)
        return prefix

    def forget(self, session_id: str) -> None:
        """A session left memory: so does its previous inputs' shape (it holds
        references to their messages); its next input is a first one."""
        for fmt in Format:
            self._previous.pop((session_id, int(fmt)), None)
