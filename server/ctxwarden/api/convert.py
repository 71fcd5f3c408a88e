"""Protobuf <-> domain conversion of messages, model inputs and compactions.

Enum values are checked here, and each enum of the API has its one map between
proto and domain values here; sessions are in convert_session.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ctxwarden.api.convert_anchors import plan_anchors, report_to_pb
from ctxwarden.api.convert_session import timestamp
from ctxwarden.api.convert_usage import usage_to_pb
from ctxwarden.api.encoding import DEFAULT_LIMIT_BYTES, EncodingCache
from ctxwarden.api.message_wire import message_body
from ctxwarden.api.tenancy import outer_id
from ctxwarden.core import messages as msg
from ctxwarden.core.compaction.types import SummaryPrompt
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.fast_replace import replacer
from ctxwarden.core.model_input import TokenCountMethod
from ctxwarden.core.provider_errors import ProviderError
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Checkpoint, CompactionTrigger
from ctxwarden.v1 import context_service_pb2 as svc_pb
from ctxwarden.v1 import message_pb2 as msg_pb

if TYPE_CHECKING:
    from ctxwarden.service.compaction import PlanHandle

_MESSAGES_TAG = bytes([(4 << 3) | 2])  # ModelInput.messages: field 4, length-delimited


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# -- enums ----------------------------------------------------------------------

_TRIGGERS_FROM_PB: dict[int, CompactionTrigger] = {
    svc_pb.COMPACTION_TRIGGER_MANUAL: CompactionTrigger.MANUAL,
    svc_pb.COMPACTION_TRIGGER_THRESHOLD: CompactionTrigger.THRESHOLD,
    svc_pb.COMPACTION_TRIGGER_OVERFLOW: CompactionTrigger.OVERFLOW,
    svc_pb.COMPACTION_TRIGGER_BACKGROUND: CompactionTrigger.BACKGROUND,
}
_TRIGGERS_TO_PB: dict[CompactionTrigger, svc_pb.CompactionTrigger.ValueType] = {
    CompactionTrigger.MANUAL: svc_pb.COMPACTION_TRIGGER_MANUAL,
    CompactionTrigger.THRESHOLD: svc_pb.COMPACTION_TRIGGER_THRESHOLD,
    CompactionTrigger.OVERFLOW: svc_pb.COMPACTION_TRIGGER_OVERFLOW,
    CompactionTrigger.BACKGROUND: svc_pb.COMPACTION_TRIGGER_BACKGROUND,
}
_METHODS_TO_PB: dict[TokenCountMethod, svc_pb.TokenCountMethod.ValueType] = {
    TokenCountMethod.EXACT: svc_pb.TOKEN_COUNT_METHOD_EXACT,
    TokenCountMethod.ANCHORED: svc_pb.TOKEN_COUNT_METHOD_ANCHORED,
    TokenCountMethod.ESTIMATED: svc_pb.TOKEN_COUNT_METHOD_ESTIMATED,
}


def trigger_from_pb(value: int) -> CompactionTrigger | None:
    """A request's CompactionTrigger (unset: MANUAL, its documented default); None: unknown."""
    if value == svc_pb.COMPACTION_TRIGGER_UNSPECIFIED:
        return CompactionTrigger.MANUAL
    return _TRIGGERS_FROM_PB.get(value)


def trigger_to_pb(trigger: CompactionTrigger) -> svc_pb.CompactionTrigger.ValueType:
    return _TRIGGERS_TO_PB[trigger]


def method_to_pb(method: TokenCountMethod) -> svc_pb.TokenCountMethod.ValueType:
    return _METHODS_TO_PB[method]


# -- messages -------------------------------------------------------------------


def _block_from_pb(b: msg_pb.ContentBlock, field: str) -> msg.ContentBlock:
    kind = b.WhichOneof("block")
    if kind == "text":
        return msg.ContentBlock(msg.ContentKind.TEXT, text=b.text.text)
    if kind == "image":
        return msg.ContentBlock(
            msg.ContentKind.IMAGE, mime_type=b.image.mime_type, data=b.image.data
        )
    if kind == "thinking":
        t = b.thinking
        return msg.ContentBlock(
            msg.ContentKind.THINKING, text=t.thinking, signature=t.signature, redacted=t.redacted
        )
    if kind == "tool_call":
        c = b.tool_call
        return msg.ContentBlock(
            msg.ContentKind.TOOL_CALL,
            tool_call_id=c.id,
            tool_name=c.name,
            arguments_json=c.arguments_json,
        )
    if kind == "provider":
        return msg.ContentBlock.of_provider(b.provider.family, b.provider.json)
    raise InvalidArgument(
        f"{field} is an empty content block: set text, image, thinking, tool_call or provider",
        reason=ErrorReason.INVALID_CONTENT,
        field=field,
    )


