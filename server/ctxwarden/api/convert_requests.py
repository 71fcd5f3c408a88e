"""Protobuf <-> domain conversion of request options (ListMessages filters,
state deltas) and of append responses."""

from __future__ import annotations

from dataclasses import replace

from ctxwarden.api.convert_state import struct_to_dict
from ctxwarden.api.message_wire import message_body, varint
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


def append_response(result: AppendResult, view: int) -> bytes:
    """The encoded AppendMessagesResponse: byte for byte what building the message
    and serialising it deterministically gives (``message_wire``), without
    building it (every append answers with this)."""
    out = bytearray()
    basic = view == pb.MESSAGE_VIEW_BASIC
    for m in result.messages:
        body = message_body(replace(m, content=()) if basic else m)
        out += b"\x0a" + varint(len(body)) + body
    if result.last_seq:
        out += b"\x10" + varint(result.last_seq)
    if result.context_tokens:
        out += b"\x18" + varint(result.context_tokens)
    return bytes(out)
