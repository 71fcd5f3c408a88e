"""The copy of a text a hot session keeps: compressed when that pays, the same
text and the same block whichever way it is held, from any thread."""

from __future__ import annotations

import subprocess
import sys
import threading

from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.core.content import PACK_MIN_CHARS, ContentBlock, ContentKind

PROSE = "The build failed because the cache key ignored the lockfile. " * 20


def _held(block: ContentBlock) -> object:
    return block._text


def test_a_long_compressible_text_is_held_compressed_and_reads_back() -> None:
    block = ContentBlock(ContentKind.TEXT, PROSE)
    packed = block.packed()
    assert isinstance(_held(packed), bytes)
    assert len(_held(packed)) < len(PROSE) // 4  # type: ignore[arg-type]
    assert packed.text == PROSE
    assert packed == block and hash(packed) == hash(block)


def test_a_short_text_is_held_as_it_is() -> None:
    short = ContentBlock(ContentKind.TEXT, "x" * (PACK_MIN_CHARS - 1))
    assert short.packed() is short
    assert isinstance(_held(ContentBlock(ContentKind.TEXT, "x" * PACK_MIN_CHARS).packed()), bytes)


@given(st.binary(min_size=PACK_MIN_CHARS, max_size=2000))
def test_a_text_is_held_compressed_only_when_that_saves_an_eighth(noise: bytes) -> None:
    text = noise.decode("latin-1")
    packed = ContentBlock(ContentKind.TEXT, text).packed()
    size = len(text.encode())
    held = _held(packed)
    assert held == text or len(held) <= size - size // 8  # type: ignore[arg-type]
    assert packed.text == text


def test_the_fields_of_a_full_block_survive_packing() -> None:
    block = ContentBlock(ContentKind.THINKING, PROSE, signature="sig", redacted=True)
    packed = block.packed()
    assert isinstance(_held(packed), bytes)
    assert (packed.text, packed.signature, packed.redacted) == (PROSE, "sig", True)
    assert packed == block


@given(st.text(min_size=PACK_MIN_CHARS, max_size=3000))
def test_any_text_reads_back_unchanged(text: str) -> None:
    block = ContentBlock(ContentKind.TEXT, text)
    assert block.packed().text == text
    assert block.packed() == block


def test_lone_surrogates_survive_packing() -> None:
    text = "\ud800 half a pair " * 40
    assert ContentBlock(ContentKind.TEXT, text).packed().text == text


def test_threads_pack_and_read_at_once() -> None:
    """Each thread has its own coder: texts packed and read concurrently stay whole."""
    failures: list[str] = []
    start = threading.Barrier(6)

    def work(n: int) -> None:
        start.wait()
        for i in range(300):
            text = f"thread {n} text {i}: " + PROSE
            packed = ContentBlock(ContentKind.TEXT, text).packed()
            if packed.text != text:
                failures.append(f"{n}/{i}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


_KEEP_MANY = """
import sys
from ctxwarden.core.content import ContentBlock, ContentKind

def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024

texts = [f"{i} The build failed because the cache key ignored the lockfile {i * 7919}. " * 12
         for i in range(2000)]
kept, before = [], rss()
for i in range(20000):
    kept.append(ContentBlock(ContentKind.TEXT, texts[i % 2000]).packed())
held = sum(len(b._text) for b in kept) / len(kept)
print((rss() - before) / len(kept), held)
"""


def test_a_packed_text_takes_the_memory_of_its_size() -> None:
    """What a hot session holds per text is about its packed size, not the
    compressor's worst-case buffer (which was twice as much)."""
    out = subprocess.run(
        [sys.executable, "-c", _KEEP_MANY], capture_output=True, text=True, check=True
    )
    per_text, packed_size = map(float, out.stdout.split())
    assert packed_size < 400
    # The block object and the list slot add ~100 bytes; the worst-case buffer ~900.
    assert per_text < packed_size + 250, (per_text, packed_size)