def visibility_from_pb(value: int) -> msg.Visibility | None:
    """UNSPECIFIED means MODEL; None for a value this server does not know."""
    if value == msg_pb.MESSAGE_VISIBILITY_UNSPECIFIED:
        return msg.Visibility.MODEL
    return msg.Visibility(value) if value in msg.Visibility._value2member_map_ else None


def visibility_to_pb(visibility: msg.Visibility) -> msg_pb.MessageVisibility.ValueType:
    return msg_pb.MessageVisibility.Value(f"MESSAGE_VISIBILITY_{visibility.name}")


_new_message = replacer(msg.Message)
_BLANK_MESSAGE = msg.Message(msg.Role.USER)
"""A decoded message is a copy of this one: every field set, faster than
``Message(...)``, whose frozen ``__init__`` sets each field the slow way."""


def message_from_pb(m: msg_pb.Message, field: str) -> msg.Message:
    if m.role not in (msg_pb.ROLE_USER, msg_pb.ROLE_ASSISTANT, msg_pb.ROLE_TOOL_RESULT):
        raise InvalidArgument(
            f"{field}.role is {m.role}: use ROLE_USER, ROLE_ASSISTANT or ROLE_TOOL_RESULT",
            reason=ErrorReason.INVALID_ROLE,
            field=f"{field}.role",
        )
    if m.stop_reason not in msg.StopReason._value2member_map_:
        raise InvalidArgument(
            f"{field}.stop_reason {m.stop_reason} is unknown",
            reason=ErrorReason.INVALID_STOP_REASON,
            field=f"{field}.stop_reason",
        )
    visibility = visibility_from_pb(m.visibility)
    if visibility is None:
        raise InvalidArgument(
            f"{field}.visibility {m.visibility} is unknown",
            reason=ErrorReason.INVALID_VISIBILITY,
            field=f"{field}.visibility",
        )
    u = m.usage
    return _new_message(
        _BLANK_MESSAGE,
        role=msg.Role(m.role),
        content=tuple(_block_from_pb(b, f"{field}.content[{i}]") for i, b in enumerate(m.content)),
        message_id=m.message_id,
        stop_reason=msg.StopReason(m.stop_reason),
        usage=msg.Usage(
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens,
            u.total_tokens,
            u.reasoning_tokens,
        )
        if m.HasField("usage")
        else None,
        # Interned: thousands of hot messages share a handful of these strings.
        model=sys.intern(m.model),
        provider=sys.intern(m.provider),
        error_message=m.error_message,
        tool_call_id=m.tool_call_id,
        tool_name=sys.intern(m.tool_name),
        is_error=m.is_error,
        metadata=dict(m.metadata) if m.metadata else msg.EMPTY_METADATA,
        visibility=visibility,
    )


def _block_to_pb(b: msg.ContentBlock) -> msg_pb.ContentBlock:
    k = b.kind
    if k is msg.ContentKind.TEXT:
        return msg_pb.ContentBlock(text=msg_pb.TextContent(text=b.text))
    if k is msg.ContentKind.IMAGE:
        return msg_pb.ContentBlock(image=msg_pb.ImageContent(mime_type=b.mime_type, data=b.data))
    if k is msg.ContentKind.THINKING:
        return msg_pb.ContentBlock(
            thinking=msg_pb.ThinkingContent(
                thinking=b.text, signature=b.signature, redacted=b.redacted
            )
        )
    if k is msg.ContentKind.PROVIDER:
        return msg_pb.ContentBlock(
            provider=msg_pb.ProviderContent(family=b.family, json=b.provider_json)
        )
    return msg_pb.ContentBlock(
        tool_call=msg_pb.ToolCall(
            id=b.tool_call_id, name=b.tool_name, arguments_json=b.arguments_json
        )
    )


def message_to_pb(m: msg.Message) -> msg_pb.Message:
    out = msg_pb.Message(
        seq=m.seq,
        message_id=m.message_id,
        role=int(m.role),  # type: ignore[arg-type]
        content=[_block_to_pb(b) for b in m.content],
        stop_reason=int(m.stop_reason),  # type: ignore[arg-type]
        model=m.model,
        provider=m.provider,
        error_message=m.error_message,
        tool_call_id=m.tool_call_id,
        tool_name=m.tool_name,
        is_error=m.is_error,
        state=int(m.state if m.seq else msg.MessageState.ACTIVE),  # type: ignore[arg-type]
        token_count=m.token_count,
        metadata=dict(m.metadata),
    )
    if m.history_only:
        out.visibility = visibility_to_pb(m.visibility)
    if m.create_time_us:
        out.create_time.CopyFrom(timestamp(m.create_time_us))
    if m.usage is not None:
        out.usage.CopyFrom(usage_to_pb(m.usage))
    return out


