"""GetToolOutput: a byte range of a stored tool result (for outputs the view cut)."""

from __future__ import annotations

from ctxwarden.core.errors import InvalidArgument, NotFound
from ctxwarden.core.messages import Role
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.tenancy import visible_id
from ctxwarden.service.results import ToolOutputRange
from ctxwarden.service.runtime import SessionRuntime


class ToolOutputs:
    def __init__(self, runtime: SessionRuntime) -> None:
        self.runtime = runtime

    async def get_tool_output(
        self, session_id: str, seq: int, offset: int, limit: int
    ) -> ToolOutputRange:
        """A byte range of a stored tool result, cut at character boundaries."""
        if seq <= 0:
            raise InvalidArgument("seq must be > 0", reason=ErrorReason.INVALID_SEQ, field="seq")
        if offset < 0 or limit < 0:
            raise InvalidArgument(
                "offset and limit must be >= 0", reason=ErrorReason.INVALID_RANGE, field="offset"
            )
        limit = min(limit or 51200, 1024 * 1024)
        ctx = await self.runtime.context(session_id)
        message = next((m for m in ctx.active_messages if m.seq == seq), None)
        if message is None:
            message = await self.runtime.db(
                lambda: self.runtime.store.messages.get(session_id, seq)
            )
        if message is None:
            raise NotFound(
                f"session {visible_id(session_id)!r} has no message with seq {seq}",
                reason=ErrorReason.MESSAGE_NOT_FOUND,
            )
        if message.role is not Role.TOOL_RESULT:
            raise InvalidArgument(
                f"message seq {seq} is a {message.role.name.lower()} message, not a tool result",
                reason=ErrorReason.NOT_A_TOOL_RESULT,
                field="seq",
            )
        data = message.text.encode("utf-8")
        total = len(data)
        start = min(offset, total)
        while start < total and (data[start] & 0xC0) == 0x80:
            start += 1  # never start inside a character
        end = min(start + limit, total)
        while end < total and end > start and (data[end] & 0xC0) == 0x80:
            end -= 1  # never end inside one either
        chunk = data[start:end].decode("utf-8")
        lines = len(message.text.splitlines())
        return ToolOutputRange(chunk, total, lines, end if end < total else 0)
