"""Assertions on gRPC errors and their google.rpc.ErrorInfo."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2


class CallError(Protocol):
    """What an error of a synchronous gRPC call offers: it is a ``grpc.RpcError`` and a
    ``grpc.Call``. The grpc stubs type ``grpc.RpcError`` alone, with ``details()`` as
    ``str | None`` and ``trailing_metadata()`` as objects that are not (key, value) pairs;
    the errors grpc raises answer like ``grpc.Call``."""

    def code(self) -> grpc.StatusCode: ...
    def details(self) -> str: ...
    def trailing_metadata(self) -> Sequence[tuple[str, str | bytes]]: ...


def call_error(err: grpc.RpcError) -> CallError:
    """``err`` typed as what it is at run time (see ``CallError``); the same object."""
    return cast(CallError, err)


def error_info(err: grpc.RpcError | CallError) -> error_details_pb2.ErrorInfo:
    for key, value in cast(CallError, err).trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return info
    raise AssertionError("no ErrorInfo in the error details")


def expect_error(
    code: grpc.StatusCode, reason: str | None, fn: Callable[..., Any], *args: Any, **kw: Any
) -> CallError:
    with pytest.raises(grpc.RpcError) as caught:
        fn(*args, **kw)
    err = call_error(caught.value)
    assert err.code() == code, f"{err.code()} {err.details()}"
    info = error_info(err)
    assert info.domain == "ctxwarden.dev"
    if reason is not None:
        assert info.reason == reason, info.reason
    return err
