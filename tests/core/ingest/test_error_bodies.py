"""A provider's error body is not a model output: AppendModelOutput refuses it
and points to RollbackTurn(provider_error=...), which classifies it.

The bodies are the providers' error envelopes as their APIs send them (built
with the SDKs' error types where they have one). A response that carries an
error in its own shape (OpenAI Responses ``status: failed``, an Anthropic stream
that fails after it started) is still a failed turn.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic.types as at
import pytest
from openai.types.shared import ErrorObject

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.ingest import ingest_response
from ctxwarden.core.messages import StopReason
from ctxwarden.core.render import Format
from tests.core.ingest import sdk_fixtures as fx


def _openai(code: str, kind: str, message: str) -> Any:
    error = ErrorObject(message=message, type=kind, param=None, code=code)
    return {"error": error.model_dump(mode="json")}


def _anthropic() -> Any:
    error = at.OverloadedError(type="overloaded_error", message="Overloaded")
    body = at.ErrorResponse(type="error", error=error, request_id="req_011CTest")
    return body.model_dump(mode="json")


GEMINI_429 = {
    "error": {
        "code": 429,
        "message": "Resource has been exhausted (e.g. check quota).",
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"},
        ],
    }
}
"""A Gemini API error (google.rpc.Status in the REST API's envelope)."""

ENVELOPES: dict[str, tuple[Format, Any, str]] = {
    "openai-chat": (
        Format.OPENAI_CHAT,
        _openai("rate_limit_exceeded", "requests", "Rate limit reached for gpt-4o"),
        "rate_limit_exceeded",
    ),
    "openai-responses": (
        Format.OPENAI_RESPONSES,
        _openai("context_length_exceeded", "invalid_request_error", "Your input exceeds it"),
        "context_length_exceeded",
    ),
    "anthropic": (Format.ANTHROPIC_MESSAGES, _anthropic(), "overloaded_error"),
    "anthropic-stream": (Format.ANTHROPIC_MESSAGES, [_anthropic()], "overloaded_error"),
    "gemini": (Format.GEMINI, GEMINI_429, "RESOURCE_EXHAUSTED"),
    "gemini-array": (Format.GEMINI, [GEMINI_429], "RESOURCE_EXHAUSTED"),
}


@pytest.mark.parametrize("case", sorted(ENVELOPES))
def test_an_error_body_is_refused_with_a_pointer_to_rollback_turn(case: str) -> None:
    fmt, body, code = ENVELOPES[case]
    with pytest.raises(InvalidArgument) as info:
        ingest_response(fmt, json.loads(json.dumps(body)))
    error = info.value
    assert (error.reason, error.field) == ("PROVIDER_ERROR_OUTPUT", "response_json")
    assert code in error.message
    assert "RollbackTurn" in error.message and "provider_error" in error.message


def test_an_error_body_of_another_provider_is_refused_too() -> None:
    with pytest.raises(InvalidArgument) as info:
        ingest_response(Format.GEMINI, _anthropic())
    assert info.value.reason == "PROVIDER_ERROR_OUTPUT"


def test_errors_inside_a_response_stay_failed_turns() -> None:
    text = fx.responses_output([{"role": "assistant", "content": "partial"}])
    failed = fx.response(text, "failed", error={"code": "server_error", "message": "boom"})
    (message,) = ingest_response(Format.OPENAI_RESPONSES, fx.dump(failed)).messages
    assert (message.stop_reason, message.error_message) == (StopReason.ERROR, "boom")

    blocks = [{"type": "text", "text": "Hel"}]
    events = [fx.dump(e) for e in fx.anthropic_events(fx.anthropic_message(blocks, "end_turn"))]
    events[3:] = [_anthropic()]  # the stream fails after its first text delta
    (message,) = ingest_response(Format.ANTHROPIC_MESSAGES, events).messages
    assert (message.stop_reason, message.error_message) == (StopReason.ERROR, "Overloaded")
    assert message.text == "Hel"
