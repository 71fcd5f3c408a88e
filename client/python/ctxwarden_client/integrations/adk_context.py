"""Google ADK: each model request follows ctxwarden's effective context (a plugin).

    from google.adk.apps import App
    from google.adk.runners import Runner
    from ctxwarden_client.integrations.adk import CtxwardenSessionService
    from ctxwarden_client.integrations.adk_context import CtxwardenContextPlugin

    service = CtxwardenSessionService(client, template=session_pb2.Session(policy=...))
    app = App(name="shop", root_agent=agent, plugins=[CtxwardenContextPlugin(service)])
    runner = Runner(app=app, session_service=service)

With :class:`~ctxwarden_client.integrations.adk.CtxwardenSessionService` alone, ADK
stores its events in ctxwarden but still builds every model request from all of them.
Before each model call, :class:`CtxwardenContextPlugin` reads the session's effective
context (``BuildModelInput``), compacting first when ctxwarden recommends it (with
``summarizer=``, your LLM, through ``PrepareCompaction`` and ``CommitCompaction``;
without it, with the server's summariser through ``auto_compact``), and edits the
request's contents to match it:

- the contents ADK made of the events a compaction summarised are replaced, where they
  stood, by ctxwarden's prefix messages: its memory block and the summary (user
  contents);
- a tool output ctxwarden truncated or stubbed is sent as ctxwarden shows it, as the
  function response ``{"result": <text>}``;
- everything else stays as ADK made it: the kept events' contents (with ADK's handling
  of function-call ids and of other agents' messages), the contents ADK adds itself
  (instructions, task input), the system instruction, the tools and the config.

So until ctxwarden changes something (a compaction, a truncated or stubbed tool output,
a memory block) the request is exactly the one ADK built. A content is taken to come
from an event when it equals that event's content, function-call ids aside (ADK sends
copies of event contents), matched in order from the newest; a content ADK derives
from an event in its own way (another agent's reply, rewritten as "For context: ...")
matches none and stays. Only public ADK API is used.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from google.adk.agents.callback_context import CallbackContext
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types

from .._errors import AbortedError, FailedPreconditionError, NotFoundError
from ..v1 import context_service_pb2 as pb
from ..v1 import message_pb2 as m
from ._compaction import Summarizer, compact_with
from .adk import CtxwardenSessionService
from .adk_events import ENVELOPE_KEY

__all__ = ["CtxwardenContextPlugin", "EffectiveContext", "apply_context", "effective_context"]

logger = logging.getLogger(__name__)
_T = TypeVar("_T")
_Read = tuple[bool, "EffectiveContext"]
"""(compaction recommended, the effective context)"""

CHANGED_OUTPUT = frozenset({"TOOL_OUTPUT_TRUNCATED", "TOOL_OUTPUT_STUBBED"})
"""Notices of a tool result that the effective context shows changed."""


@dataclass(frozen=True)
class EffectiveContext:
    """What ctxwarden's effective context changes in the contents ADK builds."""

    prefix: list[types.Content]
    """ctxwarden's messages before the history: memory block, compaction summary."""
    compacted: bool
    """A checkpoint is in effect: the events before the first kept one are summarised."""
    kept: frozenset[str]
    """The IDs of the events in the effective context."""
    outputs: dict[str, str]
    """Event ID -> its tool output as the effective context shows it (truncated, stubbed)."""

    @property
    def changes_nothing(self) -> bool:
        return not (self.prefix or self.compacted or self.outputs)


def _text(message: m.Message) -> str:
    return "".join(b.text.text for b in message.content if b.WhichOneof("block") == "text")


def _event_id(message: m.Message) -> str | None:
    raw = message.metadata.get(ENVELOPE_KEY)
    event_id = json.loads(raw).get("id") if raw else None
    return event_id if isinstance(event_id, str) else None


def effective_context(model_input: pb.ModelInput) -> EffectiveContext:
    """The edits of a ``BuildModelInput`` answer (view FULL) for ADK's contents."""
    messages = list(model_input.messages)
    n = 0
    while n < len(messages) and ENVELOPE_KEY not in messages[n].metadata:
        n += 1
    prefix = [
        types.Content(
            role="model" if msg.role == m.ROLE_ASSISTANT else "user",
            parts=[types.Part(text=_text(msg))],
        )
        for msg in messages[:n]
    ]
    changed = {n.seq for n in model_input.notices if n.code in CHANGED_OUTPUT}
    kept: set[str] = set()
    outputs: dict[str, str] = {}
    for msg in messages[n:]:
        event_id = _event_id(msg)
        if event_id is None:
            continue  # e.g. a synthetic result for a call left open: ADK has its own rule
        kept.add(event_id)
        if msg.seq in changed and msg.role == m.ROLE_TOOL_RESULT:
            outputs[event_id] = _text(msg)
    return EffectiveContext(prefix, bool(model_input.compaction_id), frozenset(kept), outputs)


def _key(content: types.Content) -> str:
    """A content as comparable text, function-call ids left out (ADK drops its own
    ``adk-`` ids from the copies it sends to most models)."""
    data: dict[str, Any] = content.model_dump(mode="json", exclude_none=True)
    for part in data.get("parts") or []:
        for name in ("function_call", "function_response"):
            value = part.get(name)
            if isinstance(value, dict):
                value.pop("id", None)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _with_output(content: types.Content, text: str) -> types.Content:
    parts = []
    for part in content.parts or []:
        if part.function_response is not None:
            response = part.function_response.model_copy(update={"response": {"result": text}})
            part = part.model_copy(update={"function_response": response})
        parts.append(part)
    return content.model_copy(update={"parts": parts})


