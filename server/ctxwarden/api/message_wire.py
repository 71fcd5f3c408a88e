"""A Message's protobuf encoding written directly, byte for byte what
``message_to_pb(m).SerializeToString(deterministic=True)`` gives, ~5x faster.

Building a ``msg_pb.Message`` from keyword arguments and serialising it costs
~40 us a message; a 100,000-message native input took seconds of event-loop
time for that alone. Here each field is written in field-number order, proto3
defaults left out (but a map entry always has its key and value), map entries
in the runtime's deterministic key order (``_map_order``).
tests/hardening/test_native_encoding.py holds it to the protobuf runtime's bytes
over every kind of block and field; a field the encoder does not know about
would fail there.
"""

from __future__ import annotations

from ctxwarden.core.content import ContentBlock, ContentKind
from ctxwarden.core.messages import Message, MessageState, Usage, Visibility
from ctxwarden.v1 import message_pb2 as msg_pb

_U64 = 1 << 64


def varint(value: int) -> bytes:
    """An unsigned (or, as int64/enums are, two's complement) base-128 varint."""
    if 0 <= value < _TABLE_SIZE:
        return _TABLE[value]
    if value < 0:
        value += _U64
    out = []
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_TABLE_SIZE = 1 << 14
_TABLE = [
    bytes([i]) if i < 0x80 else bytes([(i & 0x7F) | 0x80, i >> 7]) for i in range(_TABLE_SIZE)
]
"""The one- and two-byte varints (lengths, counts, roles): ~0.6 MB, made once."""
_VISIBILITY = {
    v: msg_pb.MessageVisibility.Value(f"MESSAGE_VISIBILITY_{v.name}") for v in Visibility
}


def _map_order(key: str) -> tuple[int, ...]:
    """The order the protobuf runtime (upb) writes map keys in deterministically:
    by UTF-8 bytes, but a key before any key that is a prefix of it."""
    return (*key.encode(), 256)


def _text(tag: bytes, value: str) -> bytes:
    if not value:
        return b""
    raw = value.encode()
    return tag + varint(len(raw)) + raw


def _raw(tag: bytes, raw: bytes) -> bytes:
    return tag + varint(len(raw)) + raw if raw else b""


def _int(tag: bytes, value: int) -> bytes:
    return tag + varint(value) if value else b""


def _sub(tag: bytes, body: bytes) -> bytes:
    """A set submessage field: written even when its body is empty."""
    return tag + varint(len(body)) + body


def block_body(b: ContentBlock) -> bytes:
    """One ContentBlock's encoding (its oneof member, always present)."""
    k = b.kind
    if k is ContentKind.TEXT:
        raw = b.text.encode()
        if not raw:
            return b"\x0a\x00"
        head = varint(len(raw))
        return b"\x0a" + varint(len(raw) + len(head) + 1) + b"\x0a" + head + raw
    if k is ContentKind.IMAGE:
        return _sub(b"\x12", _text(b"\x0a", b.mime_type) + _raw(b"\x12", b.data))
    if k is ContentKind.THINKING:
        inner = _text(b"\x0a", b.text) + _text(b"\x12", b.signature)
        return _sub(b"\x1a", inner + (b"\x18\x01" if b.redacted else b""))
    if k is ContentKind.PROVIDER:
        return _sub(b"\x2a", _text(b"\x0a", b.family) + _text(b"\x12", b.provider_json))
    inner = _text(b"\x0a", b.tool_call_id) + _text(b"\x12", b.tool_name)
    return _sub(b"\x22", inner + _text(b"\x1a", b.arguments_json))


def message_body(m: Message) -> bytes:
    """``m`` as an encoded ctxwarden.v1.Message (see the module docstring).

    Written out field by field (no helper per field): this is the hot loop of
    the first native input of a long session.
    """
    out = bytearray()
    if m.seq:
        out += b"\x08" + varint(m.seq)
    if m.message_id:
        raw = m.message_id.encode()
        out += b"\x12" + varint(len(raw)) + raw
    role = int(m.role)
    if role:
        out += b"\x18" + varint(role)
    for b in m.content:
        body = block_body(b)
        out += b"\x22" + varint(len(body)) + body
    stop = int(m.stop_reason)
    if stop:
        out += b"\x28" + varint(stop)
    if m.usage is not None:
        body = _usage(m.usage)
        out += b"\x32" + varint(len(body)) + body
    for tag, text in (
        (b"\x3a", m.model),
        (b"\x42", m.provider),
        (b"\x4a", m.error_message),
        (b"\x52", m.tool_call_id),
        (b"\x5a", m.tool_name),
    ):
        if text:
            raw = text.encode()
            out += tag + varint(len(raw)) + raw
    if m.is_error:
        out += b"\x60\x01"
    state = int(m.state if m.seq else MessageState.ACTIVE)
    if state:
        out += b"\x68" + varint(state)
    if m.token_count:
        out += b"\x70" + varint(m.token_count)
    if m.create_time_us:
        seconds, micros = divmod(m.create_time_us, 1_000_000)
        body = _int(b"\x08", seconds) + _int(b"\x10", micros * 1000)
        out += b"\x7a" + varint(len(body)) + body
    if m.metadata:
        for key in sorted(m.metadata, key=_map_order):
            entry = _sub(b"\x0a", key.encode()) + _sub(b"\x12", m.metadata[key].encode())
            out += _sub(b"\x82\x01", entry)
    if m.history_only:
        out += _int(b"\x88\x01", _VISIBILITY[m.visibility])
    return bytes(out)


def _usage(u: Usage) -> bytes:
    return (
        _int(b"\x08", u.input_tokens)
        + _int(b"\x10", u.output_tokens)
        + _int(b"\x18", u.cache_read_tokens)
        + _int(b"\x20", u.cache_write_tokens)
        + _int(b"\x28", u.total_tokens)
        + _int(b"\x30", u.reasoning_tokens)
    )
