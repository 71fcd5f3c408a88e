"""Exact token counts with a Hugging Face ``tokenizer.json``, fully offline.

A spec ``hf:<path>`` names either a ``tokenizer.json`` file or a directory
holding one. The file is read with ``tokenizers.Tokenizer.from_file``; nothing
here ever calls ``from_pretrained`` or any other Hub API, so no network
access can happen, whatever the path.
"""

from __future__ import annotations

import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ctxwarden.tokenizers._exact import ExactTokenizer

if TYPE_CHECKING:
    # Imported on the first hf: spec: a server that never loads one is ~4 MiB smaller.
    import tokenizers

HF_PREFIX: Final = "hf:"
TOKENIZER_FILE: Final = "tokenizer.json"

MAX_FILE_BYTES: Final = 256 * 1024 * 1024
"""Largest tokenizer.json accepted. Real ones are 2-35 MB; the limit keeps a
spec such as ``hf:/some/huge/file`` from being read into memory whole."""


def resolve_hf_path(spec: str) -> Path:
    """The tokenizer.json file that an ``hf:`` spec names.

    Raises ValueError, naming the spec, when the path is empty, missing, not a
    regular file, or larger than MAX_FILE_BYTES.
    """
    if not spec.startswith(HF_PREFIX):
        raise ValueError(f"not an hf tokenizer spec: {spec!r} (expected 'hf:<path>')")
    raw = spec.removeprefix(HF_PREFIX).strip()
    if not raw:
        raise ValueError(
            f"hf tokenizer spec {spec!r} has no path; "
            f"use hf:/path/to/{TOKENIZER_FILE} or hf:/path/to/dir"
        )
    path = Path(raw).expanduser()
    if path.is_dir():
        path = path / TOKENIZER_FILE
    try:
        st = path.stat()
    except OSError as exc:
        raise ValueError(
            f"hf tokenizer spec {spec!r}: cannot read {path}: {exc.strerror or exc}"
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"hf tokenizer spec {spec!r}: {path} is not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise ValueError(
            f"hf tokenizer spec {spec!r}: {path} is {st.st_size} bytes, "
            f"over the {MAX_FILE_BYTES} byte limit for a {TOKENIZER_FILE}"
        )
    return path


_FileKey = tuple[str, int, int]
_files: dict[_FileKey, tokenizers.Tokenizer] = {}
_files_lock = threading.Lock()


def _file_key(path: Path) -> _FileKey:
    st = path.stat()
    return (str(path.resolve()), st.st_mtime_ns, st.st_size)


def _utf8_safe(text: str) -> str:
    """Replace lone surrogates, which the Rust tokenizer cannot accept, by U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class HFTokenizer(ExactTokenizer):
    """Exact counts from a ``tokenizers`` pipeline; satisfies core.tokens.Tokenizer."""

    __slots__ = ("_path", "_tokenizer")

    def __init__(self, spec: str, path: Path, tokenizer: tokenizers.Tokenizer) -> None:
        super().__init__(spec)
        self._path = path
        self._tokenizer = tokenizer

    @property
    def path(self) -> Path:
        """The tokenizer.json that was loaded."""
        return self._path

    @property
    def tokenizer(self) -> tokenizers.Tokenizer:
        return self._tokenizer

    def count(self, text: str) -> int:
        """Count tokens without BOS/EOS or any other template tokens.

        Uses encode_batch_fast on a one-item batch: unlike encode(), it skips
        character offsets (about 1.5x faster) and releases the GIL while it
        runs, so a large message does not stall every other thread.
        """
        if not text:
            return 0
        try:
            encodings = self._tokenizer.encode_batch_fast([text], add_special_tokens=False)
        except TypeError:
            encodings = self._tokenizer.encode_batch_fast(
                [_utf8_safe(text)], add_special_tokens=False
            )
        return len(encodings[0].ids)

    def __repr__(self) -> str:
        return f"HFTokenizer({self._spec!r})"


def _read(spec: str, path: Path) -> tokenizers.Tokenizer:
    import tokenizers

    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # the binding raises bare Exception for every failure
        raise ValueError(
            f"hf tokenizer spec {spec!r}: {path} is not a valid Hugging Face "
            f"{TOKENIZER_FILE}: {exc}"
        ) from None
    # Text that looks like a special token (``<|im_end|>``) is user content:
    # count it as ordinary text, as TiktokenTokenizer does with encode_ordinary.
    tokenizer.encode_special_tokens = True
    return tokenizer


def load_hf_tokenizer(spec: str) -> HFTokenizer:
    """An HFTokenizer for ``spec``; use ctxwarden.tokenizers.load_tokenizer in the service.

    Specs that name the same file (``hf:/m`` and ``hf:/m/tokenizer.json``)
    share one parsed tokenizer, which can take a few hundred MB, as long as the
    file's mtime and size are unchanged. Raises ValueError with the spec and
    path when the file is missing or is not a valid Hugging Face
    ``tokenizer.json``.
    """
    path = resolve_hf_path(spec)
    try:
        key = _file_key(path)
    except OSError as exc:
        raise ValueError(f"hf tokenizer spec {spec!r}: cannot read {path}: {exc}") from None
    with _files_lock:
        tokenizer = _files.get(key)
        if tokenizer is None:
            tokenizer = _read(spec, path)
            for stale in [k for k in _files if k[0] == key[0]]:
                del _files[stale]  # an older version of the same file
            _files[key] = tokenizer
    return HFTokenizer(spec, path, tokenizer)
