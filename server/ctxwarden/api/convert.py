"""Protobuf <-> domain conversion of messages, model inputs and compactions.

Enum values are checked here, and each enum of the API has its one map between
proto and domain values here; sessions are in convert_session.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from ctxwarden.api.convert_session import timestamp, tool_to_pb
from ctxwarden.api.encoding import DEFAULT_LIMIT_BYTES, EncodingCache
from ctxwarden.api.tenancy import outer_id
from ctxwarden.core.compaction.planner import Plan
from ctxwarden.core.compaction.types import SummaryPrompt
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.messages import (
    EMPTY_METADATA,
    ContentBlock,
    ContentKind,
    Message,
    MessageState,
    Role,
    StopReason,
    Usage,
    Visibility,
)
from ctxwarden.core.model_input import ModelInputView, TokenCountMethod
from ctxwarden.core.provider_errors import ProviderError
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Checkpoint, CompactionTrigger
from ctxwarden.v1 import context_service_pb2 as svc_pb
from ctxwarden.v1 import message_pb2 as msg_pb

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
}
_TRIGGERS_TO_PB: dict[CompactionTrigger, svc_pb.CompactionTrigger.ValueType] = {
    CompactionTrigger.MANUAL: svc_pb.COMPACTION_TRIGGER_MANUAL,
    CompactionTrigger.THRESHOLD: svc_pb.COMPACTION_TRIGGER_THRESHOLD,
    CompactionTrigger.OVERFLOW: svc_pb.COMPACTION_TRIGGER_OVERFLOW,
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


def _block_from_pb(b: msg_pb.ContentBlock, field: str) -> ContentBlock:
    kind = b.WhichOneof("block")
    if kind == "text":
        return ContentBlock(ContentKind.TEXT, text=b.text.text)
    if kind == "image":
        return ContentBlock(ContentKind.IMAGE, mime_type=b.image.mime_type, data=b.image.data)
    if kind == "thinking":
        t = b.thinking
        return ContentBlock(
            ContentKind.THINKING, text=t.thinking, signature=t.signature, redacted=t.redacted
        )
    if kind == "tool_call":
        c = b.tool_call
        return ContentBlock(
            ContentKind.TOOL_CALL,
            tool_call_id=c.id,
            tool_name=c.name,
            arguments_json=c.arguments_json,
        )
    if kind == "provider":
        return ContentBlock.of_provider(b.provider.family, b.provider.json)
    raise InvalidArgument(
        f"{field} is an empty content block: set text, image, thinking, tool_call or provider",
        reason=ErrorReason.INVALID_CONTENT,
        field=field,
    )


def visibility_from_pb(value: int) -> Visibility | None:
    """UNSPECIFIED means MODEL; None for a value this server does not know."""
    if value == msg_pb.MESSAGE_VISIBILITY_UNSPECIFIED:
        return Visibility.MODEL
    return Visibility(value) if value in Visibility._value2member_map_ else None


def visibility_to_pb(visibility: Visibility) -> msg_pb.MessageVisibility.ValueType:
    return msg_pb.MessageVisibility.Value(f"MESSAGE_VISIBILITY_{visibility.name}")


def message_from_pb(m: msg_pb.Message, field: str) -> Message:
    if m.role not in (msg_pb.ROLE_USER, msg_pb.ROLE_ASSISTANT, msg_pb.ROLE_TOOL_RESULT):
        raise InvalidArgument(
            f"{field}.role is {m.role}: use ROLE_USER, ROLE_ASSISTANT or ROLE_TOOL_RESULT",
            reason=ErrorReason.INVALID_ROLE,
            field=f"{field}.role",
        )
    if m.stop_reason not in StopReason._value2member_map_:
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
    return Message(
        role=Role(m.role),
        content=tuple(_block_from_pb(b, f"{field}.content[{i}]") for i, b in enumerate(m.content)),
        message_id=m.message_id,
        stop_reason=StopReason(m.stop_reason),
        usage=Usage(
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens,
            u.total_tokens,
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
        metadata=dict(m.metadata) if m.metadata else EMPTY_METADATA,
        visibility=visibility,
    )


def _block_to_pb(b: ContentBlock) -> msg_pb.ContentBlock:
    k = b.kind
    if k is ContentKind.TEXT:
        return msg_pb.ContentBlock(text=msg_pb.TextContent(text=b.text))
    if k is ContentKind.IMAGE:
        return msg_pb.ContentBlock(image=msg_pb.ImageContent(mime_type=b.mime_type, data=b.data))
    if k is ContentKind.THINKING:
        return msg_pb.ContentBlock(
            thinking=msg_pb.ThinkingContent(
                thinking=b.text, signature=b.signature, redacted=b.redacted
            )
        )
    if k is ContentKind.PROVIDER:
        return msg_pb.ContentBlock(
            provider=msg_pb.ProviderContent(family=b.family, json=b.provider_json)
        )
    return msg_pb.ContentBlock(
        tool_call=msg_pb.ToolCall(
            id=b.tool_call_id, name=b.tool_name, arguments_json=b.arguments_json
        )
    )


def message_to_pb(m: Message) -> msg_pb.Message:
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
        state=int(m.state if m.seq else MessageState.ACTIVE),  # type: ignore[arg-type]
        token_count=m.token_count,
        metadata=dict(m.metadata),
    )
    if m.history_only:
        out.visibility = visibility_to_pb(m.visibility)
    if m.create_time_us:
        out.create_time.CopyFrom(timestamp(m.create_time_us))
    if m.usage is not None:
        u = m.usage
        out.usage.CopyFrom(
            msg_pb.Usage(
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cache_read_tokens=u.cache_read_tokens,
                cache_write_tokens=u.cache_write_tokens,
                total_tokens=u.total_tokens,
            )
        )
    return out


# -- model input ----------------------------------------------------------------


def encode_message(m: Message) -> bytes:
    """``m`` as a length-delimited ModelInput.messages field.

    Deterministic: metadata entries in key order, not in the order the map was
    filled (request order while hot, sorted after a restore).
    """
    body: bytes = message_to_pb(m).SerializeToString(deterministic=True)
    return _MESSAGES_TAG + _varint(len(body)) + body


def new_encoding_cache(limit_bytes: int = DEFAULT_LIMIT_BYTES) -> EncodingCache:
    """An empty cache of encode_message encodings (one per server)."""
    return EncodingCache(encode_message, limit_bytes)


def resume_token(v: ModelInputView) -> str:
    """Names the stable part of this input, for BuildModelInputRequest.resume_token.

    ``<messages>.<fingerprint>``: deterministic, so the same state gives the
    same token on any replica and after a restart.
    """
    if not v.digests:
        return ""
    k = v.stable_messages
    return f"{k}.{v.digests[k - v.summary_messages]:016x}"


def resume_offset(token: str, v: ModelInputView) -> int:
    """How many leading messages a client holding ``token``'s input can keep (0: none)."""
    count, _, fingerprint = token.partition(".")
    if not v.digests or not count.isdecimal() or len(count) > 9 or len(fingerprint) != 16:
        return 0
    held = int(count)
    index = held - v.summary_messages
    if held > v.stable_messages or index < 0:
        return 0
    return held if f"{v.digests[index]:016x}" == fingerprint else 0


