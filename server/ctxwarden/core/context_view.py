"""The view of a hot session's kept entries, kept from one model input to the next."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ctxwarden.core.tokens import CountingProfile
from ctxwarden.core.view import Entry, View, ViewBuilder, ViewEntry, build_view, make_stub


class ViewCache:
    """``build_view`` of a context's entries, resumed from where the last view
    stopped while the list only grew in place (any other change replaces the
    list); each stubbed tool result made once. A context makes a new one
    whenever what views are built with changes (settings, summary, checkpoint)."""

    __slots__ = ("_builder", "_keep_tool_results", "_profile", "_source", "_stubs", "_synthetic")

    def __init__(
        self, synthetic_tokens: int, keep_tool_results: int, profile: CountingProfile
    ) -> None:
        self._synthetic = synthetic_tokens
        self._keep_tool_results = keep_tool_results
        self._profile = profile
        self._builder: ViewBuilder | None = None
        self._source: list[Entry] | None = None
        """The list the builder was fed from."""
        self._stubs: dict[int, ViewEntry] = {}

    @property
    def incremental(self) -> bool:
        """False with ``keep_tool_results``: stubbing depends on the newest
        results, so any append can change old entries and every view is built anew."""
        return self._keep_tool_results <= 0

    def view(self, entries: list[Entry], base: Callable[[], int]) -> View:
        """The view of ``entries``; ``base()`` is the digest a new builder starts from."""
        if not self.incremental:
            return build_view(entries, self._synthetic, self._keep_tool_results, self._stub)
        builder = self._builder
        if builder is None or self._source is not entries:
            builder = self._start(entries, base())
        for entry in entries[builder.fed :]:
            builder.feed(entry)
        return builder.view()

    def build_steps(self, entries: list[Entry], base: int, step: int) -> Iterator[None]:
        """The view of ``entries`` built ahead, ``step`` entries per iteration."""
        builder = self._start(entries, base)
        for start in range(0, len(entries), step):
            for entry in entries[start : start + step]:
                builder.feed(entry)
            yield

    def behind(self, entries: list[Entry]) -> int:
        """Entries the next view of ``entries`` has to feed before it is up to date."""
        if not self.incremental:
            return 0  # built whole every time: nothing to build ahead
        if self._builder is None or self._source is not entries:
            return len(entries)
        return len(entries) - self._builder.fed

    def catch_up_steps(
        self, entries: list[Entry], base: Callable[[], int], step: int
    ) -> Iterator[None]:
        """The view of ``entries`` brought up to date ahead, ``step`` entries per
        iteration (what ``view`` would feed at once)."""
        if not self.incremental:
            return
        builder = self._builder
        if builder is None or self._source is not entries:
            builder = self._start(entries, base())
        while builder.fed < len(entries):
            for entry in entries[builder.fed : builder.fed + step]:
                builder.feed(entry)
            yield

    def resume(self, other: ViewCache, entries: list[Entry], base: int) -> None:
        """Go on from ``other``'s view, built up to date, for ``entries`` (a copy
        of its entries) under another base digest: a fork's."""
        assert other._builder is not None
        self._builder, self._source = other._builder.rebased(base), entries

    def _start(self, entries: list[Entry], base: int) -> ViewBuilder:
        builder = self._builder = ViewBuilder(self._synthetic, base)
        self._source = entries
        return builder

    def _stub(self, entry: Entry) -> ViewEntry:
        seq = entry.message.seq
        stub = self._stubs.get(seq)
        if stub is None:
            stub = self._stubs[seq] = make_stub(entry.original, self._profile)
        return stub
