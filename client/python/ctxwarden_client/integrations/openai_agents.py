"""An OpenAI Agents SDK session stored in ctxwarden, with ctxwarden's compaction.

    from agents import Agent, Runner
    from ctxwarden_client import Client
    from ctxwarden_client.integrations.openai_agents import CtxwardenSession

    with Client("127.0.0.1:50051") as client:
        session = CtxwardenSession("user-42", client)
        await Runner.run(agent, "Hi", session=session)

Items are stored as ctxwarden messages, one per item (see
:mod:`ctxwarden_client.integrations.responses_items`), and :meth:`get_items`
returns the session's effective context, not the raw history: after a
compaction, the summary (as a user message) followed by the kept items. The
complete history stays in ctxwarden (``ListMessages``).

``run_compaction`` (the SDK's compaction-aware session protocol, called by the
Runner after each turn) compacts when ctxwarden recommends it, or always with
``force``: with the server's summariser (``Compact``, ``serve --summarizer``), or
with ``summarizer=`` (your own LLM: ``PrepareCompaction`` + ``CommitCompaction``).

Calls run the blocking :class:`~ctxwarden_client.Client` in a worker thread, so
one session works from any event loop (``Runner.run_sync`` makes its own).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from agents.memory.session import _await_mutation, _CompactionSnapshot
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from .._errors import AbortedError, FailedPreconditionError, InvalidArgumentError, NotFoundError
from .._sync_client import Client
from ..v1 import context_service_pb2 as pb
from ..v1 import message_pb2 as m
from ..v1 import session_pb2
from ._compaction import Summarizer, compact_with
from ._store import SessionStore
from .responses_items import ENVELOPE_KEY, item_to_message, message_to_items, opaque_message
from .session_ids import session_key

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session import OpenAIResponsesCompactionArgs

__all__ = ["CtxwardenSession", "Summarizer"]

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

_POP_ATTEMPTS = 20
_Row = tuple[int, dict[str, Any]]
"""An item of the effective context and the seq of its message."""


class CtxwardenSession:
    """The SDK's ``Session`` and compaction-aware session protocols over ctxwarden.

    ``session_id`` is the SDK's ID; the ctxwarden session is
    ``session_key(namespace, session_id)`` (``oa:<escaped id>``, see
    :mod:`~ctxwarden_client.integrations.session_ids`) unless
    ``ctxwarden_session_id`` names one. It is created on the first write, from
    ``template`` (system prompt, model, policy, tools, user and project): the
    SDK sends its agent's instructions and tools with each model call, so they
    are not the session's. ``client`` is not closed by :meth:`close`.
    """

    def __init__(
        self,
        session_id: str,
        client: Client,
        *,
        namespace: str = "oa",
        ctxwarden_session_id: str | None = None,
        template: session_pb2.Session | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        summarizer: Summarizer | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(session_settings)
        )
        self.client = client
        self._store = SessionStore(
            client, ctxwarden_session_id or session_key(namespace, session_id), template
        )
        self._summarizer = summarizer
        self._lock = threading.RLock()
        self._closed = False

    # -- plumbing --------------------------------------------------------------

    async def _run(self, fn: Callable[[], _T]) -> _T:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

        def locked() -> _T:
            with self._lock:
                return fn()

        return await asyncio.to_thread(locked)

    @property
    def ctxwarden_session_id(self) -> str:
        return self._store.session_id

    # -- Session protocol ------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The effective context as Responses items; the newest ``limit`` when given
        (default: ``session_settings.limit``; a negative limit is no limit, as in SQLite)."""
        wanted = resolve_session_limit(limit, self.session_settings)

        def read() -> list[dict[str, Any]]:
            items = [item for _, item in self._rows()]
            if wanted is None or wanted < 0:
                return items
            return items[-wanted:] if wanted > 0 else []

        return cast("list[TResponseInputItem]", await self._run(read))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Appends the items, one message each, in one atomic append (item by item
        when ctxwarden refuses one in its modelled form, which is then kept verbatim)."""
        plain = [_plain(item) for item in items]
        if not plain:
            await self._run(lambda: None)  # still refused once closed
            return
        messages = _messages(plain)

        def append() -> None:
            try:
                self._store.append(messages)
            except InvalidArgumentError:
                # An item ctxwarden refuses in its modelled form (e.g. an image of a type
                # it does not take): store the items one by one, a refused one verbatim.
                for item, message in zip(plain, messages, strict=True):
                    try:
                        self._store.append([message])
                    except InvalidArgumentError:
                        self._store.append([opaque_message(item)])

        await self._run(append)

    async def pop_item(self) -> TResponseInputItem | None:
        """Removes the newest item and returns it.

        Its message is rolled back (``RollbackTurn`` with ``expected_last_seq``, so a
        concurrent append is never rolled back with it): it leaves the effective
        context and stays in the history."""
        return cast("TResponseInputItem | None", await self._run(self._pop))

    def _pop(self) -> dict[str, Any] | None:
        sid = self.ctxwarden_session_id
        for _ in range(_POP_ATTEMPTS):
            try:
                last_seq = self.client.get_session(sid).last_seq
            except NotFoundError:
                self._store.exists = False
                return None
            newest = next(
                iter(self.client.list_messages(sid, page_size=1, newest_first=True)), None
            )
            if newest is None:
                return None
            try:
                self.client.rollback_turn(sid, to_seq=newest.seq - 1, expected_last_seq=last_seq)
            except AbortedError as exc:
                if exc.reason == "LAST_SEQ_MISMATCH":
                    continue  # appended to meanwhile: read the new newest item
                raise
            items = _items(newest)
            if len(items) > 1:  # a message of several items: keep the rest
                self._store.append(_messages(items[:-1]))
            return items[-1] if items else self._pop()
        raise AbortedError(f"pop_item: session {sid} kept changing", reason="LAST_SEQ_MISMATCH")

    async def clear_session(self) -> None:
        """Starts the session over: ``DeleteSession``, then ``CreateSession`` with the
        same ID and settings (system prompt, model, tools, policy, user, project; not
        its state or pinned state)."""

        await self._run(self._store.clear)

    def close(self) -> None:
        """Refuses later calls; the client is the caller's and stays open."""
        self._closed = True

    # -- compaction-aware protocol ---------------------------------------------

    async def run_compaction(self, args: OpenAIResponsesCompactionArgs | None = None) -> None:
        """Compacts when ctxwarden recommends it (``force``: always).

        Nothing to compact is not an error, nor, without ``force``, a server
        without a summariser (logged): the Runner calls this after every turn."""
        force = bool(args and args.get("force"))
        sid = self.ctxwarden_session_id

        def due() -> bool:
            try:
                basic = self.client.build_model_input(sid, view=pb.MODEL_INPUT_VIEW_BASIC)
            except NotFoundError:
                return False
            return force or basic.compaction_recommended

        if not await self._run(due):
            return
        try:
            if self._summarizer is None:
                await self._run(lambda: self.client.compact(sid))
            else:
                await self._compact_with(self._summarizer)
        except FailedPreconditionError as exc:
            if exc.reason == "NOTHING_TO_COMPACT":
                return
            if force:
                raise
            logger.warning("ctxwarden session %s was not compacted", sid, exc_info=True)

    async def _compact_with(self, summarizer: Summarizer) -> None:
        await compact_with(self.client, self.ctxwarden_session_id, summarizer, self._run)

    # -- the SDK's compaction snapshot -----------------------------------------

    async def _get_compaction_snapshot(
        self,
        limit: int,
        *,
        prune_prefix: Callable[[TResponseInputItem], bool] | None = None,
    ) -> _CompactionSnapshot | None:
        """The newest ``limit`` items and a compare-and-swap of a suffix of them.

        The SDK's ``OpenAIResponsesCompactionSession`` and ``EncryptedSession`` read
        this (as they do ``SQLiteSession``'s) to replace the items of the latest model
        exchange with the compacted output while keeping the older history:
        ``items`` are the newest ``limit`` items of :meth:`get_items`, ``complete``
        whether they are all of them, and ``replace_suffix(start, output)`` replaces
        ``items[start:]`` with ``output`` when they are still the newest items
        (``False``, changing nothing, when the session changed since). With
        ``prune_prefix`` (``EncryptedSession``: its expired envelopes), the oldest
        items it accepts, up to the first it refuses, go too.

        The replacement is ``RollbackTurn`` (``expected_last_seq``: refused when
        anything was appended since the snapshot) and one atomic append: the items
        replaced leave the effective context and stay in the history. Dropping a
        pruned prefix rolls back from the oldest item and appends the kept ones
        again. Calls of this session object never come between the two RPCs (they
        hold its lock); an append of another client that does is kept, before the
        output. ``None`` for a subclass that overrides how items are read or written,
        as the SDK's ``SQLiteSession`` does for its subclasses."""
        if _transforms_items(type(self)):
            return None
        rows = await self._run(self._rows)
        window = rows[-limit:] if limit > 0 else []
        complete = len(rows) <= max(limit, 0)

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            expected = window[start:]
            if not expected:
                return False
            plain = [_plain(item) for item in output]

            def replace() -> bool:
                return self._replace_suffix(expected, plain, prune_prefix)

            return await _await_mutation(self._run(replace))

        items = cast("list[TResponseInputItem]", [copy.deepcopy(i) for _, i in window])
        return _CompactionSnapshot(items, complete, replace_suffix)

    def _rows(self) -> list[_Row]:
        """The effective context's items, each with its message's seq (0: a summary or
        memory block that ctxwarden renders, not a stored message). Without the results
        ctxwarden adds for tool calls that have none (yet): they are not the session's
        items (a call waiting for approval gets its real result later)."""
        return [
            (msg.seq, item)
            for msg in self._store.context()
            if msg.seq or msg.role != m.ROLE_TOOL_RESULT
            for item in _items(msg)
        ]

    def _replace_suffix(
        self,
        expected: list[_Row],
        output: list[dict[str, Any]],
        prune_prefix: Callable[[TResponseInputItem], bool] | None,
    ) -> bool:
        sid = self.ctxwarden_session_id
        try:
            last_seq = self.client.get_session(sid).last_seq
        except NotFoundError:
            self._store.exists = False
            return False
        rows = self._rows()
        start = len(rows) - len(expected)
        if start < 0 or rows[start:] != expected:
            return False
        pruned = 0
        if prune_prefix is not None:
            while (
                pruned < start
                and rows[pruned][0]
                and prune_prefix(cast("TResponseInputItem", copy.deepcopy(rows[pruned][1])))
            ):
                pruned += 1
        first = 0 if pruned else start
        to_seq = max(rows[first][0] - 1, 0)
        # What the rollback takes that stays: the items between the pruned prefix and the
        # suffix, and those of the suffix's first message that come before the suffix.
        kept = [item for seq, item in rows[pruned:start] if seq > to_seq]
        gone = [item for seq, item in rows if seq > to_seq]
        try:
            self.client.rollback_turn(sid, to_seq=to_seq, expected_last_seq=last_seq)
        except AbortedError as exc:
            if exc.reason == "LAST_SEQ_MISMATCH":
                return False  # appended to since the snapshot
            raise
        try:
            self._append_exact(kept + output, last_seq)
        except BaseException:
            self._append_exact(gone, None)  # put back what the rollback took
            raise
        return True

    def _append_exact(self, items: list[dict[str, Any]], last_seq: int | None) -> None:
        """Appends ``items`` in one append, after ``last_seq`` when that is still the
        session's last (else after what another client appended meanwhile)."""
        if not items:
            return
        sid = self.ctxwarden_session_id
        messages = _messages(items)
        try:
            try:
                self.client.append_messages(
                    sid, messages, expected_last_seq=last_seq, view=pb.MESSAGE_VIEW_BASIC
                )
            except AbortedError as exc:
                if exc.reason != "LAST_SEQ_MISMATCH":
                    raise
                self.client.append_messages(sid, messages, view=pb.MESSAGE_VIEW_BASIC)
        except InvalidArgumentError:
            # An item ctxwarden refuses in its modelled form: all of them verbatim, still
            # in one append.
            opaque = [opaque_message(item) for item in items]
            self.client.append_messages(sid, opaque, view=pb.MESSAGE_VIEW_BASIC)


