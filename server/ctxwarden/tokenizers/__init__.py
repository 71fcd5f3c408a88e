"""Tokenizer selection by spec string.

Building a BPE encoding parses a few MB of ranks (about a second), so each
spec is built once per process and shared; tokenizers are stateless and
tiktoken's encoder is safe to call from many threads.

Specs: ``heuristic``, ``tiktoken:<encoding>`` (see SUPPORTED_SPECS), and
``hf:<path>`` for a local Hugging Face ``tokenizer.json`` (or a directory
holding one), which is never fetched from the network.
"""

from __future__ import annotations

import threading
from typing import Final

from ctxwarden.core.tokens import HeuristicTokenizer, Tokenizer
from ctxwarden.tokenizers._hf import HF_PREFIX, HFTokenizer, load_hf_tokenizer, resolve_hf_path
from ctxwarden.tokenizers._tiktoken import (
    ENCODINGS,
    TiktokenTokenizer,
    TokenizerDataError,
    load_tiktoken_tokenizer,
    verify_sha256,
)

__all__ = [
    "HF_PREFIX",
    "SUPPORTED_SPECS",
    "HFTokenizer",
    "TiktokenTokenizer",
    "TokenizerDataError",
    "is_tokenizer_spec",
    "load_tokenizer",
    "resolve_hf_path",
    "verify_sha256",
]

HEURISTIC_SPEC: Final = "heuristic"
_TIKTOKEN_PREFIX: Final = "tiktoken:"

SUPPORTED_SPECS: Final[tuple[str, ...]] = (
    HEURISTIC_SPEC,
    *(f"{_TIKTOKEN_PREFIX}{name}" for name in sorted(ENCODINGS)),
)
"""The fixed specs; ``hf:<path>`` specs are accepted besides these."""

_cache: dict[str, Tokenizer] = {}
_lock = threading.Lock()


def is_tokenizer_spec(spec: str) -> bool:
    """Whether ``spec`` is well-formed: a fixed spec or ``hf:`` with a path.

    Only the syntax is checked; an ``hf:`` file is not looked at.
    """
    if spec in SUPPORTED_SPECS:
        return True
    return spec.startswith(HF_PREFIX) and bool(spec.removeprefix(HF_PREFIX).strip())


def _build(spec: str) -> Tokenizer:
    if spec == HEURISTIC_SPEC:
        return HeuristicTokenizer()
    if spec.startswith(HF_PREFIX):
        return load_hf_tokenizer(spec)
    return load_tiktoken_tokenizer(spec.removeprefix(_TIKTOKEN_PREFIX))


def cached_tokenizer(spec: str) -> Tokenizer | None:
    """The tokenizer for ``spec`` if it was already built (no I/O)."""
    return _cache.get(spec)


def load_tokenizer(spec: str) -> Tokenizer:
    """The shared tokenizer for ``spec``, built on first use.

    Raises ValueError for an unknown spec or an ``hf:`` path that is missing
    or not a valid tokenizer.json (a failed load is not cached, so a fixed
    file is picked up on the next call), and TokenizerDataError when tiktoken
    encoding data is missing or fails its sha256 check.
    """
    tokenizer = _cache.get(spec)
    if tokenizer is not None:
        return tokenizer
    if spec not in SUPPORTED_SPECS and not spec.startswith(HF_PREFIX):
        raise ValueError(
            f"unknown tokenizer spec {spec!r}; supported: {', '.join(SUPPORTED_SPECS)}, "
            f"or {HF_PREFIX}<path to tokenizer.json or its directory>"
        )
    with _lock:
        tokenizer = _cache.get(spec)
        if tokenizer is None:
            tokenizer = _build(spec)
            _cache[spec] = tokenizer
    return tokenizer