def _events_of(contents: Sequence[types.Content], events: Sequence[Event]) -> list[int | None]:
    """For each content, the index of the event it was made of (None: none of them).

    Matched from the end, each content to the latest event not after the one matched
    to the content after it: the kept events are the history's tail, so a content that
    could be a compacted event's or a kept one's is taken for the kept one's."""
    positions: dict[str, list[int]] = {}
    for i, event in enumerate(events):
        if event.content is not None and event.content.parts:
            positions.setdefault(_key(event.content), []).append(i)
    found: list[int | None] = [None] * len(contents)
    j = len(events) - 1
    for k in range(len(contents) - 1, -1, -1):
        candidates = positions.get(_key(contents[k]), [])
        at = bisect.bisect_right(candidates, j) - 1
        if at >= 0:
            found[k] = j = candidates[at]
            j -= 1
    return found


def apply_context(
    contents: Sequence[types.Content], events: Sequence[Event], context: EffectiveContext
) -> list[types.Content]:
    """ADK's ``contents`` (built from ``events``) edited to follow ``context``: the
    contents of compacted events dropped, the prefix where the first of them was (with
    nothing compacted: before the content of the session's first event, when ADK sends
    it), changed tool outputs put in; other contents stay as they are."""
    cut = 0
    if context.compacted:
        cut = next((i for i, e in enumerate(events) if e.id in context.kept), len(events))
    said = (
        i
        for i, e in enumerate(events)
        if e.content is not None and any(not p.thought for p in e.content.parts or [])
    )
    first = next(said, -1)
    out: list[types.Content] = []
    prefix_at: int | None = None
    for content, i in zip(contents, _events_of(contents, events), strict=True):
        if i is not None and (i < cut or i == first) and prefix_at is None:
            prefix_at = len(out)
        if i is not None and i < cut:
            continue
        output = None if i is None else context.outputs.get(events[i].id)
        out.append(content if output is None else _with_output(content, output))
    if prefix_at is not None:
        out[prefix_at:prefix_at] = context.prefix
    return out


class CtxwardenContextPlugin(BasePlugin):  # type: ignore[misc,unused-ignore]
    """An ADK plugin (``App(plugins=[...])``) that sends the model ctxwarden's effective
    context of the session that ``service`` stores (see the module docstring).

    ``compact=False``: never compacts (a compaction made elsewhere still applies).
    ``summarizer``: ``(system, prompt, max_tokens) -> summary``, sync or async."""

    def __init__(
        self,
        service: CtxwardenSessionService,
        *,
        summarizer: Summarizer | None = None,
        compact: bool = True,
        name: str = "ctxwarden_context",
    ) -> None:
        super().__init__(name)
        self.service = service
        self.client = service.client
        self._summarizer = summarizer
        self._compact = compact
        self._warned: set[str] = set()

    async def _run(self, fn: Callable[[], _T]) -> _T:
        return await asyncio.to_thread(fn)

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        session = callback_context.session
        sid = self.service.key(session.app_name, session.user_id, session.id)
        config = llm_request.config
        context = await self.context(sid, (config.max_output_tokens if config else None) or 0)
        if context is not None and not context.changes_nothing:
            llm_request.contents = apply_context(llm_request.contents, session.events, context)
        return None

    def _read(self, sid: str, max_output: int, auto_compact: bool = False) -> _Read | None:
        try:
            built = self.client.build_model_input(
                sid,
                max_output,
                auto_compact=auto_compact,
                incremental=True,
                view=pb.MODEL_INPUT_VIEW_FULL,
            )
        except NotFoundError:
            return None
        # An incremental input is the client's cached object: read it in this thread.
        return built.compaction_recommended, effective_context(built)

    async def context(self, sid: str, max_output_tokens: int = 0) -> EffectiveContext | None:
        """The effective context of ctxwarden session ``sid``, compacted first when
        ctxwarden recommends it; None when there is no such session."""
        read = await self._run(lambda: self._read(sid, max_output_tokens))
        if read is not None and read[0] and self._compact:
            read = await self._compacted(sid, max_output_tokens)
            if read is not None and read[0] and sid not in self._warned:
                self._warned.add(sid)
                logger.warning(
                    "ctxwarden session %s is over its compaction threshold and was not "
                    "compacted (without summarizer= the server needs serve --summarizer)",
                    sid,
                )
        return None if read is None else read[1]

    async def _compacted(self, sid: str, max_output: int) -> _Read | None:
        if self._summarizer is None:
            return await self._run(lambda: self._read(sid, max_output, auto_compact=True))
        try:
            await compact_with(self.client, sid, self._summarizer, self._run)
        except FailedPreconditionError as exc:
            if exc.reason != "NOTHING_TO_COMPACT":
                logger.warning("ctxwarden session %s was not compacted", sid, exc_info=True)
        except AbortedError:
            pass  # another compaction of the session came first: its result is read next
        return await self._run(lambda: self._read(sid, max_output))
