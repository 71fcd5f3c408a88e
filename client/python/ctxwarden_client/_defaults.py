"""Defaults shared by the sync and async clients: target, deadlines, channel options."""

from __future__ import annotations

from collections.abc import Iterable

from .v1 import context_service_pb2

DEFAULT_TARGET = "127.0.0.1:50051"
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 2
DEFAULT_MAX_IN_FLIGHT = 32
DEFAULT_COALESCE_WINDOW = 0.002
"""Seconds a streamed append waits for others to share its request, and only while
earlier requests of the stream are unanswered."""
CHANNEL_OPTIONS = (
    # Model inputs of long sessions are megabytes: allow them, and let them
    # travel in few large HTTP/2 frames.
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.http2.max_frame_size", 16 * 1024 * 1024 - 1),
    ("grpc.http2.lookahead_bytes", 8 * 1024 * 1024),
)
NO_FORMAT = context_service_pb2.MODEL_INPUT_FORMAT_UNSPECIFIED
DEFAULT_VIEW = context_service_pb2.MODEL_INPUT_VIEW_UNSPECIFIED
DEFAULT_MESSAGE_VIEW = context_service_pb2.MESSAGE_VIEW_UNSPECIFIED


def or_default(timeout: float | None, default: float | None) -> float | None:
    """``timeout`` when given, else ``default`` (either may be None: no deadline)."""
    return default if timeout is None else timeout


def normalize_metadata(metadata: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((str(k).lower(), v) for k, v in metadata)