def rendered_resume_token(fmt: int, v: ModelInputView) -> str:
    """Names the leading provider items of ``v.rendered_json``:
    ``r<format>.<items>.<fingerprint>``, deterministic like resume_token."""
    marks = None if v.rendered is None else v.rendered.marks
    if marks is None:
        return ""
    return f"r{fmt}.{marks.stable}.{marks.digests[marks.stable]:016x}"


def rendered_resume_point(token: str, fmt: int, v: ModelInputView) -> int | None:
    """How many leading provider items of ``v``'s rendering a holder of
    ``token``'s rendering keeps; None when the token names something else."""
    kind, _, rest = token.partition(".")
    count, _, fingerprint = rest.partition(".")
    marks = None if v.rendered is None else v.rendered.marks
    if (
        marks is None
        or kind != f"r{fmt}"
        or not count.isdecimal()
        or len(count) > 9
        or len(fingerprint) != 16
    ):
        return None
    try:
        digest = int(fingerprint, 16)
    except ValueError:
        return None
    return int(count) if marks.holds(int(count), digest) else None


def model_input_bytes(
    v: ModelInputView,
    offset: int = 0,
    *,
    with_messages: bool = True,
    cache: EncodingCache | None = None,
    rendered: tuple[str, int | None] = ("", None),
) -> bytes:
    """The serialized ModelInput, built from per-message encodings (cached in ``cache``).

    Byte-for-byte deterministic for the same state (and offset). Encoding a
    1,000-message input from scratch costs ~20 ms in Python; with the cache it
    costs ~0.2 ms. With ``offset`` > 0 only messages[offset:] are sent; without
    ``with_messages`` none are (view BASIC): the resume token is then
    ``rendered``'s, and with its resume point (items the client holds) only the
    rendered JSON after those items is sent (ModelInput.rendered_prefix_bytes).
    """
    if not with_messages:
        token, point = rendered
        if point is None or v.rendered is None or v.rendered.marks is None:
            head = model_input_to_pb(replace(v, messages=()))
        else:
            head = model_input_to_pb(replace(v, messages=(), rendered=None))
            head.rendered_json = v.rendered.after(point)
            head.rendered_prefix_bytes = v.rendered.marks.utf8[point]
        head.resume_token = token
        return head.SerializeToString(deterministic=True)
    head = model_input_to_pb(replace(v, messages=()))
    head.messages_offset = offset
    if cache is None:
        encoded = [encode_message(m) for m in v.messages[offset:]]
    else:
        encoded = cache.encode(v, offset)
    return head.SerializeToString(deterministic=True) + b"".join(encoded)


