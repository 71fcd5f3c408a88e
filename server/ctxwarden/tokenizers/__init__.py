"""Tokenizer selection by spec string.

Building a BPE encoding parses a few MB of ranks (about a second), so each
spec is built once per process and shared; tokenizers are stateless and
tiktoken's encoder is safe to call from many threads.
"""

from __future__ import annotations

import threading
from typing import Final

from ctxwarden.core.tokens import HeuristicTokenizer, Tokenizer
from ctxwarden.tokenizers._tiktoken import (
    ENCODINGS,
    TiktokenTokenizer,
    TokenizerDataError,
    load_tiktoken_tokenizer,
    verify_sha256,
)

__all__ = [
    "SUPPORTED_SPECS",
    "TiktokenTokenizer",
    "TokenizerDataError",
    "load_tokenizer",
    "verify_sha256",
]

HEURISTIC_SPEC: Final = "heuristic"
_TIKTOKEN_PREFIX: Final = "tiktoken:"

SUPPORTED_SPECS: Final[tuple[str, ...]] = (
    HEURISTIC_SPEC,
    *(f"{_TIKTOKEN_PREFIX}{name}" for name in sorted(ENCODINGS)),
)

_cache: dict[str, Tokenizer] = {}
_lock = threading.Lock()


def _build(spec: str) -> Tokenizer:
    if spec == HEURISTIC_SPEC:
        return HeuristicTokenizer()
    return load_tiktoken_tokenizer(spec.removeprefix(_TIKTOKEN_PREFIX))


def load_tokenizer(spec: str) -> Tokenizer:
    """The shared tokenizer for ``spec``, built on first use.

    Raises ValueError for an unknown spec and TokenizerDataError when the
    encoding data is missing or fails its sha256 check.
    """
    tokenizer = _cache.get(spec)
    if tokenizer is not None:
        return tokenizer
    if spec not in SUPPORTED_SPECS:
        raise ValueError(
            f"unknown tokenizer spec {spec!r}; supported: {', '.join(SUPPORTED_SPECS)}"
        )
    with _lock:
        tokenizer = _cache.get(spec)
        if tokenizer is None:
            tokenizer = _build(spec)
            _cache[spec] = tokenizer
    return tokenizer
