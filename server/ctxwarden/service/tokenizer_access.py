"""Which tokenizers a client may name, and loading them off the event loop."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.tokens import Tokenizer
from ctxwarden.core.validation import check_no_nul
from ctxwarden.tokenizers import cached_tokenizer, load_tokenizer


def check_client_tokenizer(
    spec: str, allowed_dirs: Sequence[str], field: str = "policy.tokenizer"
) -> None:
    """A client may name an ``hf:`` tokenizer only inside an operator-allowed directory
    (otherwise a client could make the server open arbitrary paths)."""
    if not spec.startswith("hf:"):
        return
    check_no_nul(spec, field)  # os.path.realpath raises ValueError on NUL
    path = os.path.realpath(spec[3:])
    for base in allowed_dirs:
        root = os.path.realpath(base)
        if path == root or path.startswith(root + os.sep):
            return
    raise InvalidArgument(
        "hf: tokenizers must live under a directory the operator allowed with "
        "--hf-tokenizer-dir (or be configured in the model table)",
        reason=ErrorReason.TOKENIZER_NOT_ALLOWED,
        field=field,
    )


async def tokenizer_for(spec: str) -> Tokenizer:
    cached = cached_tokenizer(spec)
    if cached is not None:
        return cached  # no thread hop for the common case
    try:
        return await asyncio.to_thread(load_tokenizer, spec)
    except ValueError as exc:
        raise InvalidArgument(
            str(exc), reason=ErrorReason.UNKNOWN_TOKENIZER, field="policy.tokenizer"
        ) from None
