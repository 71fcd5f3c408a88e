"""Image sizes from file headers, and what an image costs each provider in tokens.

Pure functions over bytes: only the first bytes of PNG, GIF and WebP files
are read, and for JPEG the marker segments up to the first frame header; no
image is decoded. Rules are named so a model table entry can pick one:

* ``openai``: high detail. Fit in 2048 x 2048, then shrink so the shortest
  side is at most 768, and count 512-px tiles: 85 + 170 per tile.
* ``openai-low``: low detail, a flat 85.
* ``anthropic``: width x height / 750, after shrinking so the long edge is at
  most 1568 px and the area at most 1568 x 784 px (~1.23 megapixels, ~1640
  tokens). Anthropic says images over ~1600 tokens are shrunk, and documents
  1092 x 1092, 951 x 1268, 896 x 1344, 819 x 1456 and 784 x 1568 as the
  largest sizes that are not; this budget keeps all of them whole, so it
  errs towards counting a little more, never less.
* ``gemini``: 258 when both sides are at most 384 px, else 258 per 768 x 768
  tile, after shrinking to fit 3072 x 3072 (Google scales larger images down to
  that, keeping the aspect ratio), so at most 16 tiles.
* ``default``: a flat DEFAULT_IMAGE_TOKENS, the estimate used whenever an
  image's dimensions cannot be read.

Every size-dependent rule answers DEFAULT_IMAGE_TOKENS for an image whose
header it cannot read. Rules only scale images down, never up.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from typing import Final

DEFAULT_IMAGE_TOKENS: Final = 1200

ANTHROPIC_MAX_EDGE: Final = 1568
ANTHROPIC_MAX_PIXELS: Final = 1568 * 784
GEMINI_MAX_EDGE: Final = 3072

_PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"

# JPEG start-of-frame markers: C0-CF except DHT (C4), JPG (C8) and DAC (CC).
_SOF_MARKERS: Final = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers with no length field: TEM, RST0-7, SOI, EOI.
_STANDALONE_MARKERS: Final = frozenset({0x01, *range(0xD0, 0xD9)})


def _png_size(data: bytes) -> tuple[int, int] | None:
    # signature, IHDR length (13), "IHDR", width, height (big-endian).
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _gif_size(data: bytes) -> tuple[int, int] | None:
    # "GIF87a"/"GIF89a", then the logical screen width and height (little-endian).
    if len(data) < 10:
        return None
    width, height = struct.unpack("<HH", data[6:10])
    return width, height


def _webp_size(data: bytes) -> tuple[int, int] | None:
    # RIFF <size> WEBP, then the first chunk: "VP8 ", "VP8L" or "VP8X".
    if len(data) < 30:
        return None
    chunk = data[12:16]
    body = data[20:]
    if chunk == b"VP8 ":
        # 3-byte frame tag, start code 9d 01 2a, then 14-bit width and height.
        if body[3:6] != b"\x9d\x01\x2a":
            return None
        width, height = struct.unpack("<HH", body[6:10])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L":
        # Signature 0x2f, then 14 bits width - 1 and 14 bits height - 1.
        if body[0] != 0x2F:
            return None
        bits = int.from_bytes(body[1:5], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        # Flags (1 byte), reserved (3), then 24-bit canvas width - 1 and height - 1.
        width = int.from_bytes(body[4:7], "little") + 1
        height = int.from_bytes(body[7:10], "little") + 1
        return width, height
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2  # past SOI
    n = len(data)
    while i < n:
        if data[i] != 0xFF:
            return None
        while i < n and data[i] == 0xFF:  # fill bytes before a marker
            i += 1
        if i >= n:
            return None
        marker = data[i]
        i += 1
        if marker in _STANDALONE_MARKERS:
            if marker == 0xD9:  # EOI before any frame
                return None
            continue
        if i + 2 > n:
            return None
        (length,) = struct.unpack(">H", data[i : i + 2])
        if length < 2:
            return None
        if marker in _SOF_MARKERS:
            # length, precision (1 byte), height, width.
            if i + 7 > n:
                return None
            height, width = struct.unpack(">HH", data[i + 3 : i + 7])
            return width, height
        if marker == 0xDA:  # start of scan without a frame header
            return None
        i += length
    return None


def image_dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, JPEG, GIF or WebP header; None if unreadable.

    A header that claims a zero width or height also gives None. JPEG EXIF
    rotation is ignored: every rule here costs a rotated image the same.
    """
    size: tuple[int, int] | None = None
    if data.startswith(_PNG_SIGNATURE):
        size = _png_size(data)
    elif data.startswith(b"\xff\xd8"):
        size = _jpeg_size(data)
    elif data[:6] in (b"GIF87a", b"GIF89a"):
        size = _gif_size(data)
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        size = _webp_size(data)
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return size


