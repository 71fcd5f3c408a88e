"""Content blocks: the parts of a message, as small as their content allows.

A hot session holds every block of its kept messages, so a block with only a
kind and a text has two slots, and ``packed`` compresses a long text (a zstd
frame: it never leaves the process) for the copy kept in memory.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import FrozenInstanceError

import zstandard


class ContentKind(enum.IntEnum):
    TEXT = 1
    IMAGE = 2
    THINKING = 3
    TOOL_CALL = 4
    PROVIDER = 5
    """A provider's item that ctxwarden does not model, kept as the provider sent it."""


PROVIDER_FAMILIES = ("openai-chat", "openai-responses", "anthropic", "google")
"""The wire formats a PROVIDER block can belong to: its JSON only makes sense
in that one (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages,
Google Gemini)."""


PACK_MIN_CHARS = 256
"""Texts at least this long are kept compressed in a hot session (``pack_message``)."""


_FORMAT = zstandard.FORMAT_ZSTD1_MAGICLESS
"""No magic number: 4 bytes less per text, which never leaves the process."""


class _Codec(threading.local):
    """One zstd compressor and decompressor per thread (neither is thread-safe;
    the loop packs, worker threads may unpack what they render).

    zstd at level 1 with a reused context: ~3x faster than a fresh deflate
    stream per text (which clears its tables each time), within 1 % of its
    size, and unpacking is ~2x faster. The frame records the text's size, so
    a decompress needs no bound.
    """

    def __init__(self) -> None:
        params = zstandard.ZstdCompressionParameters.from_level(
            1, format=_FORMAT, write_checksum=False, write_content_size=True
        )
        self.compress = zstandard.ZstdCompressor(compression_params=params).compress
        self.decompress = zstandard.ZstdDecompressor(format=_FORMAT).decompress


_CODEC = _Codec()


def _pack(text: str) -> str | bytes:
    """``text`` compressed when that saves at least an eighth, else as it is."""
    raw = text.encode("utf-8", "surrogatepass")
    packed: bytes = _CODEC.compress(raw)
    if len(packed) > len(raw) - (len(raw) >> 3):
        return text
    # A copy of exactly its size: zstandard allocates the worst case and shrinks
    # the object in place, which leaves the rest of the block unusable while the
    # text is kept (~2x the memory of the compressed text).
    return bytes(memoryview(packed))


def _unpack(text: str | bytes) -> str:
    if isinstance(text, str):
        return text
    raw: bytes = _CODEC.decompress(text)
    return raw.decode("utf-8", "surrogatepass")


_MORE = (
    "mime_type",
    "data",
    "signature",
    "redacted",
    "tool_call_id",
    "tool_name",
    "arguments_json",
    "family",
    "provider_json",
)
"""The fields besides kind and text, in the order of ContentBlock's arguments."""


class ContentBlock:
    """One content block. Which fields matter depends on ``kind``.

    TEXT uses ``text``; THINKING uses ``text``, ``signature``, ``redacted``;
    IMAGE uses ``mime_type`` and ``data``; TOOL_CALL uses ``tool_call_id``,
    ``tool_name`` and ``arguments_json``; PROVIDER uses ``family`` (one of
    ``PROVIDER_FAMILIES``) and ``provider_json``, the item's JSON (an object
    or an array) exactly as the provider sent it, sent back verbatim to that
    wire format only.

    Immutable, and as small as its content allows: a block with only a kind and
    a text (most of a session's memory) has two slots, any other is a
    ``_FullBlock`` with a slot for every field. A hot session keeps long texts
    compressed (``packed``); ``text`` always reads the text itself.
    """

    __slots__ = ("_text", "kind")

    kind: ContentKind
    _text: str | bytes
    """The text, or its zstd frame (UTF-8) once packed."""

    def __new__(
        cls,
        kind: ContentKind,
        text: str = "",
        mime_type: str = "",
        data: bytes = b"",
        signature: str = "",
        redacted: bool = False,
        tool_call_id: str = "",
        tool_name: str = "",
        arguments_json: str = "",
        family: str = "",
        provider_json: str = "",
    ) -> ContentBlock:
        more = (
            mime_type,
            data,
            signature,
            redacted,
            tool_call_id,
            tool_name,
            arguments_json,
            family,
            provider_json,
        )
        block = object.__new__(_FullBlock if any(more) else ContentBlock)
        _set(block, "kind", kind)
        _set(block, "_text", text)
        if any(more):
            for name, value in zip(_MORE, more, strict=True):
                _set(block, name, value)
        return block

    # The defaults of the fields a _FullBlock has slots for (its slots win).

    @property
    def mime_type(self) -> str:
        return ""

    @property
    def data(self) -> bytes:
        return b""

    @property
    def signature(self) -> str:
        return ""

    @property
    def redacted(self) -> bool:
        return False

    @property
    def tool_call_id(self) -> str:
        return ""

    @property
    def tool_name(self) -> str:
        return ""

    @property
    def arguments_json(self) -> str:
        return ""

    @property
    def family(self) -> str:
        return ""

    @property
    def provider_json(self) -> str:
        return ""

    @property
    def text(self) -> str:
        return _unpack(self._text)

    def _fields(self) -> tuple[object, ...]:
        return (
            self.kind,
            self.text,
            self.mime_type,
            self.data,
            self.signature,
            self.redacted,
            self.tool_call_id,
            self.tool_name,
            self.arguments_json,
            self.family,
            self.provider_json,
        )

    def packed(self) -> ContentBlock:
        """This block with its text compressed, when it is long enough to be worth it."""
        if not isinstance(self._text, str) or len(self._text) < PACK_MIN_CHARS:
            return self
        packed = _pack(self._text)
        if packed is self._text:
            return self
        block = object.__new__(type(self))
        _set(block, "kind", self.kind)
        _set(block, "_text", packed)
        if isinstance(self, _FullBlock):
            for name in _MORE:
                _set(block, name, getattr(self, name))
        return block

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ContentBlock):
            return NotImplemented
        if self is other:
            return True
        if type(self._text) is bytes and type(other._text) is bytes:  # one compressor, one output
            return self._text == other._text and self._fields()[2:] == other._fields()[2:]
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        names = ("kind", "text", *_MORE)
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(names, self._fields(), strict=True))
        return f"ContentBlock({shown})"

    def __reduce__(self) -> tuple[type[ContentBlock], tuple[object, ...]]:
        return ContentBlock, self._fields()

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    @staticmethod
    def of_text(text: str) -> ContentBlock:
        return ContentBlock(ContentKind.TEXT, text=text)

    @staticmethod
    def of_provider(family: str, provider_json: str) -> ContentBlock:
        return ContentBlock(ContentKind.PROVIDER, family=family, provider_json=provider_json)

    @staticmethod
    def of_tool_call(call_id: str, name: str, arguments_json: str = "{}") -> ContentBlock:
        return ContentBlock(
            ContentKind.TOOL_CALL,
            tool_call_id=call_id,
            tool_name=name,
            arguments_json=arguments_json,
        )


class _FullBlock(ContentBlock):
    """A block with any field besides its kind and text: a slot for each, which
    stands in front of ContentBlock's property of the same name."""

    __slots__ = _MORE


_set = object.__setattr__
