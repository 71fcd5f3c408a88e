"""Reading what a model provider returned back into ctxwarden messages. Pure.

The inverse of ``ctxwarden.core.render``, for the same four wire formats:

- ``ingest_response`` reads one call's answer: the response body (parsed
  JSON), or the list of the event payloads (parsed JSON) of one streamed
  call, which it assembles the way the provider's own SDK does. The result is
  an ``IngestedTurn``, normally one assistant message with its content, stop
  reason, usage, model and provider.
- ``ingest_items`` reads a JSON array of input items in the format (OpenAI
  Chat ``messages``, Responses ``input``, Anthropic ``messages``, Gemini
  ``contents``): what an agent would itself put into the next request, e.g.
  its tool results. Items carry no model, so assistant messages get the
  ``model`` given.

Rendering what ``ingest_items`` read gives back what was read, for all that
ctxwarden models: text, images, tool calls and results (ids, names,
arguments), and thinking with its signature. Each provider module documents
its mapping (stop reasons, usage, reasoning, stream assembly).

Content that ctxwarden does not model (server and built-in tool calls and
their results, documents, citations and annotations, files, images by URL,
Gemini executable code, ...) is kept, not rejected: a PROVIDER block whose
``family`` names the wire format (``openai-chat``, ``openai-responses``,
``anthropic``, ``google``) and whose ``provider_json`` is the item's JSON as
sent, which rendering for that format sends back verbatim in its place.
Rendering what ``ingest_items`` read gives back what was read with such items
included.

A provider's error body given as a response (``{"error": ...}``) raises
``InvalidArgument`` with reason PROVIDER_ERROR_OUTPUT, whose message points to
RollbackTurn's ``provider_error``. Other bad input raises ``InvalidArgument``
(reason INVALID_MODEL_OUTPUT) whose ``field`` is the JSON path of the
offending value, e.g.
``response_json.choices[0].message.tool_calls[1].function.arguments``: known
items of the wrong shape, items without a type, system messages among the
items, and what has no place to be kept in its format (e.g. Chat audio output
or annotations). Each provider module lists what it keeps and rejects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.ingest import anthropic, gemini, openai_chat, openai_responses
from ctxwarden.core.ingest._error_body import refuse_error_body
from ctxwarden.core.ingest._messages import IngestedTurn
from ctxwarden.core.ingest.openai_responses import parse_reasoning_signature, reasoning_signature
from ctxwarden.core.messages import Message
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.render import Format

__all__ = [
    "IngestedTurn",
    "ingest_items",
    "ingest_response",
    "parse_reasoning_signature",
    "reasoning_signature",
]

_ResponseReader = Callable[[object, str], IngestedTurn]
_ItemsReader = Callable[[object, str, str], tuple[Message, ...]]

_READERS: dict[Format, tuple[_ResponseReader, _ItemsReader]] = {
    Format.OPENAI_CHAT: (openai_chat.ingest_response, openai_chat.ingest_items),
    Format.OPENAI_RESPONSES: (openai_responses.ingest_response, openai_responses.ingest_items),
    Format.ANTHROPIC_MESSAGES: (anthropic.ingest_response, anthropic.ingest_items),
    Format.GEMINI: (gemini.ingest_response, gemini.ingest_items),
}


def _readers(fmt: Format) -> tuple[_ResponseReader, _ItemsReader]:
    try:
        return _READERS[Format(fmt)]
    except (ValueError, KeyError):
        raise InvalidArgument(
            f"format {fmt!r} has no provider wire form to read",
            reason=ErrorReason.INVALID_FORMAT,
            field="format",
        ) from None


def ingest_response(fmt: Format, body: object, *, field: str = "response_json") -> IngestedTurn:
    """One provider call's answer (a body, or a list of streamed event payloads).

    A provider's error body (``{"error": ...}``) is refused with reason
    PROVIDER_ERROR_OUTPUT: RollbackTurn's ``provider_error`` takes it."""
    reader = _readers(fmt)[0]
    refuse_error_body(body, field)
    return reader(body, field)


def ingest_items(
    fmt: Format,
    items: object,
    *,
    model: str = "",
    field: str = "items_json",
    open_calls: Sequence[tuple[str, str]] = (),
) -> tuple[Message, ...]:
    """A JSON array of input items; assistant messages get ``model``.

    ``open_calls`` are the session's tool calls still waiting for a result,
    (id, name) in call order: Gemini pairs a functionResponse without an id
    with the one of its name."""
    reader = _readers(fmt)[1]
    if Format(fmt) is Format.GEMINI:
        return gemini.ingest_items(items, field, model, open_calls)
    return reader(items, field, model)