# -- model input ----------------------------------------------------------------


def encode_message(m: msg.Message) -> bytes:
    """``m`` as a length-delimited ModelInput.messages field.

    Deterministic: metadata entries in key order, not in the order the map was
    filled (request order while hot, sorted after a restore).
    """
    body = message_body(m)  # message_to_pb(m)'s bytes, written directly (faster)
    return _MESSAGES_TAG + _varint(len(body)) + body


def new_encoding_cache(limit_bytes: int = DEFAULT_LIMIT_BYTES) -> EncodingCache:
    """An empty cache of encode_message encodings (one per server)."""
    return EncodingCache(encode_message, limit_bytes)


# -- compaction -------------------------------------------------------------------


def checkpoint_to_pb(c: Checkpoint) -> svc_pb.Compaction:
    return svc_pb.Compaction(
        compaction_id=c.compaction_id,
        session_id=outer_id(c.session_id),
        summary=c.summary,
        turn_prefix_summary=c.turn_prefix_summary,
        first_kept_seq=c.first_kept_seq,
        tokens_before=c.tokens_before,
        tokens_after=c.tokens_after,
        split_turn=c.split_turn,
        read_files=list(c.read_files),
        modified_files=list(c.modified_files),
        summarizer=c.summarizer,
        trigger=trigger_to_pb(c.trigger),
        create_time=timestamp(c.create_time_us),
        superseded=c.superseded,
        at_seq=c.at_seq,
        tool_results_cleared_through_seq=c.tool_results_cleared_through,
        tool_results_cleared=c.tool_results_cleared,
        tool_result_tokens_cleared=c.tool_result_tokens_cleared,
        clearing_only=c.clearing_only,
        proposed_memory_ids=list(c.proposed_memory_ids),
        memory_tokens=c.memory_tokens,
        loss_report=report_to_pb(c.loss_report) if c.loss_report else None,
        summarizer_usage=usage_to_pb(c.summarizer_usage) if c.summarizer_usage else None,
    )


def handle_to_pb(handle: PlanHandle) -> svc_pb.CompactionPlan:
    plan = handle.plan
    anchors, omitted = plan_anchors(handle.anchors)
    return svc_pb.CompactionPlan(
        plan_id=handle.plan_id,
        session_id=outer_id(plan.session_id),
        first_kept_seq=plan.first_kept_seq,
        tokens_before=plan.tokens_before,
        split_turn=plan.split_turn,
        previous_summary=plan.previous_summary,
        history_prompt=_prompt_to_pb(plan.history_prompt),
        turn_prefix_prompt=_prompt_to_pb(plan.turn_prefix_prompt),
        expire_time=timestamp(handle.expire_time_us),
        summarized_from_seq=plan.summarized_from_seq,
        summarized_to_seq=plan.summarized_to_seq,
        step=handle.step,
        step_count=handle.step_count,
        summarizer_context_window=plan.context_window,
        anchors=anchors,
        anchors_omitted=omitted,
    )


def step_to_pb(next_step: PlanHandle) -> svc_pb.Compaction:
    """CommitCompaction's answer for a step before the final one: nothing was
    committed (no compaction_id), only the next step to summarise."""
    return svc_pb.Compaction(
        session_id=outer_id(next_step.plan.session_id), next_plan=handle_to_pb(next_step)
    )


def _prompt_to_pb(p: SummaryPrompt | None) -> svc_pb.SummaryPrompt | None:
    if p is None:
        return None
    return svc_pb.SummaryPrompt(system=p.system, user=p.user, max_tokens=p.max_tokens)


def provider_error_from_pb(p: svc_pb.ProviderError) -> ProviderError:
    return ProviderError(p.http_status, p.body, dict(p.headers))


def commit_to_pb(checkpoint: Checkpoint | None, next_step: PlanHandle | None) -> svc_pb.Compaction:
    """CommitCompaction's answer: the checkpoint, or the next step of a chunked compaction."""
    if next_step is not None:
        return step_to_pb(next_step)
    assert checkpoint is not None
    return checkpoint_to_pb(checkpoint)
