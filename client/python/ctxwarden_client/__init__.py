"""Typed Python client for ctxwarden, the gRPC sidecar that owns LLM agent context.

    from ctxwarden_client import Client, user

    with Client("127.0.0.1:50051") as client:
        session = client.create_session(system_prompt="You are terse.")
        client.append_messages(session.session_id, [user("hello")])
        model_input = client.build_model_input(session.session_id)

Every method returns the generated protobuf messages of ``ctxwarden.v1``;
failed calls raise :class:`CtxwardenError` subclasses.
"""

from ._async_client import AsyncClient
from ._async_stream import AsyncMessageStream
from ._calls import SessionFields
from ._errors import (
    AbortedError,
    AlreadyExistsError,
    CtxwardenError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    UnavailableError,
    error_from_rpc_error,
)
from ._memory_client import memory
from ._retry import RetryPolicy
from ._sync_client import Client
from ._sync_stream import MessageStream
from .builders import (
    assistant,
    history_only,
    image,
    provider_error,
    state_delta,
    tool_call,
    tool_definition,
    tool_result,
    usage,
    user,
)
from .v1 import context_service_pb2, memory_pb2, message_pb2, session_pb2

__all__ = [
    "AbortedError",
    "AlreadyExistsError",
    "AsyncClient",
    "AsyncMessageStream",
    "Client",
    "CtxwardenError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "MessageStream",
    "NotFoundError",
    "ResourceExhaustedError",
    "RetryPolicy",
    "SessionFields",
    "UnavailableError",
    "assistant",
    "context_service_pb2",
    "error_from_rpc_error",
    "history_only",
    "image",
    "memory",
    "memory_pb2",
    "message_pb2",
    "provider_error",
    "session_pb2",
    "state_delta",
    "tool_call",
    "tool_definition",
    "tool_result",
    "usage",
    "user",
]
