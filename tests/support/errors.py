"""Assertions on gRPC errors and their google.rpc.ErrorInfo."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    for key, value in err.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return info
    raise AssertionError("no ErrorInfo in the error details")


def expect_error(
    code: grpc.StatusCode, reason: str | None, fn: Callable[..., Any], *args: Any, **kw: Any
) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        fn(*args, **kw)
    err = caught.value
    assert err.code() == code, f"{err.code()} {err.details()}"  # type: ignore[attr-defined]
    info = error_info(err)
    assert info.domain == "ctxwarden.dev"
    if reason is not None:
        assert info.reason == reason, info.reason
    return err
