"""The asyncio client's RPC plumbing: unary calls with retries, and paging."""

# ``timeout=`` parameters are gRPC deadlines, not asyncio cancellation scopes.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

import grpc
import grpc.aio

from ._calls import Call
from ._client_base import ClientBase
from ._pagination import Pages
from ._retry import retry_delay

if TYPE_CHECKING:  # typing-only class from the generated .pyi
    from .v1.context_service_pb2_grpc import ContextServiceAsyncStub

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_Item = TypeVar("_Item")


class AsyncRpc(ClientBase):
    """What the asyncio client's methods call through; ``_get_stub`` is the client's."""

    def _get_stub(self) -> ContextServiceAsyncStub:
        raise NotImplementedError

    async def _call(self, call: Call[_Req, _Resp], timeout: float | None) -> _Resp:
        # The stub's methods are the grpc.aio flavour of those Call is typed with.
        rpc = cast("grpc.aio.UnaryUnaryMultiCallable[_Req, _Resp]", call.method(self._get_stub()))
        attempt = 0
        while True:
            try:
                response = await rpc(
                    call.request, timeout=self._deadline(timeout), metadata=self._metadata
                )
            except grpc.RpcError as exc:
                delay = retry_delay(self._retry, exc, attempt, call.safe)
            else:
                return call.result(response)
            await asyncio.sleep(delay)
            attempt += 1

    async def _pages(
        self, pages: Pages[Any, Any, _Item], timeout: float | None
    ) -> AsyncIterator[_Item]:
        while (call := pages.next_call()) is not None:
            for item in pages.items(await self._call(call, timeout)):
                yield item
