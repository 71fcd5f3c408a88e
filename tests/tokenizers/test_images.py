"""Image dimensions from headers, and per-provider image token rules."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.images import (
    ANTHROPIC_MAX_EDGE,
    ANTHROPIC_MAX_PIXELS,
    DEFAULT_IMAGE_TOKENS,
    IMAGE_RULES,
    anthropic_tokens,
    gemini_tokens,
    image_dimensions,
    image_tokens,
    image_tokens_for_size,
    openai_tokens,
)
from tests.tokenizers import imagefiles

Builder = Callable[[int, int], bytes]

BUILDERS: dict[str, Builder] = {
    "png": imagefiles.png,
    "jpeg": imagefiles.jpeg,
    "jpeg-progressive": lambda w, h: imagefiles.jpeg(w, h, progressive=True),
    "gif": imagefiles.gif,
    "webp-lossless": imagefiles.webp_lossless,
    "webp-extended": imagefiles.webp_extended,
    "webp-lossy-header": imagefiles.webp_vp8_header,
}

SIZES = [(1, 1), (3, 2), (17, 9), (200, 100), (100, 200), (1024, 768)]

# -- dimensions --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BUILDERS)
@pytest.mark.parametrize(("width", "height"), SIZES)
def test_dimensions_of_each_format(kind: str, width: int, height: int) -> None:
    assert image_dimensions(BUILDERS[kind](width, height)) == (width, height)


@pytest.mark.parametrize(
    ("kind", "width", "height"),
    [
        ("png", 100000, 3),
        ("png", 2, 70000),
        ("jpeg", 65535, 8),
        ("jpeg", 8, 65535),
        ("webp-lossless", 16384, 16384),
        ("webp-extended", 16777216, 1),
        ("webp-lossy-header", 16383, 16383),
    ],
)
def test_large_dimensions(kind: str, width: int, height: int) -> None:
    assert image_dimensions(BUILDERS[kind](width, height)) == (width, height)


def test_real_lossy_webp() -> None:
    assert image_dimensions(imagefiles.WEBP_LOSSY_300x200) == (300, 200)


def test_gif87a_header() -> None:
    data = b"GIF87a" + imagefiles.gif(40, 30)[6:]
    assert image_dimensions(data) == (40, 30)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x89PNG\r\n\x1a\n",
        b"not an image at all, just some text",
        b"\xff\xd8",  # SOI alone
        b"\xff\xd8\xff\xd9",  # SOI, EOI
        b"\xff\xd8\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00",  # scan before any frame
        b"\xff\xd8\x00\x00\x00\x00",  # no marker after SOI
        b"\xff\xd8\xff\xe0\x00\x01",  # segment length below 2
        b"GIF89a\x01",
        b"RIFF\x00\x00\x00\x00WEBPVP8 ",
        b"RIFF\x20\x00\x00\x00WEBPABCD" + bytes(20),  # unknown chunk
        b"BM" + bytes(60),  # BMP: not supported
    ],
)
def test_unreadable_headers(data: bytes) -> None:
    assert image_dimensions(data) is None


def test_png_with_wrong_first_chunk() -> None:
    data = bytearray(imagefiles.png(10, 10))
    data[12:16] = b"IDAT"
    assert image_dimensions(bytes(data)) is None


@pytest.mark.parametrize("kind", ["png", "gif", "webp-lossy-header"])
def test_zero_dimensions_are_unreadable(kind: str) -> None:
    assert image_dimensions(BUILDERS[kind](0, 5)) is None
    assert image_dimensions(BUILDERS[kind](5, 0)) is None


def test_vp8_without_start_code() -> None:
    data = bytearray(imagefiles.webp_vp8_header(10, 10))
    data[23] = 0
    assert image_dimensions(bytes(data)) is None


def test_vp8l_without_signature() -> None:
    data = bytearray(imagefiles.webp_lossless(10, 10))
    data[20] = 0
    assert image_dimensions(bytes(data)) is None


@pytest.mark.parametrize("kind", BUILDERS)
def test_every_prefix_is_safe(kind: str) -> None:
    """A truncated upload gives the right size or None, never an exception."""
    data = BUILDERS[kind](300, 200)
    for end in range(min(len(data), 400)):
        assert image_dimensions(data[:end]) in (None, (300, 200))


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.sampled_from([b"", b"\x89PNG\r\n\x1a\n", b"\xff\xd8", b"GIF89a", b"RIFF"]),
    body=st.binary(max_size=80),
)
def test_arbitrary_bytes_never_raise(prefix: bytes, body: bytes) -> None:
    size = image_dimensions(prefix + body)
    assert size is None or (size[0] > 0 and size[1] > 0)


# -- rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("width", "height", "tokens"),
    [
        (1024, 1024, 765),  # OpenAI's example: 768 x 768, 4 tiles
        (2048, 4096, 1105),  # OpenAI's example: 768 x 1536, 6 tiles
        (4096, 8192, 1105),  # fit in 2048 first: same as above
        (512, 512, 255),
        (100, 100, 255),  # never scaled up
        (513, 100, 425),
        (1920, 1080, 1105),  # 1365 x 768: 3 x 2 tiles
        (768, 768, 765),
        (10000, 10, 765),  # 2048 x 2: 4 x 1 tiles
    ],
)
def test_openai_high_detail(width: int, height: int, tokens: int) -> None:
    assert openai_tokens(width, height) == tokens
    assert openai_tokens(height, width) == tokens
    assert image_tokens_for_size("openai", width, height) == tokens


@pytest.mark.parametrize(
    ("width", "height", "tokens"),
    [
        (200, 200, 54),  # Anthropic's table: ~54
        (1000, 1000, 1334),  # Anthropic's table: ~1334
        (1092, 1092, 1590),  # Anthropic's table: ~1590, the 1:1 maximum
        (784, 1568, 1640),  # the 1:2 maximum, not resized
        (4000, 1000, 820),  # long edge to 1568: 1568 x 392
        (3000, 3000, 1640),  # area budget: 1109 x 1109
        (1, 1, 1),
    ],
)
def test_anthropic(width: int, height: int, tokens: int) -> None:
    assert anthropic_tokens(width, height) == tokens
    assert anthropic_tokens(height, width) == tokens


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 20000), st.integers(1, 20000))
def test_anthropic_is_bounded_and_monotone_in_area(width: int, height: int) -> None:
    tokens = anthropic_tokens(width, height)
    assert 1 <= tokens <= ANTHROPIC_MAX_PIXELS // 750 + 5
    if max(width, height) <= ANTHROPIC_MAX_EDGE and width * height <= ANTHROPIC_MAX_PIXELS:
        assert tokens == -(-width * height // 750)


@pytest.mark.parametrize(
    ("width", "height", "tokens"),
    [
        (100, 100, 258),
        (384, 384, 258),
        (385, 100, 258),  # one 768 tile
        (768, 768, 258),
        (769, 768, 516),
        (1920, 1080, 1548),  # 3 x 2 tiles
        (3000, 3000, 258 * 16),
    ],
)
def test_gemini(width: int, height: int, tokens: int) -> None:
    assert gemini_tokens(width, height) == tokens
    assert gemini_tokens(height, width) == tokens


def test_image_tokens_reads_real_files() -> None:
    assert image_tokens("openai", imagefiles.png(1024, 1024)) == 765
    assert image_tokens("openai", imagefiles.jpeg(2048, 4096)) == 1105
    assert image_tokens("anthropic", imagefiles.gif(200, 200)) == 54
    assert image_tokens("anthropic", imagefiles.webp_lossless(1000, 1000)) == 1334
    assert image_tokens("gemini", imagefiles.webp_extended(1920, 1080)) == 1548
    assert image_tokens("gemini", imagefiles.WEBP_LOSSY_300x200) == 258
    assert image_tokens("openai", imagefiles.WEBP_LOSSY_300x200) == 255


@pytest.mark.parametrize("rule", ["openai", "anthropic", "gemini", "default"])
@pytest.mark.parametrize("data", [b"", b"garbage", b"\x89PNG\r\n\x1a\n\x00"])
def test_unreadable_image_costs_the_default(rule: str, data: bytes) -> None:
    assert image_tokens(rule, data) == DEFAULT_IMAGE_TOKENS == 1200


def test_flat_rules_ignore_the_image() -> None:
    for data in (b"", imagefiles.png(4000, 4000), imagefiles.png(1, 1)):
        assert image_tokens("default", data) == 1200
        assert image_tokens("openai-low", data) == 85
    assert image_tokens_for_size("openai-low", 0, 0) == 85
    assert image_tokens_for_size("openai", 0, 10) == DEFAULT_IMAGE_TOKENS


def test_unknown_rule() -> None:
    with pytest.raises(ValueError, match="unknown image rule 'bogus'") as info:
        image_tokens("bogus", imagefiles.png(1, 1))
    for rule in IMAGE_RULES:
        assert rule in str(info.value)
    with pytest.raises(ValueError, match="unknown image rule"):
        image_tokens_for_size("", 10, 10)


def test_rule_names() -> None:
    assert set(IMAGE_RULES) == {"default", "openai", "openai-low", "anthropic", "gemini"}