GROUP_KEY = "ctxwarden.responses_items"
"""Metadata key of a message that holds several items: a JSON list of ``[envelope or
null, number of content blocks]``, one per item, in order."""


def _messages(items: list[dict[str, Any]]) -> list[m.Message]:
    """One message per item (a function call knows its name for its output's message),
    except that a function call and the model's items after it up to the next tool
    output or user input are one assistant message (parallel tool calls, reasoning
    between them): ctxwarden answers a call that is followed by anything but its result
    with a synthetic result, as providers require a call's result right after it."""
    names = {
        i["call_id"]: i["name"]
        for i in items
        if i.get("type") == "function_call" and isinstance(i.get("name"), str)
    }
    out: list[m.Message] = []
    run: list[m.Message] = []  # a call and the assistant messages after it

    def flush() -> None:
        out.append(_grouped(run) if len(run) > 1 else run[0])
        run.clear()

    for message in (item_to_message(item, names) for item in items):
        assistant = message.role == m.ROLE_ASSISTANT
        if run and not assistant:
            flush()
        if run or (assistant and any(b.HasField("tool_call") for b in message.content)):
            run.append(message)
        else:
            out.append(message)
    if run:
        flush()
    return out


def _grouped(messages: list[m.Message]) -> m.Message:
    """Assistant messages of one item each as one message (see :data:`GROUP_KEY`)."""
    parts = [[msg.metadata.get(ENVELOPE_KEY), len(msg.content)] for msg in messages]
    return m.Message(
        role=m.ROLE_ASSISTANT,
        content=[block for msg in messages for block in msg.content],
        metadata={GROUP_KEY: json.dumps(parts, separators=(",", ":"))},
    )


