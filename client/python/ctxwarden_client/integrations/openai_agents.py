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
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from .._errors import AbortedError, FailedPreconditionError, InvalidArgumentError, NotFoundError
from .._sync_client import Client
from ..v1 import context_service_pb2 as pb
from ..v1 import session_pb2
from ._compaction import Summarizer, compact_with
from ._store import SessionStore
from .responses_items import item_to_message, message_to_items, opaque_message
from .session_ids import session_key

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session import OpenAIResponsesCompactionArgs

__all__ = ["CtxwardenSession", "Summarizer"]

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

_POP_ATTEMPTS = 20


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
            items = [item for msg in self._store.context() for item in message_to_items(msg)]
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
        names = {
            i["call_id"]: i["name"]
            for i in plain
            if i.get("type") == "function_call" and isinstance(i.get("name"), str)
        }
        messages = [item_to_message(item, names) for item in plain]

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
            items = message_to_items(newest)
            if len(items) > 1:  # a message of several items (another client's): keep the rest
                self._store.append([item_to_message(item) for item in items[:-1]])
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


def _plain(item: object) -> dict[str, Any]:
    """A JSON-ready dict of an item (a TypedDict already is one; SDK models are dumped)."""
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return cast("dict[str, Any]", dump(exclude_unset=True, mode="json"))
    raise TypeError(f"not a Responses input item: {type(item).__name__}")
