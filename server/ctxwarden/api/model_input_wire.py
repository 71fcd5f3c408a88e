"""ModelInput on the wire: its encoding from cached per-message encodings, and
the resume tokens that let a client be sent only what it does not hold (native
messages after ``messages_offset``, rendered JSON after ``rendered_prefix_bytes``)."""

from __future__ import annotations

from dataclasses import replace

from ctxwarden.api.convert import encode_message, message_to_pb, method_to_pb
from ctxwarden.api.convert_session import tool_to_pb
from ctxwarden.api.convert_usage import cache_prefix_to_pb
from ctxwarden.api.encoding import EncodingCache
from ctxwarden.api.tenancy import outer_id
from ctxwarden.core.model_input import ModelInputView
from ctxwarden.core.view import Digests
from ctxwarden.v1 import context_service_pb2 as svc_pb


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
    try:
        digest = int(fingerprint, 16)
    except ValueError:
        return 0
    if f"{digest:016x}" != fingerprint:  # only the form tokens are made in
        return 0
    if isinstance(v.digests, Digests):  # a fork also takes its source's token
        return held if v.digests.holds(index, digest) else 0
    return held if v.digests[index] == digest else 0


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
) -> bytes:
    """The serialized ModelInput, built from per-message encodings (cached in ``cache``).

    Byte-for-byte deterministic for the same state (and offset). Encoding a
    1,000-message input from scratch costs ~20 ms in Python; with the cache it
    costs ~0.2 ms. With ``offset`` > 0 only messages[offset:] are sent; without
    ``with_messages`` none are (view BASIC), and so there is no resume_token
    for them (see ``basic_model_input_bytes``).
    """
    if not with_messages:
        head = model_input_to_pb(replace(v, messages=()))
        head.resume_token = ""
        return head.SerializeToString(deterministic=True)
    if cache is None:
        encoded = [encode_message(m) for m in v.messages[offset:]]
    else:
        encoded = cache.encode(v, offset)
    return _head(v, offset) + b"".join(encoded)


async def model_input_bytes_cooperatively(
    v: ModelInputView, offset: int, cache: EncodingCache
) -> bytes:
    """``model_input_bytes`` (with messages), the same bytes, but the messages
    the cache lacks are encoded in slices that let the event loop run other
    calls in between (the first input of a 100,000-message session)."""
    encoded = await cache.encode_cooperatively(v, offset)
    return _head(v, offset) + b"".join(encoded)


def _head(v: ModelInputView, offset: int) -> bytes:
    head = model_input_to_pb(replace(v, messages=()))
    head.messages_offset = offset
    return head.SerializeToString(deterministic=True)


def basic_model_input_bytes(v: ModelInputView, fmt: int, token: str) -> bytes:
    """The serialized ModelInput without messages (view BASIC). Its resume token
    names the rendering; a ``token`` naming a rendering this one begins with
    gets only the rendered JSON after the items it holds
    (ModelInput.rendered_prefix_bytes)."""
    own = rendered_resume_token(fmt, v)
    point = rendered_resume_point(token, fmt, v) if own and token else None
    if point is None or v.rendered is None or v.rendered.marks is None:
        head = model_input_to_pb(replace(v, messages=()))
    else:
        head = model_input_to_pb(replace(v, messages=(), rendered=None))
        head.rendered_json = v.rendered.after(point)
        head.rendered_prefix_bytes = v.rendered.marks.utf8[point]
    head.resume_token = own
    return head.SerializeToString(deterministic=True)


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
            memory_tokens=t.memory_tokens,
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
        memory_block=v.session.memory.text,
        memory_ids=list(v.session.memory.memory_ids),
        cache_prefix=cache_prefix_to_pb(v.cache) if v.cache is not None else None,
    )