def _items(message: m.Message) -> list[dict[str, Any]]:
    """The items of a stored message: those of a group one by one (see :data:`GROUP_KEY`),
    else as :func:`~.responses_items.message_to_items` reads it."""
    raw = message.metadata.get(GROUP_KEY)
    try:
        parts = json.loads(raw) if raw else None
        blocks = list(message.content)
        if not isinstance(parts, list) or sum(n for _, n in parts) != len(blocks):
            parts = None
    except (ValueError, TypeError):
        parts = None
    if parts is None:
        return message_to_items(message)
    items: list[dict[str, Any]] = []
    at = 0
    for envelope, n in parts:
        part = m.Message(role=m.ROLE_ASSISTANT, content=blocks[at : at + n])
        if isinstance(envelope, str):
            part.metadata[ENVELOPE_KEY] = envelope
        items.extend(message_to_items(part))
        at += n
    return items


_STORAGE_METHODS = ("get_items", "add_items", "pop_item", "clear_session")


def _transforms_items(cls: type[CtxwardenSession]) -> bool:
    """Whether a subclass reads or writes items its own way."""
    return any(getattr(cls, n) is not getattr(CtxwardenSession, n) for n in _STORAGE_METHODS)


def _plain(item: object) -> dict[str, Any]:
    """A JSON-ready dict of an item (a TypedDict already is one; SDK models are dumped)."""
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return cast("dict[str, Any]", dump(exclude_unset=True, mode="json"))
    raise TypeError(f"not a Responses input item: {type(item).__name__}")
