"""Protobuf <-> domain conversion of request options (ListMessages filters,
state deltas) and of append responses."""

from __future__ import annotations

from dataclasses import replace

from ctxwarden.api.convert import message_to_pb
from ctxwarden.api.convert_state import struct_to_dict
from ctxwarden.core.state import StateDelta, check_delta
from ctxwarden.service.pages import MessageFilter
from ctxwarden.service.results import AppendResult
from ctxwarden.v1 import context_service_pb2 as pb


def message_filter(request: pb.ListMessagesRequest) -> MessageFilter:
    after_time = 0
    if request.HasField("after_time"):
        t = request.after_time
        # Every message is created after 1970: an earlier time filters nothing.
        after_time = max(0, t.seconds * 1_000_000 + t.nanos // 1000)
    return MessageFilter(
        include_rolled_back=request.include_rolled_back,
        newest_first=request.newest_first,
        after_seq=request.after_seq if request.HasField("after_seq") else None,
        after_time_us=after_time,
    )


def state_delta_from_pb(request: pb.AppendMessagesRequest) -> StateDelta:
    """The request's state delta (empty when unset)."""
    if not request.HasField("state_delta"):
        return StateDelta()
    d = request.state_delta
    parts = {
        scope: struct_to_dict(getattr(d, scope), f"state_delta.{scope}")
        for scope in ("session", "user", "project")
        if d.HasField(scope)
    }
    delta = StateDelta(**parts)
    check_delta(delta)
    return delta


def append_response(result: AppendResult, view: int) -> pb.AppendMessagesResponse:
    if view == pb.MESSAGE_VIEW_BASIC:
        stored = [message_to_pb(replace(m, content=())) for m in result.messages]
    else:
        stored = [message_to_pb(m) for m in result.messages]
    return pb.AppendMessagesResponse(
        messages=stored, last_seq=result.last_seq, context_tokens=result.context_tokens
    )