def model_input_to_pb(v: ModelInputView) -> svc_pb.ModelInput:
    t = v.tokens
    return svc_pb.ModelInput(
        session_id=outer_id(v.session.session_id),
        system_prompt=v.session.system_prompt,
        tools=[tool_to_pb(x) for x in v.session.tools],
        messages=[message_to_pb(m) for m in v.messages],
        tokens=svc_pb.TokenBreakdown(
            system_tokens=t.system_tokens,
            tools_tokens=t.tools_tokens,
            summary_tokens=t.summary_tokens,
            message_tokens=t.message_tokens,
            total_tokens=t.total_tokens,
            context_window=t.context_window,
            compaction_threshold=t.compaction_threshold,
            estimated=t.estimated,
            anchored_total_tokens=t.anchored_total_tokens,
            estimate_error_ratio=t.estimate_error_ratio,
            method=method_to_pb(t.method),
        ),
        compaction_recommended=v.compaction_recommended,
        first_kept_seq=v.first_kept_seq,
        last_seq=v.last_seq,
        compaction_id=v.compaction_id,
        prefix_hash=v.prefix_hash,
        notices=[svc_pb.Notice(code=n.code, seq=n.seq, detail=n.detail) for n in v.notices],
        summary=v.summary,
        rendered_json=v.rendered_json,
        resume_token=resume_token(v),
    )


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
    )


def _prompt_to_pb(p: SummaryPrompt | None) -> svc_pb.SummaryPrompt | None:
    if p is None:
        return None
    return svc_pb.SummaryPrompt(system=p.system, user=p.user, max_tokens=p.max_tokens)


def plan_to_pb(plan_id: str, plan: Plan, expire_us: int) -> svc_pb.CompactionPlan:
    return svc_pb.CompactionPlan(
        plan_id=plan_id,
        session_id=outer_id(plan.session_id),
        first_kept_seq=plan.first_kept_seq,
        tokens_before=plan.tokens_before,
        split_turn=plan.split_turn,
        previous_summary=plan.previous_summary,
        history_prompt=_prompt_to_pb(plan.history_prompt),
        turn_prefix_prompt=_prompt_to_pb(plan.turn_prefix_prompt),
        expire_time=timestamp(expire_us),
        summarized_from_seq=plan.summarized_from_seq,
        summarized_to_seq=plan.summarized_to_seq,
    )


def provider_error_from_pb(p: svc_pb.ProviderError) -> ProviderError:
    return ProviderError(p.http_status, p.body, dict(p.headers))
