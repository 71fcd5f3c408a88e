"""What Client and AsyncClient hold alike: call settings and the model input cache."""

from __future__ import annotations

from collections.abc import Iterable

from ._defaults import normalize_metadata, or_default
from ._input_cache import InputCache
from ._retry import RetryPolicy


class ClientBase:
    """Per-call settings shared by the blocking and the asyncio client."""

    def __init__(
        self, timeout: float | None, metadata: Iterable[tuple[str, str]], retries: int
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self._timeout = timeout
        self._metadata = normalize_metadata(metadata)
        self._retry = RetryPolicy(retries)
        self._inputs = InputCache()
        self._closed = False

    def _deadline(self, timeout: float | None) -> float | None:
        return or_default(timeout, self._timeout)

    def _cache_for(self, incremental: bool) -> InputCache | None:
        """The input cache when a BuildModelInput call is ``incremental``."""
        return self._inputs if incremental else None
