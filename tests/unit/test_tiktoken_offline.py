"""Offline tiktoken tokenizers: exact counts, sha256 checks, no network."""

from __future__ import annotations

import gzip
import importlib
import importlib.util
import pickle
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest
import tiktoken.load

from ctxwarden.core.tokens import HeuristicTokenizer, Tokenizer
from ctxwarden.tokenizers import SUPPORTED_SPECS, load_tokenizer
from ctxwarden.tokenizers._tiktoken import (
    ENCODINGS,
    TokenizerDataError,
    default_data_path,
    load_encoding,
    load_tiktoken_tokenizer,
    read_rank_file,
    verify_sha256,
)

O200K = "tiktoken:o200k_base"
CL100K = "tiktoken:cl100k_base"

# Ids and counts as produced by tiktoken's own get_encoding() for these inputs.
KNOWN_IDS: dict[str, dict[str, list[int]]] = {
    O200K: {
        "hello world": [24912, 2375],
        "Hello, world!": [13225, 11, 2375, 0],
    },
    CL100K: {
        "hello world": [15339, 1917],
        "Hello, world!": [9906, 11, 1917, 0],
    },
}

KNOWN_COUNTS: dict[str, dict[str, int]] = {
    O200K: {
        "": 0,
        "def add(a, b):\n    return a + b\n": 12,
        "The quick brown fox jumps over the lazy dog.": 10,
        "こんにちは世界": 2,
    },
    CL100K: {
        "": 0,
        "def add(a, b):\n    return a + b\n": 12,
        "The quick brown fox jumps over the lazy dog.": 10,
        "こんにちは世界": 4,
    },
}


def _openai_public() -> ModuleType:
    """tiktoken_ext ships no type information, so it is reached untyped."""
    return importlib.import_module("tiktoken_ext.openai_public")


@pytest.mark.parametrize("spec", [O200K, CL100K])
def test_known_ids_and_counts(spec: str) -> None:
    tok = load_tiktoken_tokenizer(spec.removeprefix("tiktoken:"))
    for text, ids in KNOWN_IDS[spec].items():
        assert tok.encoding.encode_ordinary(text) == ids
        assert tok.count(text) == len(ids)
    for text, count in KNOWN_COUNTS[spec].items():
        assert tok.count(text) == count, text


@pytest.mark.parametrize("spec", [O200K, CL100K])
def test_special_token_text_is_counted_not_rejected(spec: str) -> None:
    tok = load_tokenizer(spec)
    assert tok.count("<|endoftext|>") == 7
    assert tok.count("a<|endoftext|>b<|endofprompt|>") > 7
    assert tok.count("\ud800 lone surrogate") > 0


@pytest.mark.parametrize("spec", [O200K, CL100K])
def test_tokenizer_protocol(spec: str) -> None:
    tok: Tokenizer = load_tokenizer(spec)
    assert tok.spec == spec
    assert tok.exact is True


def test_heuristic_spec() -> None:
    tok = load_tokenizer("heuristic")
    assert isinstance(tok, HeuristicTokenizer)
    assert tok.spec == "heuristic"
    assert tok.exact is False


def test_unknown_spec_lists_supported() -> None:
    for bad in ("tiktoken:p50k_base", "tiktoken:", "o200k_base", "", "HEURISTIC"):
        with pytest.raises(ValueError, match="unknown tokenizer spec") as info:
            load_tokenizer(bad)
        for spec in SUPPORTED_SPECS:
            assert spec in str(info.value)
    assert set(SUPPORTED_SPECS) == {"heuristic", O200K, CL100K}


def test_same_spec_returns_same_object_across_threads() -> None:
    results: list[Tokenizer] = []
    lock = threading.Lock()

    def worker() -> None:
        tok = load_tokenizer(CL100K)
        with lock:
            results.append(tok)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8
    assert all(tok is results[0] for tok in results)
    assert load_tokenizer(CL100K) is results[0]
    assert load_tokenizer("heuristic") is load_tokenizer("heuristic")


def test_verify_sha256() -> None:
    good = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"  # "hello"
    verify_sha256(b"hello", good)
    verify_sha256(b"hello", good.upper())
    with pytest.raises(TokenizerDataError, match="sha256 mismatch"):
        verify_sha256(b"hellO", good)


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_packaged_data_matches_published_hash(name: str) -> None:
    data = read_rank_file(default_data_path(name))
    verify_sha256(data, ENCODINGS[name].sha256)


def test_corrupted_data_is_rejected(tmp_path: Path) -> None:
    data = bytearray(read_rank_file(default_data_path("cl100k_base")))
    # Swap one base64 character in the first line: still parseable, wrong ranks.
    data[0] = ord("B") if data[0] != ord("B") else ord("C")
    plain = tmp_path / "cl100k_base.tiktoken"
    plain.write_bytes(bytes(data))
    with pytest.raises(TokenizerDataError, match="sha256 mismatch"):
        load_encoding("cl100k_base", data_path=plain)

    zipped = tmp_path / "cl100k_base.tiktoken.gz"
    zipped.write_bytes(gzip.compress(bytes(data)))
    with pytest.raises(TokenizerDataError, match="sha256 mismatch"):
        load_encoding("cl100k_base", data_path=zipped)


