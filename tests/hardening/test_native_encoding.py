"""The native input's message encoding: the direct encoder writes exactly the
protobuf runtime's bytes, and the first input of a long session is encoded in
slices that let the event loop run other calls (the same bytes as in one go)."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

from ctxwarden.api.convert import encode_message, message_to_pb, new_encoding_cache
from ctxwarden.api.convert_requests import append_response
from ctxwarden.api.message_wire import message_body
from ctxwarden.api.model_input_wire import model_input_bytes, model_input_bytes_cooperatively
from ctxwarden.core.content import ContentBlock, ContentKind
from ctxwarden.core.messages import Message, MessageState, Role, StopReason, Usage, Visibility
from ctxwarden.core.model_input import ModelInputView, TokenBreakdown
from ctxwarden.core.session import Session
from ctxwarden.service.results import AppendResult
from ctxwarden.v1 import context_service_pb2 as svc_pb

TEXTS = ("", "a", "héllo wörld ✓ 𝄞", "x" * 200, "line\nbreak\x00nul", "日本語" * 50)


def _block(rng: random.Random) -> ContentBlock:
    def t() -> str:
        return rng.choice(TEXTS)

    kind = rng.choice(list(ContentKind))
    if kind is ContentKind.TEXT:
        return ContentBlock.of_text(t())
    if kind is ContentKind.IMAGE:
        return ContentBlock(kind, mime_type=t(), data=rng.randbytes(rng.choice((0, 3, 300))))
    if kind is ContentKind.THINKING:
        return ContentBlock(kind, text=t(), signature=t(), redacted=rng.random() < 0.5)
    if kind is ContentKind.PROVIDER:
        return ContentBlock(kind, family=t(), provider_json=t())
    return ContentBlock(kind, tool_call_id=t(), tool_name=t(), arguments_json=t())


def _number(rng: random.Random) -> int:
    return rng.choice((0, 1, 127, 128, 300, 2**31, 2**62, rng.randrange(1, 10**12)))


def _message(rng: random.Random) -> Message:
    usage = None
    if rng.random() < 0.4:
        usage = Usage(*(_number(rng) for _ in range(6)))
    metadata = {}
    if rng.random() < 0.4:
        metadata = {rng.choice(TEXTS)[:10]: rng.choice(TEXTS) for _ in range(rng.randrange(1, 5))}
    m = Message(
        role=rng.choice(list(Role)),
        content=tuple(_block(rng) for _ in range(rng.randrange(0, 4))),
        message_id=rng.choice(TEXTS)[:30],
        stop_reason=rng.choice(list(StopReason)),
        usage=usage,
        model=rng.choice(TEXTS),
        provider=rng.choice(TEXTS),
        error_message=rng.choice(TEXTS),
        tool_call_id=rng.choice(TEXTS),
        tool_name=rng.choice(TEXTS),
        is_error=rng.random() < 0.5,
        metadata=metadata,
        visibility=rng.choice(list(Visibility)),
    )
    return replace(
        m,
        seq=rng.choice((0, 1, 99_999, _number(rng))),
        state=rng.choice(list(MessageState)),
        token_count=_number(rng),
        create_time_us=rng.choice((0, 1, 999, 1_700_000_000_123_456)),
    )


def test_the_direct_encoder_writes_the_protobuf_runtime_bytes() -> None:
    rng = random.Random(26)
    for _ in range(3000):
        m = _message(rng)
        expected = message_to_pb(m).SerializeToString(deterministic=True)
        assert message_body(m) == expected, m


def test_append_responses_are_the_protobuf_runtime_bytes() -> None:
    """AppendMessages and StreamMessages answer with bytes written directly."""
    rng = random.Random(27)
    for _ in range(500):
        messages = tuple(_message(rng) for _ in range(rng.randrange(0, 4)))
        result = AppendResult(messages, _number(rng), _number(rng))
        for view in (svc_pb.MESSAGE_VIEW_UNSPECIFIED, svc_pb.MESSAGE_VIEW_FULL):
            expected = svc_pb.AppendMessagesResponse(
                messages=[message_to_pb(m) for m in messages],
                last_seq=result.last_seq,
                context_tokens=result.context_tokens,
            )
            assert append_response(result, view) == expected.SerializeToString(deterministic=True)
        basic = svc_pb.AppendMessagesResponse(
            messages=[message_to_pb(replace(m, content=())) for m in messages],
            last_seq=result.last_seq,
            context_tokens=result.context_tokens,
        )
        assert append_response(result, svc_pb.MESSAGE_VIEW_BASIC) == basic.SerializeToString(
            deterministic=True
        )


def _view(messages: tuple[Message, ...]) -> ModelInputView:
    """A live input of ``messages`` (what the hot session's BuildModelInput gives)."""
    tokens = TokenBreakdown(1, 2, 3, 4, 10, 200_000, 150_000, True)
    return ModelInputView(
        session=Session(session_id="s-native", revision=1),
        messages=messages,
        notices=(),
        tokens=tokens,
        compaction_recommended=False,
        first_kept_seq=1,
        last_seq=len(messages),
        compaction_id="",
        prefix_hash="",
        summary="",
        live=True,
    )


async def test_a_long_first_input_is_encoded_in_slices_with_the_same_bytes() -> None:
    rng = random.Random(7)
    messages = tuple(replace(_message(rng), seq=i + 1) for i in range(6000))
    v = _view(messages)
    expected = model_input_bytes(v, 0, cache=None)
    assert svc_pb.ModelInput.FromString(expected).messages[0].seq == 1
    cache = new_encoding_cache(256 * 1024 * 1024)
    turns = 0
    done = False

    async def count_turns() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.ensure_future(count_turns())
    got = await model_input_bytes_cooperatively(v, 0, cache)
    done = True
    await counter
    assert got == expected
    assert turns > 1  # the loop ran other work while the input was encoded
    assert model_input_bytes(v, 0, cache=cache) == expected  # and the cache holds it
    assert await model_input_bytes_cooperatively(v, 100, cache) == model_input_bytes(v, 100)
    assert encode_message(messages[0]).endswith(message_body(messages[0]))
