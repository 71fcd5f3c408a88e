"""The model-input view: what the model sees, derived from stored messages.

Nothing here changes storage. The view leaves out history-only messages
(silently: the client asked for that) and failed assistant messages,
gives every tool call exactly one result right after its assistant message
(a synthetic error result when none arrived in time), drops tool results that
have no call to answer, and cuts oversized tool output to a preview.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import overload

from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role
from ctxwarden.core.session import EffectivePolicy
from ctxwarden.core.tokens import CountingProfile, Tokenizer, count_message


def _count(message: Message, counter: Tokenizer | CountingProfile) -> int:
    if isinstance(counter, CountingProfile):
        return counter.message(message)
    return count_message(message, counter)


SYNTHETIC_RESULT_TEXT = "No result provided"
SYNTHETIC_METADATA_KEY = "ctxwarden.synthetic"

FAILED_MESSAGE_OMITTED = "FAILED_MESSAGE_OMITTED"
ORPHANED_TOOL_RESULT_OMITTED = "ORPHANED_TOOL_RESULT_OMITTED"
SYNTHETIC_TOOL_RESULT = "SYNTHETIC_TOOL_RESULT"
TOOL_OUTPUT_TRUNCATED = "TOOL_OUTPUT_TRUNCATED"
TOOL_OUTPUT_STUBBED = "TOOL_OUTPUT_STUBBED"


@dataclass(frozen=True, slots=True)
class Notice:
    code: str
    seq: int
    detail: str


@dataclass(frozen=True, slots=True)
class ViewEntry:
    """A stored message as the view shows it, with its token count.

    Computed once per message (at append or restore) so building the input
    never re-tokenizes history.
    """

    message: Message
    token_count: int
    notice: Notice | None = None
    stored: Message | None = None
    """The stored message when ``message`` is a shortened copy of it."""

    @property
    def original(self) -> Message:
        """The message as stored (untruncated)."""
        return self.stored if self.stored is not None else self.message


Entry = ViewEntry | Message
"""A view entry as a hot session keeps it: a message shown as stored (no notice,
its own token count) stands for its entry."""


def compact(entry: ViewEntry) -> Entry:
    """``entry``, or its message when that says the same."""
    m = entry.message
    if entry.stored is None and entry.notice is None and entry.token_count == m.token_count:
        return m
    return entry


@dataclass(frozen=True, slots=True)
class View:
    messages: tuple[Message, ...]
    notices: tuple[Notice, ...]
    message_tokens: int
    stable: int = 0
    """Leading messages that every later view of the same builder starts with."""
    digests: Sequence[int] = ()
    """digests[i] fingerprints the first i messages (see ViewBuilder); empty when
    the view cannot be resumed."""


def _digest(previous: int, message: Message, entry_tokens: int) -> int:
    h = hashlib.blake2b(digest_size=8)
    h.update(previous.to_bytes(8, "little"))
    h.update(
        f"{message.seq}\x00{message.message_id}\x00{message.tool_call_id}\x00"
        f"{int(message.role)}\x00{entry_tokens}".encode()
    )
    return int.from_bytes(h.digest(), "little")


def _sealed(base: int, link: int) -> int:
    h = hashlib.blake2b(digest_size=8)
    h.update(base.to_bytes(8, "little") + link.to_bytes(8, "little"))
    return int.from_bytes(h.digest(), "little")


class Digests(Sequence[int]):
    """A view's fingerprints: ``self[i]`` seals link i of the builder's chain (the
    first i messages, whoever shows them) with the session's ``base``, computed
    when asked for. A fork continues its source's chain under a base of its own."""

    __slots__ = ("base", "inherited", "links", "size")

    def __init__(
        self, base: int, links: array[int], inherited: tuple[int, int] | None = None
    ) -> None:
        self.base = base
        self.links = links  # only ever appended to: the first ``size`` are this view's
        self.size = len(links)
        self.inherited = inherited
        """A fork's (source's base, links there were at the fork point)."""

    def holds(self, index: int, digest: int) -> bool:
        """Whether ``digest`` fingerprints the first ``index`` messages: sealed with
        this base, or, up to the fork point, with the base of the source a fork
        was made from at its end (a client holding the source's input holds
        the fork's first messages)."""
        if not 0 <= index < self.size:
            return False
        if digest == self[index]:
            return True
        source = self.inherited
        return (
            source is not None
            and index < source[1]
            and digest == _sealed(source[0], self.links[index])
        )

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[int]: ...
    def __getitem__(self, index: int | slice) -> int | Sequence[int]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.size))]
        if index < 0:
            index += self.size
        if not 0 <= index < self.size:
            raise IndexError(index)
        return _sealed(self.base, self.links[index])

    def __eq__(self, other: object) -> bool:
        """By value, as any sequence of ints (a list of them too)."""
        if isinstance(other, Digests) and other.base == self.base:
            return self.links[: self.size] == other.links[: other.size]
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(other) == self.size and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]


