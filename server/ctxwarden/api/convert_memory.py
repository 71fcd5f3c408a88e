"""Protobuf <-> domain conversion of memories."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwarden.api.convert_session import timestamp
from ctxwarden.api.tenancy import outer_id
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.memory import DurableFact, Memory, MemoryState
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.v1 import memory_pb2 as mem_pb


def state_from_pb(value: int, field: str) -> MemoryState | None:
    """None for UNSPECIFIED; an unknown value is INVALID_ARGUMENT."""
    if value == 0:
        return None
    try:
        return MemoryState(value)
    except ValueError:
        raise InvalidArgument(
            f"{field} {value} is unknown; use MEMORY_STATE_ACTIVE or MEMORY_STATE_PROPOSED",
            reason=ErrorReason.INVALID_MEMORY_STATE,
            field=field,
        ) from None


def memory_from_pb(m: mem_pb.Memory) -> Memory:
    """Client-settable fields only (the tenant, times and revision are the server's);
    state None-ish (0) is left for the use case to default."""
    state = state_from_pb(int(m.state), "memory.state")
    return Memory(
        memory_id=m.memory_id,
        tenant_id="",
        text=m.text,
        user_id=m.user_id,
        project_id=m.project_id,
        key=m.key,
        labels=dict(m.labels),
        pinned=m.pinned,
        state=state or MemoryState.ACTIVE,
    )


def memory_to_pb(m: Memory) -> mem_pb.Memory:
    return mem_pb.Memory(
        memory_id=m.memory_id,
        user_id=m.user_id,
        project_id=m.project_id,
        key=m.key,
        text=m.text,
        labels=dict(m.labels),
        pinned=m.pinned,
        state=int(m.state),  # type: ignore[arg-type]
        create_time=timestamp(m.create_time_us),
        update_time=timestamp(m.update_time_us),
        etag=m.etag,
        source_session_id=outer_id(m.source_session_id) if m.source_session_id else "",
    )


def proposed_from_pb(items: Sequence[mem_pb.ProposedMemory]) -> list[DurableFact]:
    facts = []
    for i, p in enumerate(items):
        if not p.text.strip():
            raise InvalidArgument(
                f"proposed_memories[{i}].text is required",
                reason=ErrorReason.MISSING_FIELD,
                field=f"proposed_memories[{i}].text",
            )
        facts.append(DurableFact(p.text, p.project_scope, p.key))
    return facts
