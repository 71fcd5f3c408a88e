"""One ctxwarden session as the adapters use it: created on the first write from a
template, read as its effective context, started over by clear."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from .._errors import AlreadyExistsError, NotFoundError
from .._sync_client import Client
from ..v1 import context_service_pb2 as pb
from ..v1 import message_pb2 as m
from ..v1 import session_pb2

FRESH_ON_CLEAR = (
    "session_id",
    "pinned_state",
    "last_seq",
    "context_tokens",
    "etag",
    "create_time",
    "update_time",
    "state",
    "user_state",
    "project_state",
)
"""The Session fields :meth:`SessionStore.clear` does not carry over (the rest are
its settings: system prompt, model, tools, policy, user, project, title, labels)."""


class SessionStore:
    def __init__(self, client: Client, session_id: str, template: session_pb2.Session | None):
        self.client = client
        self.session_id = session_id
        self.template = template or session_pb2.Session()
        self.exists = False

    def create(self, session: session_pb2.Session | None = None) -> None:
        fresh = session_pb2.Session()
        fresh.CopyFrom(session or self.template)
        with contextlib.suppress(AlreadyExistsError):  # another writer made it first
            self.client.create_session(fresh, session_id=self.session_id)
        self.exists = True

    def ensure(self) -> None:
        if not self.exists:
            try:
                self.client.get_session(self.session_id)
            except NotFoundError:
                self.create()
            self.exists = True

    def append(self, messages: Sequence[m.Message]) -> None:
        """Appends in one atomic append (recreating a session deleted meanwhile)."""
        if not messages:
            return
        self.ensure()
        try:
            self.client.append_messages(self.session_id, messages, view=pb.MESSAGE_VIEW_BASIC)
        except NotFoundError:
            self.create()
            self.client.append_messages(self.session_id, messages, view=pb.MESSAGE_VIEW_BASIC)

    def context(self, *, auto_compact: bool = False) -> list[m.Message]:
        """The effective context's messages (a compaction summary first); [] without
        a session."""
        try:
            model_input = self.client.build_model_input(
                self.session_id,
                auto_compact=auto_compact,
                incremental=not auto_compact,
                view=pb.MODEL_INPUT_VIEW_FULL,
            )
        except NotFoundError:
            self.exists = False
            return []
        return list(model_input.messages)

    def clear(self) -> None:
        """``DeleteSession``, then ``CreateSession`` with the same ID and settings."""
        try:
            old = self.client.get_session(self.session_id)
        except NotFoundError:
            self.exists = False
            return
        fresh = session_pb2.Session()
        fresh.CopyFrom(old)
        for name in FRESH_ON_CLEAR:
            fresh.ClearField(name)  # type: ignore[arg-type]
        with contextlib.suppress(NotFoundError):
            self.client.delete_session(self.session_id)
        self.create(fresh)
