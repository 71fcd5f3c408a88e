"""The long-term memory RPCs of the ContextService (a mixin of the servicer):
CreateMemory, GetMemory, ListMemories, UpdateMemory, DeleteMemory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.protobuf import empty_pb2

from ctxwarden.api.convert_memory import memory_from_pb, memory_to_pb, state_from_pb
from ctxwarden.api.tenancy import current_tenant
from ctxwarden.api.unary import unary
from ctxwarden.api.update_mask import mask_paths
from ctxwarden.service.memories import UPDATABLE
from ctxwarden.v1 import memory_pb2 as mem_pb

if TYPE_CHECKING:
    from ctxwarden.config import Limits
    from ctxwarden.service.manager import SessionManager


class MemoryServicer:
    """Mixed into ContextServicer."""

    manager: SessionManager
    limits: Limits

    @unary
    async def CreateMemory(
        self, request: mem_pb.CreateMemoryRequest, context: Any
    ) -> mem_pb.Memory:
        memory = memory_from_pb(request.memory)
        created = await self.manager.memories.create(memory, current_tenant.get())
        return memory_to_pb(created)

    @unary
    async def GetMemory(self, request: mem_pb.GetMemoryRequest, context: Any) -> mem_pb.Memory:
        found = await self.manager.memories.get(request.memory_id, current_tenant.get())
        return memory_to_pb(found)

    @unary
    async def ListMemories(
        self, request: mem_pb.ListMemoriesRequest, context: Any
    ) -> mem_pb.ListMemoriesResponse:
        rows, token = await self.manager.memories.list(
            current_tenant.get(),
            user_id=request.user_id,
            project_id=request.project_id,
            key=request.key,
            labels=dict(request.labels),
            state=state_from_pb(int(request.state), "state"),
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return mem_pb.ListMemoriesResponse(
            memories=[memory_to_pb(m) for m in rows], next_page_token=token
        )

    @unary
    async def UpdateMemory(
        self, request: mem_pb.UpdateMemoryRequest, context: Any
    ) -> mem_pb.Memory:
        paths = mask_paths(request.update_mask, UPDATABLE)
        memory = memory_from_pb(request.memory)
        updated = await self.manager.memories.update(
            memory, paths, request.etag, current_tenant.get()
        )
        return memory_to_pb(updated)

    @unary
    async def DeleteMemory(
        self, request: mem_pb.DeleteMemoryRequest, context: Any
    ) -> empty_pb2.Empty:
        await self.manager.memories.delete(request.memory_id, current_tenant.get())
        return empty_pb2.Empty()
