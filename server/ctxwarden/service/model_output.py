"""AppendModelOutput: what the model returned, in its provider's format, appended.

The provider JSON is read by the pure ``core.ingest`` (the inverse of the
renderers) into messages, which are then appended exactly as AppendMessages
appends them (same validation, idempotency scope and guarantees). Gemini items
are read with the session's open calls (``SessionContext.open_calls``), which a
function response without an id is paired with by name; a retry of an applied
request that no longer reads so is answered from the request log.
"""

from __future__ import annotations

import asyncio

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.ingest import ingest_items, ingest_response
from ctxwarden.core.messages import Message
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.render import Format
from ctxwarden.core.validation import MAX_JSON_DEPTH, check_key, check_session_id, load_json
from ctxwarden.service.messages import BIG_WORK_CHARS, Messages
from ctxwarden.service.results import AppendResult, IdempotencyKey
from ctxwarden.service.runtime import SessionRuntime

MAX_OUTPUT_DEPTH = MAX_JSON_DEPTH + 16
"""A provider document nests tool arguments (each at most MAX_JSON_DEPTH deep)
a few levels down."""

_PROVIDER_FORMATS = frozenset(Format) - {Format.NATIVE}


class ModelOutputs:
    def __init__(self, rt: SessionRuntime, messages: Messages) -> None:
        self.rt = rt
        self.messages = messages

    async def append_model_output(
        self,
        session_id: str,
        fmt: int,
        *,
        response_json: str | None,
        items_json: str | None,
        expected_last_seq: int | None,
        key: IdempotencyKey | None,
    ) -> AppendResult:
        """Read ``response_json`` (a response body, or the events of one streamed
        call) or ``items_json`` (input items) in format ``fmt``; append the result."""
        check_session_id(session_id)
        if key is not None:
            check_key(key.request_id, "request_id")
        target = _provider_format(fmt)
        if response_json is None and items_json is None:
            raise InvalidArgument(
                "one of response_json or items_json is required",
                reason=ErrorReason.MISSING_FIELD,
                field="response_json",
            )
        try:
            messages = await self._read(session_id, target, response_json, items_json)
        except InvalidArgument:
            # A retry of an applied request may no longer read (its Gemini function
            # responses paired by name with calls that are answered now): answer it
            # from the request log.
            replayed = None if key is None else await self.messages.replayed(session_id, key)
            if replayed is None:
                raise
            return replayed
        return await self.messages.append(session_id, messages, expected_last_seq, key)

    async def _read(
        self, session_id: str, target: Format, response_json: str | None, items_json: str | None
    ) -> tuple[Message, ...]:
        if response_json is not None:
            text, field = response_json, "response_json"
            model, open_calls = "", []
        else:
            assert items_json is not None
            text, field = items_json, "items_json"
            # Items carry no model: assistant items are the session's model's. Gemini's
            # function responses without an id answer the session's open call by name.
            if target is Format.GEMINI:
                ctx = await self.rt.context(session_id)
                model, open_calls = ctx.session.model, ctx.open_calls()
            else:
                model, open_calls = (await self.rt.get_session(session_id)).model, []

        def read() -> tuple[Message, ...]:
            document = load_json(text, field, MAX_OUTPUT_DEPTH)
            if response_json is not None:
                return ingest_response(target, document).messages
            return ingest_items(target, document, model=model, open_calls=open_calls)

        return await asyncio.to_thread(read) if len(text) > BIG_WORK_CHARS else read()


def _provider_format(fmt: int) -> Format:
    try:
        target = Format(fmt)
    except ValueError:
        target = Format.NATIVE
    if target not in _PROVIDER_FORMATS:
        names = ", ".join(f"MODEL_INPUT_FORMAT_{f.name}" for f in sorted(_PROVIDER_FORMATS))
        raise InvalidArgument(
            f"format must be a provider format ({names})",
            reason=ErrorReason.INVALID_FORMAT,
            field="format",
        )
    return target
