"""What the exact tokenizers share: a spec, and counts that are exact."""

from __future__ import annotations


class ExactTokenizer:
    """The ``spec`` and ``exact`` of core.tokens.Tokenizer for a real tokenizer;
    a subclass adds ``count``."""

    __slots__ = ("_spec",)

    def __init__(self, spec: str) -> None:
        self._spec = spec

    @property
    def spec(self) -> str:
        return self._spec

    @property
    def exact(self) -> bool:
        return True
