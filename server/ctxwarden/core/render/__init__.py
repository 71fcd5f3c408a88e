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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ctxwarden.core.messages import Message
from ctxwarden.core.model_input import ModelInputView
from ctxwarden.core.render._build import Job
from ctxwarden.core.render._common import (
    EMPTY_MESSAGE_OMITTED,
    FIRST_MESSAGE_INSERTED,
    IMAGE_UNSUPPORTED,
    INVALID_TOOL_ARGUMENTS,
    INVALID_TOOL_SCHEMA,
    PROVIDER_CONTENT_DROPPED,
    THINKING_DROPPED,
    TOOL_RESULT_IMAGES_MOVED,
    JsonObject,
    Notes,
    ToolIds,
    anthropic_tool_id,
    dumps,
    openai_chat_tool_id,
    openai_responses_call_id,
    passthrough,
)
from ctxwarden.core.render.anthropic import render_anthropic
from ctxwarden.core.render.gemini import render_gemini
from ctxwarden.core.render.openai_chat import render_openai_chat
from ctxwarden.core.render.openai_responses import render_openai_responses
from ctxwarden.core.session import ToolDefinition
from ctxwarden.core.view import Notice

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
    "Rendered",
    "anthropic_tool_id",
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


@dataclass(frozen=True, slots=True)
class Rendered:
    json: str
    """The request-body fragment; "" for NATIVE."""
    notices: tuple[Notice, ...] = ()
    """What had to change to fit the provider, in input order."""
    tool_id_map: Mapping[str, str] = field(default_factory=dict)
    """Rendered tool-call id -> original id, for every id that was rewritten
    (to fit the provider's charset or length, or to keep ids unique), for
    reading the rendered transcript back. Ids of the provider's new tool calls
    are its own and need no mapping."""


_Renderer = Callable[[Job], JsonObject]

_RENDERERS: dict[Format, tuple[_Renderer, Callable[[str], str]]] = {
    Format.OPENAI_CHAT: (render_openai_chat, openai_chat_tool_id),
    Format.OPENAI_RESPONSES: (render_openai_responses, openai_responses_call_id),
    Format.ANTHROPIC_MESSAGES: (render_anthropic, anthropic_tool_id),
    Format.GEMINI: (render_gemini, passthrough),
}


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
    renderer, normalize = _RENDERERS[fmt]
    notes = Notes()
    ids = ToolIds(normalize)
    body = renderer(Job(system_prompt, tools, messages, model, notes, ids))
    return Rendered(dumps(body), tuple(notes.items), dict(ids.rewritten))


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
