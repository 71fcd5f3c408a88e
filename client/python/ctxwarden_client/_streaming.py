"""What MessageStream and AsyncMessageStream share over ``StreamMessages``.

Requests are answered in order, so each stream keeps one future per
unanswered request, oldest first (:class:`Pending`). The stream's threads or
tasks differ; the bookkeeping, the requests and the errors are the same.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Generic, Protocol, TypeVar

import grpc

from ._calls import MessagesArg, StateDeltaArg, append_request, as_messages
from ._errors import CtxwardenError, error_from_rpc_error, make_error
from .v1 import context_service_pb2 as pb

T_contra = TypeVar("T_contra", contravariant=True)


class Future(Protocol[T_contra]):
    """What is used of ``concurrent.futures.Future`` and ``asyncio.Future``."""

    def done(self) -> bool: ...

    def set_result(self, result: T_contra, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class Slots(Protocol):
    """The ``max_in_flight`` semaphore (``threading`` or ``asyncio``)."""

    def release(self) -> None: ...


FutureT = TypeVar("FutureT", bound=Future[pb.AppendMessagesResponse])


def stream_request(
    session_id_or_request: str | pb.AppendMessagesRequest,
    messages: MessagesArg,
    expected_last_seq: int | None,
    request_id: str,
    view: pb.MessageView.ValueType,
    state_delta: StateDeltaArg = None,
) -> pb.AppendMessagesRequest:
    if isinstance(session_id_or_request, pb.AppendMessagesRequest):
        given = as_messages(messages) or expected_last_seq is not None or request_id or view
        if given or state_delta is not None:
            raise TypeError("pass either an AppendMessagesRequest or its fields, not both")
        return session_id_or_request
    return append_request(
        session_id_or_request, messages, expected_last_seq, request_id, view, state_delta
    )


class Pending(Generic[FutureT]):
    """The futures of a stream's unanswered requests, oldest first, and how it ended.

    Each request holds one of ``slots`` from before :meth:`add` until it is
    answered or failed. ``lock`` guards the state when threads share it.
    """

    def __init__(self, slots: Slots, lock: AbstractContextManager[object]) -> None:
        self.slots = slots
        self.lock = lock
        self._futures: deque[FutureT] = deque()
        self._sent: deque[list[int]] = deque()
        self.error: CtxwardenError | None = None
        self.closed = False

    @property
    def ended(self) -> bool:
        return self.closed or self.error is not None

    def add(self, future: FutureT) -> FutureT:
        """Adds the future of a request about to be written, under the lock.

        Raises (and frees the caller's slot) once the stream is closed or failed.
        """
        if self.error is not None or self.closed:
            self.slots.release()
            if self.error is not None:
                raise clone_error(self.error)
            raise closed_error()
        self._futures.append(future)
        return future

    def sent(self, counts: list[int]) -> None:
        """Records that the next ``len(counts)`` requests went out as one (coalesced),
        with these message counts; called before that request is written."""
        with self.lock:
            self._sent.append(counts)

    @property
    def in_flight(self) -> bool:
        """Whether a request that went out is still unanswered."""
        return bool(self._sent)

    def answer(self, response: pb.AppendMessagesResponse) -> bool:
        """Resolves the oldest unanswered request (every request merged into it);
        False when none is outstanding."""
        with self.lock:
            counts = self._sent.popleft() if self._sent else [len(response.messages)]
            if len(self._futures) < len(counts):
                return False
            futures = [self._futures.popleft() for _ in counts]
        for future, part in zip(futures, split(response, counts), strict=True):
            self.slots.release()
            if not future.done():
                future.set_result(part)
        return True

    def end(self, error: CtxwardenError | None, stop_requests: Callable[[], None]) -> None:
        """Records how the stream ended and fails every unanswered request.

        ``error`` is None when the server ended the stream. ``stop_requests``
        (called under the lock) lets the request iterator finish.
        """
        with self.lock:
            if error is None:
                error = unanswered_error(len(self._futures)) if self._futures else closed_error()
            self.error = error
            failed = list(self._futures)
            self._futures.clear()
            self._sent.clear()
            stop_requests()
        for future in failed:
            self.slots.release()
            if not future.done():
                future.set_exception(clone_error(error))


def stream_failure(exc: Exception) -> CtxwardenError:
    """The error that ends a stream whose responses raised ``exc``."""
    if isinstance(exc, grpc.RpcError):
        return error_from_rpc_error(exc)
    return CtxwardenError(f"StreamMessages failed: {exc!r}")  # pragma: no cover - defensive


def clone_error(error: CtxwardenError) -> CtxwardenError:
    """A fresh exception equal to ``error`` (so one failure can be raised many times)."""
    return make_error(
        error.code,
        error.message,
        reason=error.reason,
        domain=error.domain,
        metadata=error.metadata,
        details=error.details,
    )


def deadline_error(timeout: float | None) -> CtxwardenError:
    return make_error(
        grpc.StatusCode.DEADLINE_EXCEEDED,
        f"StreamMessages send: no response within {timeout} seconds",
    )


def closed_error() -> CtxwardenError:
    return make_error(grpc.StatusCode.CANCELLED, "the message stream is closed")


def unexpected_response_error() -> CtxwardenError:
    return make_error(
        grpc.StatusCode.INTERNAL, "StreamMessages sent a response with no request outstanding"
    )


def unanswered_error(count: int) -> CtxwardenError:
    return make_error(
        grpc.StatusCode.INTERNAL,
        f"StreamMessages ended with {count} request(s) unanswered",
    )


# -- coalescing ---------------------------------------------------------------------

COALESCE_MAX_MESSAGES = 100
COALESCE_MAX_BYTES = 1024 * 1024


def mergeable(request: pb.AppendMessagesRequest) -> bool:
    """Only plain appends merge: an expected_last_seq, a request_id (the idempotency
    key of exactly that request) or a state_delta keeps a request on its own."""
    return (
        bool(request.messages)
        and not request.HasField("expected_last_seq")
        and not request.request_id
        and not request.HasField("state_delta")
    )


class Batch:
    """Consecutive plain appends to one session, sent as one request."""

    def __init__(self, first: pb.AppendMessagesRequest) -> None:
        self.first = first
        self.members = [first]
        self.messages = len(first.messages)
        self.bytes = first.ByteSize()

    def accepts(self, request: pb.AppendMessagesRequest) -> bool:
        return (
            mergeable(request)
            and request.session_id == self.first.session_id
            and request.view == self.first.view
            and self.messages + len(request.messages) <= COALESCE_MAX_MESSAGES
            and self.bytes + request.ByteSize() <= COALESCE_MAX_BYTES
        )

    def add(self, request: pb.AppendMessagesRequest) -> None:
        self.members.append(request)
        self.messages += len(request.messages)
        self.bytes += request.ByteSize()

    @property
    def full(self) -> bool:
        return self.messages >= COALESCE_MAX_MESSAGES

    def counts(self) -> list[int]:
        return [len(m.messages) for m in self.members]

    def request(self) -> pb.AppendMessagesRequest:
        if len(self.members) == 1:
            return self.first
        merged = pb.AppendMessagesRequest(session_id=self.first.session_id, view=self.first.view)
        for member in self.members:
            merged.messages.extend(member.messages)
        return merged


def split(
    response: pb.AppendMessagesResponse, counts: list[int]
) -> list[pb.AppendMessagesResponse]:
    """Each member's part of a merged request's response: its stored messages, and
    last_seq as of its last message. context_tokens is the context after the whole
    merged append (the only figure the server reports)."""
    if len(counts) == 1:
        return [response]
    if len(response.messages) != sum(counts):  # pragma: no cover - defensive
        return [response] * len(counts)
    parts = []
    start = 0
    for n in counts:
        mine = response.messages[start : start + n]
        start += n
        parts.append(
            pb.AppendMessagesResponse(
                messages=mine, last_seq=mine[-1].seq, context_tokens=response.context_tokens
            )
        )
    return parts
