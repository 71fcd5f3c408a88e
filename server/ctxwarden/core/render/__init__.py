"""Rendering a model input in a provider's wire schema. Pure: no I/O.

``render`` returns the request-body fragment (system prompt, messages, tools;
never model, max_tokens or other call parameters) as compact JSON whose key
order is fixed by construction, so the same input always gives the same bytes.

Prompt caching: for a transcript that grows by whole messages (an assistant
message together with its tool results), the message array of each rendering
only grows at its end, once ``cache_control`` keys are removed (Anthropic's
breakpoint on the last user message moves; that does not affect cache
matching). Anthropic and Gemini merge consecutive same-role messages, which
appends blocks to the last message rather than adding one.

Each provider module documents its choices; what cannot be sent as it is
(thinking for another model, images where only text goes, provider items
kept for another wire format, ...) is reported as
a ``Notice``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

from ctxwarden.core.messages import Message
from ctxwarden.core.model_input import ModelInputView
from ctxwarden.core.render._build import Job, Renderer
from ctxwarden.core.render._common import (
    EMPTY_MESSAGE_OMITTED,
    FIRST_MESSAGE_INSERTED,
    IMAGE_UNSUPPORTED,
    INVALID_TOOL_ARGUMENTS,
    INVALID_TOOL_SCHEMA,
    PROVIDER_CONTENT_DROPPED,
    THINKING_DROPPED,
    TOOL_RESULT_IMAGES_MOVED,
    Notes,
    ToolIds,
    anthropic_tool_id,
    openai_chat_tool_id,
    openai_responses_call_id,
    passthrough,
)
from ctxwarden.core.render.anthropic import AnthropicRenderer
from ctxwarden.core.render.gemini import GeminiRenderer
from ctxwarden.core.render.incremental import RenderState
from ctxwarden.core.render.openai_chat import OpenAIChatRenderer
from ctxwarden.core.render.openai_responses import OpenAIResponsesRenderer
from ctxwarden.core.rendered import Marks, Rendered
from ctxwarden.core.session import ToolDefinition

__all__ = [
    "EMPTY_MESSAGE_OMITTED",
    "FIRST_MESSAGE_INSERTED",
    "IMAGE_UNSUPPORTED",
    "INVALID_TOOL_ARGUMENTS",
    "INVALID_TOOL_SCHEMA",
    "PROVIDER_CONTENT_DROPPED",
    "THINKING_DROPPED",
    "TOOL_RESULT_IMAGES_MOVED",
    "Format",
    "Marks",
    "RenderState",
    "Rendered",
    "anthropic_tool_id",
    "finished",
    "new_state",
    "openai_chat_tool_id",
    "openai_responses_call_id",
    "render",
    "render_view",
]


class Format(enum.IntEnum):
    """Same numbers as the ModelInputFormat enum of the API."""

    NATIVE = 1
    OPENAI_CHAT = 2
    OPENAI_RESPONSES = 3
    ANTHROPIC_MESSAGES = 4
    GEMINI = 5


_RENDERERS: dict[Format, tuple[type[Renderer], Callable[[str], str]]] = {
    Format.OPENAI_CHAT: (OpenAIChatRenderer, openai_chat_tool_id),
    Format.OPENAI_RESPONSES: (OpenAIResponsesRenderer, openai_responses_call_id),
    Format.ANTHROPIC_MESSAGES: (AnthropicRenderer, anthropic_tool_id),
    Format.GEMINI: (GeminiRenderer, passthrough),
}


def new_state(
    fmt: Format, system_prompt: str, tools: Sequence[ToolDefinition], *, model: str
) -> RenderState:
    """An empty rendering for ``fmt`` (not NATIVE) that messages are fed into."""
    renderer, normalize = _RENDERERS[Format(fmt)]
    job = Job(system_prompt, tools, model, Notes(), ToolIds(normalize))
    return RenderState(renderer(job))


def finished(state: RenderState, tail: Sequence[Message] = ()) -> Rendered:
    """``state`` plus ``tail`` as a Rendered (the state is left as it was)."""
    return state.finish(tail)


def render(
    fmt: Format,
    system_prompt: str,
    tools: Sequence[ToolDefinition],
    messages: Sequence[Message],
    *,
    model: str,
) -> Rendered:
    """Render a final model-input view (``ModelInputView.messages``) for ``fmt``.

    ``model`` is the model about to be called: thinking blocks go back only to
    the model that made them (Anthropic, Gemini).
    """
    fmt = Format(fmt)
    if fmt is Format.NATIVE:
        return Rendered("")
    state = new_state(fmt, system_prompt, tools, model=model)
    state.feed(messages)
    return finished(state)


def render_view(fmt: Format, view: ModelInputView, *, model: str = "") -> Rendered:
    """``render`` for a built view, with the session's prompt, tools and model."""
    session = view.session
    return render(
        fmt,
        session.system_prompt,
        session.tools,
        view.messages,
        model=model or session.model,
    )