def base_digest(*parts: object) -> int:
    """The fingerprint of what comes before the messages (settings, summary)."""
    h = hashlib.blake2b(digest_size=8)
    h.update("\x00".join(str(p) for p in parts).encode())
    return int.from_bytes(h.digest(), "little")


def _line_count(text: str) -> int:
    return len(text.splitlines())


def _preview(text: str, max_bytes: int, max_lines: int) -> str:
    lines = text.splitlines(keepends=True)[:max_lines]
    head = "".join(lines).encode("utf-8")[:max_bytes]
    return head.decode("utf-8", errors="ignore")


def make_entry(
    message: Message, policy: EffectivePolicy, tokenizer: Tokenizer | CountingProfile
) -> ViewEntry:
    """The view entry of a stored message; tool output over budget is truncated."""
    if message.history_only:
        return ViewEntry(message, 0)
    if message.role is not Role.TOOL_RESULT:
        return ViewEntry(message, message.token_count)
    text = message.text
    total_bytes = len(text.encode("utf-8"))
    total_lines = _line_count(text)
    if total_bytes <= policy.tool_output_max_bytes and total_lines <= policy.tool_output_max_lines:
        return ViewEntry(message, message.token_count)
    preview = _preview(text, policy.tool_output_max_bytes, policy.tool_output_max_lines)
    shown_bytes = len(preview.encode("utf-8"))
    shown_lines = _line_count(preview)
    marker = (
        f"\n\n[ctxwarden: output truncated: showing {shown_bytes} of {total_bytes} bytes, "
        f"{shown_lines} of {total_lines} lines. The full output is stored as message "
        f"seq {message.seq}.]"
    )
    others = tuple(b for b in message.content if b.kind is not ContentKind.TEXT)
    cut = replace(message, content=(ContentBlock.of_text(preview + marker), *others))
    cut = replace(cut, token_count=_count(cut, tokenizer))
    notice = Notice(
        TOOL_OUTPUT_TRUNCATED,
        message.seq,
        f"tool output of {total_bytes} bytes / {total_lines} lines cut to "
        f"{shown_bytes} bytes / {shown_lines} lines",
    )
    return ViewEntry(cut, cut.token_count, notice, message)


def make_stub(message: Message, tokenizer: Tokenizer | CountingProfile) -> ViewEntry:
    """An old tool result reduced to one line that says how to read it back."""
    text = message.text
    size = len(text.encode("utf-8"))
    line = (
        f"[ctxwarden: older tool output omitted ({size} bytes, {_line_count(text)} lines); "
        f"read it with GetToolOutput(seq={message.seq})]"
    )
    stub = replace(message, content=(ContentBlock.of_text(line),))
    stub = replace(stub, token_count=_count(stub, tokenizer))
    notice = Notice(TOOL_OUTPUT_STUBBED, message.seq, f"tool output of {size} bytes stubbed")
    return ViewEntry(stub, stub.token_count, notice, message)


def synthetic_result(call: ContentBlock, token_count: int) -> Message:
    return Message(
        role=Role.TOOL_RESULT,
        content=(ContentBlock.of_text(SYNTHETIC_RESULT_TEXT),),
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        is_error=True,
        token_count=token_count,
        metadata={SYNTHETIC_METADATA_KEY: "true"},
    )


def build_view(
    entries: Sequence[Entry],
    synthetic_tokens: int,
    keep_tool_results: int = 0,
    stub: Callable[[Entry], ViewEntry] | None = None,
) -> View:
    """Assemble the messages to send, in order, from the kept active entries.

    ``synthetic_tokens`` is the token count of one synthetic result. With
    ``keep_tool_results`` N > 0, tool results older than the newest N are
    replaced by ``stub(entry)``.
    """
    stub_before = -1
    if keep_tool_results > 0 and stub is not None:
        results = [
            i
            for i, e in enumerate(entries)
            if e.message.role is Role.TOOL_RESULT and not e.message.history_only
        ]
        if len(results) > keep_tool_results:
            stub_before = results[-keep_tool_results]
    builder = ViewBuilder(synthetic_tokens, chain=False)
    for index, entry in enumerate(entries):
        if index < stub_before and stub is not None and entry.message.role is Role.TOOL_RESULT:
            entry = stub(entry)
        builder.feed(entry)
    # Stubs change as results arrive: nothing later can resume from this view.
    return replace(builder.view(), stable=0)