def _scaled(width: int, height: int, factor: float) -> tuple[int, int]:
    """Both sides times ``factor`` if it shrinks them, rounded, at least 1 px."""
    if factor >= 1:
        return width, height
    return max(1, round(width * factor)), max(1, round(height * factor))


def openai_tokens(width: int, height: int) -> int:
    """OpenAI high detail: 85 + 170 per 512-px tile of the resized image."""
    width, height = _scaled(width, height, min(2048 / width, 2048 / height))
    width, height = _scaled(width, height, 768 / min(width, height))
    tiles = math.ceil(width / 512) * math.ceil(height / 512)
    return 85 + 170 * tiles


def anthropic_tokens(width: int, height: int) -> int:
    """Anthropic: pixels / 750 after fitting the long edge and pixel budget."""
    width, height = _scaled(width, height, ANTHROPIC_MAX_EDGE / max(width, height))
    width, height = _scaled(width, height, math.sqrt(ANTHROPIC_MAX_PIXELS / (width * height)))
    return math.ceil(width * height / 750)


def gemini_tokens(width: int, height: int) -> int:
    """Gemini 2.x: 258 for a small image, else 258 per 768 x 768 tile of the image
    fitted into 3072 x 3072.

    Without the fit, a header claiming 4294967295 x 4294967295 px would cost
    8 * 10**15 tokens: more than a stored count can hold, and no real cost.
    """
    if width <= 384 and height <= 384:
        return 258
    width, height = _scaled(width, height, GEMINI_MAX_EDGE / max(width, height))
    return 258 * math.ceil(width / 768) * math.ceil(height / 768)


_FLAT_RULES: Final[Mapping[str, int]] = {"default": DEFAULT_IMAGE_TOKENS, "openai-low": 85}
_SIZED_RULES: Final[Mapping[str, Callable[[int, int], int]]] = {
    "openai": openai_tokens,
    "anthropic": anthropic_tokens,
    "gemini": gemini_tokens,
}

IMAGE_RULES: Final[frozenset[str]] = frozenset({*_FLAT_RULES, *_SIZED_RULES})
"""Every rule name image_tokens accepts."""


def check_image_rule(rule: str) -> None:
    """Raise ValueError, listing the known rules, unless ``rule`` is one."""
    if rule not in IMAGE_RULES:
        known = ", ".join(sorted(IMAGE_RULES))
        raise ValueError(f"unknown image rule {rule!r}; known: {known}")


def image_tokens_for_size(rule: str, width: int, height: int) -> int:
    """Tokens an image of ``width`` x ``height`` pixels costs under ``rule``."""
    check_image_rule(rule)
    if rule in _FLAT_RULES:
        return _FLAT_RULES[rule]
    if width <= 0 or height <= 0:
        return DEFAULT_IMAGE_TOKENS
    return _SIZED_RULES[rule](width, height)


def image_tokens(rule: str, data: bytes) -> int:
    """Tokens one image (file bytes) costs under ``rule``.

    DEFAULT_IMAGE_TOKENS when a size-dependent rule cannot read the header;
    raises ValueError for a rule name not in IMAGE_RULES.
    """
    check_image_rule(rule)
    if rule in _FLAT_RULES:
        return _FLAT_RULES[rule]
    size = image_dimensions(data)
    if size is None:
        return DEFAULT_IMAGE_TOKENS
    return _SIZED_RULES[rule](*size)
