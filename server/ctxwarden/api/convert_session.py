"""Protobuf <-> domain conversion of sessions, their policies and tools."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from ctxwarden.api.convert_anchors import preservation_from_pb, preservation_to_pb
from ctxwarden.api.convert_state import dict_to_struct, struct_to_dict
from ctxwarden.api.tenancy import outer_id
from ctxwarden.core.background import MAX_CACHE_LIFETIME_SECONDS
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import ContextPolicy, Session, ToolDefinition, shared_tools
from ctxwarden.core.validation import check_json_object, check_no_nul
from ctxwarden.v1 import session_pb2 as ses_pb


def timestamp(us: int) -> Timestamp:
    return Timestamp(seconds=us // 1_000_000, nanos=(us % 1_000_000) * 1000)


def tool_from_pb(t: ses_pb.ToolDefinition, field: str) -> ToolDefinition:
    if not t.name:
        raise InvalidArgument(
            f"{field}.name is required", reason=ErrorReason.MISSING_FIELD, field=field
        )
    check_json_object(t.parameters_json, f"{field}.parameters_json")
    return ToolDefinition(t.name, sys.intern(t.description), sys.intern(t.parameters_json))


_POLICY_COUNTS = (
    "context_window",
    "reserve_tokens",
    "keep_recent_tokens",
    "tool_output_max_bytes",
    "tool_output_max_lines",
    "keep_tool_results",
    "clear_tool_results_at_least",
    "clear_tool_results_keep",
    "memory_max_tokens",
    "background_compaction_percent",
    "cache_lifetime_seconds",
)
"""ContextPolicy's numeric fields (the same names in the proto and the domain)."""


def policy_from_pb(p: ses_pb.ContextPolicy) -> ContextPolicy:
    for name in _POLICY_COUNTS:
        if getattr(p, name) < 0:
            raise InvalidArgument(
                f"policy.{name} must be >= 0 (0 means the default)",
                reason=ErrorReason.INVALID_POLICY,
                field=f"policy.{name}",
            )
    if p.background_compaction_percent > 99:
        raise InvalidArgument(
            "policy.background_compaction_percent must be 1-99 (percent of the "
            "compaction threshold) or 0 (no background compaction)",
            reason=ErrorReason.INVALID_POLICY,
            field="policy.background_compaction_percent",
        )
    if p.cache_lifetime_seconds > MAX_CACHE_LIFETIME_SECONDS:
        raise InvalidArgument(
            f"policy.cache_lifetime_seconds must be at most {MAX_CACHE_LIFETIME_SECONDS} "
            "(the provider's prompt cache lifetime, e.g. 300) or 0 (do not wait for it)",
            reason=ErrorReason.INVALID_POLICY,
            field="policy.cache_lifetime_seconds",
        )
    # An hf: spec is a file path: os.path raises ValueError on NUL (INTERNAL).
    check_no_nul(p.tokenizer, "policy.tokenizer")
    counts: dict[str, int] = {name: getattr(p, name) for name in _POLICY_COUNTS}
    if p.memory_write not in ses_pb.MemoryWriteMode.values():
        raise InvalidArgument(
            f"policy.memory_write {p.memory_write} is unknown; use OFF, PROPOSE or AUTO",
            reason=ErrorReason.INVALID_MEMORY_STATE,
            field="policy.memory_write",
        )
    preserve, preserve_tokens = preservation_from_pb(p.preserve_lost_anchors)
    return ContextPolicy(
        tokenizer=p.tokenizer,
        memory_write=int(p.memory_write),
        preserve_lost_anchors=preserve,
        preserve_lost_anchors_max_tokens=preserve_tokens,
        **counts,
    )


def session_from_pb(s: ses_pb.Session) -> Session:
    """Client-settable fields only; output-only fields are ignored."""
    tools = shared_tools(
        tuple(tool_from_pb(t, f"session.tools[{i}]") for i, t in enumerate(s.tools))
    )
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise InvalidArgument(
            "session.tools has two tools with the same name",
            reason=ErrorReason.DUPLICATE_TOOL,
            field="session.tools",
        )
    for name, value in (("user_id", s.user_id), ("project_id", s.project_id), ("model", s.model)):
        if len(value) > 128:
            raise InvalidArgument(
                f"session.{name} is longer than 128 characters",
                reason=ErrorReason.FIELD_TOO_LONG,
                field=f"session.{name}",
            )
    return Session(
        session_id=s.session_id,
        user_id=s.user_id,
        project_id=s.project_id,
        title=s.title,
        system_prompt=sys.intern(s.system_prompt),  # one copy for all sessions of an agent
        tools=tools,
        model=s.model,
        policy=policy_from_pb(s.policy),
        pinned_state=s.pinned_state,
        labels=dict(s.labels),
        state=struct_to_dict(s.state, "session.state") if s.HasField("state") else {},
    )


def session_to_pb(
    s: Session,
    user_state: Mapping[str, Any] | None = None,
    project_state: Mapping[str, Any] | None = None,
) -> ses_pb.Session:
    """``user_state`` and ``project_state``: the shared states (GetSession only)."""
    p = s.policy
    out = ses_pb.Session(
        session_id=outer_id(s.session_id),
        user_id=s.user_id,
        project_id=s.project_id,
        title=s.title,
        system_prompt=s.system_prompt,
        tools=[tool_to_pb(t) for t in s.tools],
        model=s.model,
        policy=ses_pb.ContextPolicy(
            tokenizer=p.tokenizer,
            memory_write=p.memory_write,  # type: ignore[arg-type]
            preserve_lost_anchors=preservation_to_pb(p),
            **{name: getattr(p, name) for name in _POLICY_COUNTS},
        ),
        pinned_state=s.pinned_state,
        labels=dict(s.labels),
        last_seq=s.last_seq,
        context_tokens=s.context_tokens,
        etag=s.etag,
        create_time=timestamp(s.create_time_us),
        update_time=timestamp(s.update_time_us),
        # A parent whose ID was used again after its deletion has a retired key
        # (ID#DELETE_TIME, see store/sessions.py); the client knows it by its ID.
        parent_session_id=outer_id(s.parent_session_id).split("#", 1)[0],
        parent_seq=s.parent_seq,
    )
    if s.archive_time_us:
        out.archive_time.CopyFrom(timestamp(s.archive_time_us))
    if s.state:
        out.state.CopyFrom(dict_to_struct(s.state))
    if user_state:
        out.user_state.CopyFrom(dict_to_struct(user_state))
    if project_state:
        out.project_state.CopyFrom(dict_to_struct(project_state))
    return out


def tool_to_pb(t: ToolDefinition) -> ses_pb.ToolDefinition:
    return ses_pb.ToolDefinition(
        name=t.name, description=t.description, parameters_json=t.parameters_json
    )
