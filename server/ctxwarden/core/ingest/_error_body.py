"""A provider's error body handed to AppendModelOutput in place of a model output.

The providers answer a failed call with an error envelope instead of a
response: OpenAI ``{"error": {"message", "type", "param", "code"}}``, Anthropic
``{"type": "error", "error": {"type", "message"}, "request_id"}`` (also the
first event of a stream that failed before it began), Gemini ``{"error":
{"code", "message", "status", "details"}}`` (sometimes in a one-element array).
It holds no model output, so it is refused, and the message says how to record
the failed call. A response that reports an error in its own shape (OpenAI
Responses ``status: failed``, an Anthropic stream's ``error`` event after
``message_start``) is read as the failed turn it is.
"""

from __future__ import annotations

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason

_SHOWN = 200
"""Characters of the provider's message repeated in ours."""


def _envelope(body: object) -> dict[str, object] | None:
    """The ``error`` object of an error envelope (the body, or a stream's first event)."""
    first = body[0] if isinstance(body, list) and body else body
    if not isinstance(first, dict):
        return None
    error = first.get("error")
    if not isinstance(error, dict):
        return None
    if first.get("type") == "error" or set(first) <= {"error"}:
        return error
    return None


def _describe(error: dict[str, object]) -> str:
    """The provider's codes and message, e.g. ``RESOURCE_EXHAUSTED 429: Quota exceeded``."""
    codes = []
    for key in ("status", "type", "code"):
        value = error.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            codes.append(str(value))
    message = error.get("message")
    text = message.strip()[:_SHOWN] if isinstance(message, str) else ""
    head = " ".join(dict.fromkeys(codes)) or "no code"
    return f"{head}: {text}" if text else head


def refuse_error_body(body: object, field: str) -> None:
    """Raise INVALID_ARGUMENT (PROVIDER_ERROR_OUTPUT) when ``body`` is an error envelope."""
    error = _envelope(body)
    if error is None:
        return
    raise InvalidArgument(
        f"{field} is the provider's error body ({_describe(error)}), not a model output; "
        "nothing was stored. To record the failed call, append the failed assistant message "
        "(AppendMessages: stop_reason STOP_REASON_ERROR, error_message), then call "
        "RollbackTurn with provider_error (http_status, this body, headers): it rolls the "
        "failed turn back and says whether to retry (and when), compact or give up",
        reason=ErrorReason.PROVIDER_ERROR_OUTPUT,
        field=field,
    )


__all__ = ["refuse_error_body"]
