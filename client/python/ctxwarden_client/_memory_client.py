"""The long-term memory methods of both clients (mixins of Client and AsyncClient)."""

# ``timeout=`` parameters are gRPC deadlines, not asyncio cancellation scopes.
# ruff: noqa: ASYNC109

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from . import _calls, _pagination
from .v1 import memory_pb2

if TYPE_CHECKING:
    from ._calls import Call
    from ._pagination import Pages

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_Item = TypeVar("_Item")

__all__ = ["AsyncMemoryMethods", "MemoryMethods", "memory"]


def memory(
    text: str,
    *,
    user_id: str = "",
    project_id: str = "",
    key: str = "",
    labels: Mapping[str, str] | None = None,
    pinned: bool = False,
    state: memory_pb2.MemoryState.ValueType = memory_pb2.MEMORY_STATE_UNSPECIFIED,
) -> memory_pb2.Memory:
    """A Memory to create: at least one of user_id and project_id is required."""
    return memory_pb2.Memory(
        text=text,
        user_id=user_id,
        project_id=project_id,
        key=key,
        labels=dict(labels or {}),
        pinned=pinned,
        state=state,
    )


def _list_request(
    user_id: str,
    project_id: str,
    labels: Mapping[str, str] | None,
    state: memory_pb2.MemoryState.ValueType,
    key: str,
    page_size: int,
    page_token: str,
) -> memory_pb2.ListMemoriesRequest:
    return memory_pb2.ListMemoriesRequest(
        user_id=user_id,
        project_id=project_id,
        labels=dict(labels or {}),
        state=state,
        key=key,
        page_size=page_size,
        page_token=page_token,
    )


class MemoryMethods:
    """CreateMemory, GetMemory, ListMemories, UpdateMemory, DeleteMemory (blocking)."""

    if TYPE_CHECKING:  # the client's

        def _call(self, call: Call[_Req, _Resp], timeout: float | None) -> _Resp: ...
        def _pages(
            self, pages: Pages[Any, Any, _Item], timeout: float | None
        ) -> Iterator[_Item]: ...

    def create_memory(
        self,
        text: str = "",
        *,
        memory: memory_pb2.Memory | None = None,
        timeout: float | None = None,
        **fields: Any,
    ) -> memory_pb2.Memory:
        """Creates a memory (``text`` and the keywords of :func:`memory`, or a whole
        ``memory``); with a key that exists in its scope, updates that one."""
        return self._call(_calls.create_memory(memory or _memory(text, fields)), timeout)

    def get_memory(self, memory_id: str, *, timeout: float | None = None) -> memory_pb2.Memory:
        return self._call(_calls.get_memory(memory_id), timeout)

    def list_memories(
        self,
        user_id: str = "",
        project_id: str = "",
        *,
        labels: Mapping[str, str] | None = None,
        state: memory_pb2.MemoryState.ValueType = memory_pb2.MEMORY_STATE_UNSPECIFIED,
        key: str = "",
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> Iterator[memory_pb2.Memory]:
        """Iterates over matching memories, newest first, fetching pages lazily."""
        request = _list_request(user_id, project_id, labels, state, key, page_size, page_token)
        yield from self._pages(_pagination.list_memories(request), timeout)

    def update_memory(
        self,
        memory: memory_pb2.Memory,
        update_mask: Sequence[str],
        etag: str = "",
        *,
        timeout: float | None = None,
    ) -> memory_pb2.Memory:
        """Updates the ``update_mask`` fields (text, labels, pinned, state, key) of ``memory``."""
        return self._call(_calls.update_memory(memory, update_mask, etag), timeout)

    def delete_memory(self, memory_id: str, *, timeout: float | None = None) -> None:
        self._call(_calls.delete_memory(memory_id), timeout)


class AsyncMemoryMethods:
    """The same as coroutines (and an async iterator) for AsyncClient."""

    if TYPE_CHECKING:  # the client's

        async def _call(self, call: Call[_Req, _Resp], timeout: float | None) -> _Resp: ...
        def _pages(
            self, pages: Pages[Any, Any, _Item], timeout: float | None
        ) -> AsyncIterator[_Item]: ...

    async def create_memory(
        self,
        text: str = "",
        *,
        memory: memory_pb2.Memory | None = None,
        timeout: float | None = None,
        **fields: Any,
    ) -> memory_pb2.Memory:
        return await self._call(_calls.create_memory(memory or _memory(text, fields)), timeout)

    async def get_memory(
        self, memory_id: str, *, timeout: float | None = None
    ) -> memory_pb2.Memory:
        return await self._call(_calls.get_memory(memory_id), timeout)

    async def list_memories(
        self,
        user_id: str = "",
        project_id: str = "",
        *,
        labels: Mapping[str, str] | None = None,
        state: memory_pb2.MemoryState.ValueType = memory_pb2.MEMORY_STATE_UNSPECIFIED,
        key: str = "",
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> AsyncIterator[memory_pb2.Memory]:
        request = _list_request(user_id, project_id, labels, state, key, page_size, page_token)
        async for item in self._pages(_pagination.list_memories(request), timeout):
            yield item

    async def update_memory(
        self,
        memory: memory_pb2.Memory,
        update_mask: Sequence[str],
        etag: str = "",
        *,
        timeout: float | None = None,
    ) -> memory_pb2.Memory:
        return await self._call(_calls.update_memory(memory, update_mask, etag), timeout)

    async def delete_memory(self, memory_id: str, *, timeout: float | None = None) -> None:
        await self._call(_calls.delete_memory(memory_id), timeout)


def _memory(text: str, fields: Mapping[str, Any]) -> memory_pb2.Memory:
    return memory(text, **fields)
