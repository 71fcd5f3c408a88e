"""Responses bounded by size: ListMessages pages and the server's send limit.

gRPC refuses to send a message larger than ``grpc.max_send_message_length``
with a bare ``RESOURCE_EXHAUSTED "Sent message larger than max"`` that names
neither the cause nor a way out. Every response is checked here first, so a
client gets ``RESOURCE_EXHAUSTED`` with ErrorInfo reason ``RESPONSE_TOO_LARGE``,
the sizes and what to do instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import Message as PbMessage

from ctxwarden.core.errors import InvalidArgument, ResourceExhausted
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as msg_pb

PAGE_BYTES = 4 * 1024 * 1024
"""A ListMessages page stays within this many encoded bytes (gRPC's default
receive limit), unless a single message is larger: a page holds at least one."""
PAGE_RESERVE = 1024
"""Room kept in a page for next_page_token and framing."""

_HINTS = {
    "BuildModelInput": (
        "send the resume_token of the input you hold to receive only the messages after it, "
        "compact the session (Compact, or PrepareCompaction and CommitCompaction), or, with a "
        "format, leave view unset (MODEL_INPUT_VIEW_BASIC) so the messages are not sent twice; "
        "ListMessages pages through the complete history"
    ),
    "ListMessages": "a page holds at least one message: this one is too large to send",
    "AppendMessages": (
        "the messages were stored: read them with ListMessages, and append with view "
        "MESSAGE_VIEW_BASIC to be answered without the content you sent"
    ),
    "PrepareCompaction": (
        "compact in smaller steps: commit a compaction with a smaller keep_recent_tokens "
        "first, or use Compact with the server's summariser"
    ),
}


def _field_bytes(size: int) -> int:
    """Bytes of a length-delimited field of ``size`` bytes (1-byte tag)."""
    return 1 + max(1, (size.bit_length() + 6) // 7) + size


def page_length(messages: Sequence[msg_pb.Message], budget: int = PAGE_BYTES) -> int:
    """How many leading ``messages`` fit in ``budget`` encoded bytes (at least one)."""
    total = PAGE_RESERVE
    for i, m in enumerate(messages):
        total += _field_bytes(m.ByteSize())
        if total > budget and i > 0:
            return i
    return len(messages)


def check_response_size(method: str, size: int, limit: int) -> None:
    """RESPONSE_TOO_LARGE when a ``size``-byte response exceeds the send ``limit``."""
    if limit <= 0 or size <= limit:
        return
    hint = _HINTS.get(method, "ask for less")
    raise ResourceExhausted(
        f"the {method} response would be {size:,} bytes, more than the {limit:,} bytes this "
        f"server sends in one message: {hint}",
        reason=ErrorReason.RESPONSE_TOO_LARGE,
        metadata={"method": method, "response_bytes": str(size), "limit_bytes": str(limit)},
    )


def response_size(response: bytes | PbMessage) -> int:
    """Encoded size of a response (handlers may return it already encoded)."""
    return len(response) if isinstance(response, bytes) else response.ByteSize()


def carries_messages(request: pb.BuildModelInputRequest) -> bool:
    """Whether the response carries ModelInput.messages (AIP-157 view)."""
    if request.view == pb.MODEL_INPUT_VIEW_UNSPECIFIED:
        return request.format in (pb.MODEL_INPUT_FORMAT_UNSPECIFIED, pb.MODEL_INPUT_FORMAT_NATIVE)
    if request.view not in (pb.MODEL_INPUT_VIEW_FULL, pb.MODEL_INPUT_VIEW_BASIC):
        raise InvalidArgument(
            f"view {request.view} is unknown: use MODEL_INPUT_VIEW_FULL or MODEL_INPUT_VIEW_BASIC",
            reason=ErrorReason.INVALID_VIEW,
            field="view",
        )
    return request.view == pb.MODEL_INPUT_VIEW_FULL
