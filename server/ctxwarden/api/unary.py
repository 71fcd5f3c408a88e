"""The wrapper every unary handler of ContextService goes through, and the
idempotency key of a request (shared by the servicer and its handler mixins)."""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from ctxwarden.api.errors import internal_status, to_status
from ctxwarden.api.handlers import Malformed
from ctxwarden.api.responses import check_response_size, response_size
from ctxwarden.core.errors import CtxwardenError, InvalidArgument
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.service.results import IdempotencyKey

log = logging.getLogger("ctxwarden.rpc")

Handler = Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]


def check_decoded(request: object) -> None:
    if isinstance(request, Malformed):
        raise InvalidArgument(
            f"the request is not valid protobuf ({request.error}); string fields must be "
            "valid UTF-8",
            reason=ErrorReason.MALFORMED_REQUEST,
        )


def unary(fn: Handler) -> Handler:
    """Map domain errors to rich gRPC statuses; hide unexpected errors as INTERNAL.

    A response larger than the server may send is RESPONSE_TOO_LARGE, not the
    transport's bare error.
    """

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            check_decoded(request)
            response = await fn(self, request, context)
            check_response_size(fn.__name__, response_size(response), self.limits.max_request_bytes)
            return response
        except CtxwardenError as exc:
            code, message, trailer = to_status(exc)
        except Exception:
            log.exception("unhandled error in %s", fn.__name__)
            code, message, trailer = internal_status()
        await context.abort(code, message, trailing_metadata=trailer)

    return wrapper


def idempotency_key(request: Any) -> IdempotencyKey | None:
    request_id: str = request.request_id
    if not request_id:
        return None
    digest = hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()
    return IdempotencyKey(request_id, digest)