class ViewBuilder:
    """build_view's state, fed one entry at a time.

    Feeding only appends to the output, so a session whose entries only grow
    (appends between compactions) resumes where it stopped instead of walking
    its whole history for every model input. ``view()`` does not change the
    state: calls left open are answered by synthetic results in the returned
    view only, and the real result may still arrive.
    """

    def __init__(self, synthetic_tokens: int, base: int = 0, *, chain: bool = True) -> None:
        self.synthetic_tokens = synthetic_tokens
        self.fed = 0
        # A chain of fingerprints of the output so far: links[i] covers the first
        # i messages, digests[i] seals it with ``base`` (the session's settings
        # and identity). Two builders of one base that show the same first i
        # messages agree on digests[i], whatever happened around them (a restart,
        # a rollback of later messages, another replica), so a client can prove
        # cheaply which prefix of an input it holds.
        self.base = base
        self._links = array("Q", [0])
        self._inherited: tuple[int, int] | None = None
        self._chain = chain
        """False: no fingerprints (a view built for one call only)."""
        self._out: list[Message] = []
        self._notices: list[Notice] = []
        self._tokens = 0
        self._open: dict[str, tuple[int, ContentBlock]] = {}

    def _close_open_calls(
        self, out: list[Message], notices: list[Notice], chain: bool = False
    ) -> int:
        for call_id, (seq, call) in self._open.items():
            out.append(synthetic_result(call, self.synthetic_tokens))
            if chain and self._chain:
                self._links.append(_digest(self._links[-1], out[-1], self.synthetic_tokens))
            notices.append(
                Notice(
                    SYNTHETIC_TOOL_RESULT,
                    seq,
                    f"tool call {call_id!r} ({call.tool_name}) had no result; "
                    f"added {SYNTHETIC_RESULT_TEXT!r}",
                )
            )
        return len(self._open) * self.synthetic_tokens

    def feed(self, entry: Entry) -> None:
        self.fed += 1
        message = entry.message
        if message.history_only:
            return  # stored for the history, never shown: no notice, no call closed
        if message.role is Role.TOOL_RESULT:
            if self._open.pop(message.tool_call_id, None) is None:
                self._notices.append(
                    Notice(
                        ORPHANED_TOOL_RESULT_OMITTED,
                        message.seq,
                        f"tool result for call {message.tool_call_id!r} has no matching "
                        "call in the view",
                    )
                )
                return
        elif message.failed:
            reason = message.error_message or message.stop_reason.name.lower()
            self._notices.append(
                Notice(FAILED_MESSAGE_OMITTED, message.seq, f"failed assistant message: {reason}")
            )
            return
        else:
            if self._open:
                self._tokens += self._close_open_calls(self._out, self._notices, chain=True)
                self._open.clear()
            for call in message.tool_calls:
                self._open[call.tool_call_id] = (message.seq, call)
        self._out.append(message)
        if self._chain:
            self._links.append(_digest(self._links[-1], message, entry.token_count))
        self._tokens += entry.token_count
        if entry.notice is not None:
            self._notices.append(entry.notice)

    def rebased(self, base: int) -> ViewBuilder:
        """A builder that goes on from this one's state on its own, its digests
        sealed with ``base``: what a fork made at the end starts from (copies of
        references and of the links, no entry fed again)."""
        other = ViewBuilder(self.synthetic_tokens, base, chain=self._chain)
        other.fed, other._tokens = self.fed, self._tokens
        other._links = array("Q", self._links)
        other._out, other._notices = list(self._out), list(self._notices)
        other._open = dict(self._open)
        other._inherited = (self.base, len(self._links))
        return other

    def view(self) -> View:
        stable = len(self._out)
        digests = Digests(self.base, self._links, self._inherited) if self._chain else ()
        if not self._open:
            return View(tuple(self._out), tuple(self._notices), self._tokens, stable, digests)
        out: list[Message] = []
        notices = list(self._notices)
        extra = self._close_open_calls(out, notices)
        return View((*self._out, *out), tuple(notices), self._tokens + extra, stable, digests)
