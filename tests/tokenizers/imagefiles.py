"""Small, valid image files built byte by byte, for tests without an imaging library.

Every builder makes a complete file that a real decoder accepts (checked once
against Pillow while writing these), except ``webp_vp8_header`` and
``webp_vp8x_header``, which are headers only, as noted there.
"""

from __future__ import annotations

import struct
import zlib


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width: int, height: int) -> bytes:
    """A black 1-bit greyscale PNG."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    row = b"\x00" + bytes((width + 7) // 8)  # filter type 0, then packed pixels
    idat = zlib.compress(row * height, 9)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", idat)
        + _png_chunk(b"IEND", b"")
    )


def _segment(marker: int, body: bytes) -> bytes:
    return bytes((0xFF, marker)) + struct.pack(">H", len(body) + 2) + body


def _scan(bits: int) -> bytes:
    data = bytearray(bits // 8)  # all-zero codes
    if bits % 8:
        data.append(0xFF >> (bits % 8))  # pad the last byte with 1 bits
    return bytes(data)


def jpeg(width: int, height: int, *, progressive: bool = False) -> bytes:
    """A flat grey greyscale JPEG, baseline (SOF0) or progressive (SOF2).

    Both Huffman tables hold the single code ``0`` for symbol 0, so each 8x8
    block costs one bit per code: DC difference 0, then end-of-block. The
    progressive file has a DC scan and an AC scan. An APP0, an APP1 and fill
    bytes come before the frame header, as in camera files.
    """
    blocks = -(-width // 8) * -(-height // 8)
    dht = bytes((1,) + (0,) * 15) + b"\x00"  # one code of length 1: symbol 0
    if progressive:
        scans = (
            _segment(0xDA, b"\x01\x01\x00\x00\x00\x00")  # DC: Ss=0, Se=0
            + _scan(blocks)
            + _segment(0xDA, b"\x01\x01\x00\x01\x3f\x00")  # AC: Ss=1, Se=63
            + _scan(blocks)
        )
    else:
        scans = _segment(0xDA, b"\x01\x01\x00\x00\x3f\x00") + _scan(2 * blocks)
    sof = 0xC2 if progressive else 0xC0
    return b"".join(
        (
            b"\xff\xd8",
            _segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"),
            _segment(0xE1, b"Exif\x00\x00" + bytes(40)),
            _segment(0xDB, b"\x00" + bytes([1]) * 64),
            b"\xff\xff",  # fill bytes are allowed before any marker
            _segment(sof, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00"),
            _segment(0xC4, b"\x00" + dht),
            _segment(0xC4, b"\x10" + dht),
            scans,
            b"\xff\xd9",
        )
    )


class _Bits:
    """Writes values least significant bit first, as GIF's LZW and WebP's VP8L do."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.acc = 0
        self.pending = 0

    def put(self, value: int, n: int) -> None:
        self.acc |= value << self.pending
        self.pending += n
        while self.pending >= 8:
            self.data.append(self.acc & 0xFF)
            self.acc >>= 8
            self.pending -= 8

    def to_bytes(self) -> bytes:
        tail = bytes((self.acc,)) if self.pending else b""
        return bytes(self.data) + tail


def gif(width: int, height: int) -> bytes:
    """A GIF89a of colour 0, LZW-coded with a clear code every two pixels.

    With minimum code size 2, clearing that often keeps every code 3 bits
    wide, so no dictionary has to be built here.
    """
    clear, end = 4, 5
    bits = _Bits()
    for i in range(width * height):
        if i % 2 == 0:
            bits.put(clear, 3)
        bits.put(0, 3)
    bits.put(end, 3)
    data = bits.to_bytes()
    blocks = b"".join(
        bytes((len(data[i : i + 255]),)) + data[i : i + 255] for i in range(0, len(data), 255)
    )
    return b"".join(
        (
            b"GIF89a",
            struct.pack("<HHBBB", width, height, 0x80, 0, 0),  # 2-colour global table
            b"\x00\x00\x00\xff\xff\xff",
            b"\x2c" + struct.pack("<HHHHB", 0, 0, width, height, 0),
            b"\x02",  # LZW minimum code size
            blocks,
            b"\x00",  # end of image data
            b"\x3b",  # trailer
        )
    )


def _riff(chunks: bytes) -> bytes:
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WEBP" + chunks


def _webp_chunk(kind: bytes, body: bytes) -> bytes:
    pad = b"\x00" if len(body) % 2 else b""
    return kind + struct.pack("<I", len(body)) + body + pad


def _vp8l_body(width: int, height: int) -> bytes:
    """A lossless bitstream whose five prefix codes each hold one symbol.

    A one-symbol code takes zero bits, so every pixel (opaque black) costs
    nothing and any size fits in a few bytes.
    """
    bits = _Bits()
    bits.put(width - 1, 14)
    bits.put(height - 1, 14)
    bits.put(0, 1)  # alpha_is_used
    bits.put(0, 3)  # version
    bits.put(0, 1)  # no transform
    bits.put(0, 1)  # no colour cache
    bits.put(0, 1)  # no meta prefix codes
    for symbol in (0, 0, 0, 255, 0):  # green, red, blue, alpha, distance
        bits.put(1, 1)  # simple code
        bits.put(0, 1)  # one symbol
        bits.put(1, 1)  # 8-bit symbol
        bits.put(symbol, 8)
    return b"\x2f" + bits.to_bytes()


def webp_lossless(width: int, height: int) -> bytes:
    """A simple-format lossless WebP (``VP8L`` chunk)."""
    return _riff(_webp_chunk(b"VP8L", _vp8l_body(width, height)))


def webp_extended(width: int, height: int) -> bytes:
    """An extended-format WebP: a ``VP8X`` canvas header, then a ``VP8L`` image."""
    vp8x = b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little")
    vp8x += (height - 1).to_bytes(3, "little")
    return _riff(_webp_chunk(b"VP8X", vp8x) + _webp_chunk(b"VP8L", _vp8l_body(width, height)))


def webp_vp8_header(width: int, height: int) -> bytes:
    """The first 30 bytes of a lossy WebP: RIFF header, ``VP8 `` chunk header, key
    frame tag, start code and dimensions. Header only: no frame data follows."""
    frame = b"\x10\x02\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", width, height)
    return b"RIFF" + struct.pack("<I", 100) + b"WEBP" + b"VP8 " + struct.pack("<I", 80) + frame


# A real lossy WebP: 300 x 200 of one colour, made once by libwebp (Pillow
# 13.0.0: Image.new("RGB", (300, 200), (200, 30, 30)).save(f, "WEBP",
# quality=10, method=0)) and kept as bytes, since VP8 is too involved to
# encode by hand.
WEBP_LOSSY_300x200 = bytes.fromhex(
    "524946460a0100005745425056503820fe000000b01a009d012a2c01c8003f71b8d965b4"
    "af2c27202802902e09696edff02f40bc01f80125ea12680837353bd1595fda95aad90750"
    "a6"
    + "9a69a6" * 55
    + "9a69a44000fedfeefa1a2f54fffa89ec23befac14dc5a4f594798659a684dceb1a842000"
)