def test_truncated_or_missing_data_is_rejected(tmp_path: Path) -> None:
    gz = default_data_path("cl100k_base").read_bytes()
    truncated = tmp_path / "truncated.tiktoken.gz"
    truncated.write_bytes(gz[: len(gz) // 2])
    with pytest.raises(TokenizerDataError):
        load_encoding("cl100k_base", data_path=truncated)
    with pytest.raises(TokenizerDataError):
        load_encoding("cl100k_base", data_path=tmp_path / "absent.tiktoken")
    # Right bytes, wrong encoding name: the hash check catches the mix-up.
    with pytest.raises(TokenizerDataError, match="sha256 mismatch"):
        load_encoding("o200k_base", data_path=default_data_path("cl100k_base"))


def test_uncompressed_data_path_is_accepted(tmp_path: Path) -> None:
    plain = tmp_path / "cl100k_base.tiktoken"
    plain.write_bytes(read_rank_file(default_data_path("cl100k_base")))
    enc = load_encoding("cl100k_base", data_path=plain)
    assert enc.encode_ordinary("hello world") == [15339, 1917]


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_hashes_match_installed_tiktoken_source(name: str) -> None:
    """The hard-coded hashes are tiktoken's own expected_hash values."""
    spec = importlib.util.find_spec("tiktoken_ext.openai_public")
    assert spec is not None
    assert spec.origin is not None
    source = Path(spec.origin).read_text(encoding="utf-8")
    match = re.search(
        rf"encodings/{name}\.tiktoken\",\s*expected_hash=\"([0-9a-f]{{64}})\"", source
    )
    assert match is not None, f"{name} not found in tiktoken's openai_public.py"
    assert ENCODINGS[name].sha256 == match.group(1)


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_constants_match_installed_tiktoken(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """pat_str and special tokens equal tiktoken's, read without its download path."""
    public = _openai_public()
    sentinel: dict[bytes, int] = {}

    def no_download(*_args: object, **_kwargs: object) -> dict[bytes, int]:
        return sentinel

    monkeypatch.setattr(public, "load_tiktoken_bpe", no_download)
    reference = public.ENCODING_CONSTRUCTORS[name]()
    ours = ENCODINGS[name]
    assert reference["mergeable_ranks"] is sentinel
    assert reference["pat_str"] == ours.pat_str
    assert reference["special_tokens"] == dict(ours.special_tokens)
    assert reference.get("explicit_n_vocab") is None


def test_loads_and_counts_with_network_disabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache_dir = tmp_path / "tiktoken-cache"
    cache_dir.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache_dir))
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)

    def no_network(*_args: object, **_kwargs: object) -> NoReturn:
        raise OSError("network disabled in test")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket.socket, "connect_ex", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    # tiktoken's own fetch path must not be reached either.
    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_network)

    with pytest.raises(OSError, match="network disabled"):
        socket.create_connection(("127.0.0.1", 9))

    for name in sorted(ENCODINGS):
        tok = load_tiktoken_tokenizer(name)
        assert tok.count("hello world") == 2
        assert tok.count("x = 1  # <|endoftext|>\n") > 0
    assert list(cache_dir.iterdir()) == []


def test_an_encoding_keeps_no_python_copy_of_its_ranks_and_still_pickles() -> None:
    """tiktoken keeps its ranks as a Python dict only to pickle an encoding; ours
    drops it (the Rust core has its own) and pickles as the call that loads it."""
    encoding = load_encoding("o200k_base")
    assert encoding._mergeable_ranks == {}
    text = "The quick brown fox jumps over the lazy dog. こんにちは世界"
    again = pickle.loads(pickle.dumps(encoding))
    assert again is not encoding
    assert again.encode_ordinary(text) == encoding.encode_ordinary(text)
    assert again.n_vocab == encoding.n_vocab
    assert encoding.decode(encoding.encode_ordinary(text)) == text


_LOAD_O200K = """
from ctxwarden.tokenizers import load_tokenizer

def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024

before = rss()
load_tokenizer("tiktoken:o200k_base").count("warm")
print(rss() - before)
"""


def test_loading_o200k_costs_what_the_rust_core_holds() -> None:
    """~46 MiB (it was ~73 MiB with tiktoken's Python dict of the ranks kept)."""
    out = subprocess.run(
        [sys.executable, "-c", _LOAD_O200K], capture_output=True, text=True, check=True
    )
    assert int(out.stdout) < 58 * 2**20, int(out.stdout) / 2**20
