"""A Google ADK session service stored in ctxwarden.

    from google.adk.runners import Runner
    from ctxwarden_client import Client
    from ctxwarden_client.integrations.adk import CtxwardenSessionService

    service = CtxwardenSessionService(Client("127.0.0.1:50051"))
    runner = Runner(agent=agent, app_name="my_app", session_service=service)

An ADK session (app, user, session) is the ctxwarden session
``session_key("adk", app, user, session)`` (reversible, see
:mod:`~ctxwarden_client.integrations.session_ids`) with project_id = app and
user_id = user. Its events are messages, one each (see
:mod:`~ctxwarden_client.integrations.adk_events`); state goes to ctxwarden's three
states, atomically with the event's message: ``app:`` keys to the project state
(shared by the app's sessions), ``user:`` keys to the user state (shared by the
user's sessions of the app), the others to the session's state; ``temp:`` keys are
never stored. ``get_session`` returns them merged, with their prefixes.

Stale sessions: a session this service returns carries ctxwarden's ``last_seq`` as
ADK's storage revision marker, and ``append_event`` appends with
``expected_last_seq`` = that marker, so an append to a session that changed since
it was read fails with ADK's ``StaleSessionError`` ("modified in storage") and
stores nothing.

ADK still builds each model request from all of a session's events: for ctxwarden's
compaction to reach the model, add the plugin of
:mod:`~ctxwarden_client.integrations.adk_context` to the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from google.adk.errors._stale_session_error import StaleSessionError  # a ValueError
from google.adk.errors.already_exists_error import AlreadyExistsError as AdkAlreadyExists
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from google.protobuf import json_format, struct_pb2

from .._errors import AbortedError, AlreadyExistsError, NotFoundError
from .._sync_client import Client
from ..builders import state_delta
from ..v1 import session_pb2
from .adk_events import event_timestamp, from_message, to_message
from .session_ids import session_key, split_session_key

__all__ = ["CtxwardenSessionService"]

_T = TypeVar("_T")
NAMESPACE = "adk"
UPDATE_TIME_KEY = "ctxwarden:last_update_time"
"""Session-state key of the ADK session's last_update_time (the newest event's
timestamp); left out of the state ADK sees."""
STALE_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


def _plain(struct: struct_pb2.Struct) -> dict[str, Any]:
    def tidy(value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, dict):
            return {k: tidy(v) for k, v in value.items()}
        if isinstance(value, list):
            return [tidy(v) for v in value]
        return value

    return {k: tidy(v) for k, v in json_format.MessageToDict(struct).items()}


def _merged(stored: session_pb2.Session) -> dict[str, Any]:
    state = {k: v for k, v in _plain(stored.state).items() if k != UPDATE_TIME_KEY}
    state.update({State.APP_PREFIX + k: v for k, v in _plain(stored.project_state).items()})
    state.update({State.USER_PREFIX + k: v for k, v in _plain(stored.user_state).items()})
    return state


class CtxwardenSessionService(BaseSessionService):  # type: ignore[misc,unused-ignore]
    """ADK's ``BaseSessionService`` over ctxwarden. ``template`` gives new sessions
    their ctxwarden settings (model, policy, system prompt); ``client`` stays the
    caller's. Calls run the blocking client in a worker thread."""

    def __init__(
        self,
        client: Client,
        *,
        template: session_pb2.Session | None = None,
        namespace: str = NAMESPACE,
        project_prefix: str = "",
    ) -> None:
        self.client = client
        self._template = template or session_pb2.Session()
        self.namespace = namespace
        self.project_prefix = project_prefix

    async def _run(self, fn: Callable[[], _T]) -> _T:
        return await asyncio.to_thread(fn)

    async def close(self) -> None:
        """Nothing to release: the client is the caller's."""

    async def __aenter__(self) -> CtxwardenSessionService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def key(self, app_name: str, user_id: str, session_id: str) -> str:
        """The ctxwarden session ID of an ADK session."""
        return session_key(self.namespace, app_name, user_id, session_id)

    # -- sessions ----------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        sid = session_id.strip() if session_id and session_id.strip() else str(uuid.uuid4())
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        now = time.time()

        def create() -> Session:
            key = self.key(app_name, user_id, sid)
            fresh = session_pb2.Session()
            fresh.CopyFrom(self._template)
            fresh.project_id, fresh.user_id = self.project_prefix + app_name, user_id
            try:
                self.client.create_session(
                    fresh, session_id=key, state={**deltas["session"], UPDATE_TIME_KEY: now}
                )
            except AlreadyExistsError as exc:
                raise AdkAlreadyExists(f"Session with id {sid} already exists.") from exc
            if deltas["app"] or deltas["user"]:
                delta = state_delta(user=deltas["user"], project=deltas["app"])
                self.client.append_messages(key, [], state_delta=delta)
            stored = self.client.get_session(key)
            return self._session(app_name, user_id, sid, stored, [])

        return await self._run(create)

    def _session(
        self,
        app_name: str,
        user_id: str,
        sid: str,
        stored: session_pb2.Session,
        events: list[Event],
    ) -> Session:
        updated = stored.state.fields.get(UPDATE_TIME_KEY)
        last = (
            updated.number_value
            if updated is not None
            else stored.create_time.ToNanoseconds() / 1e9
        )
        session = Session(
            id=sid,
            app_name=app_name,
            user_id=user_id,
            state=_merged(stored),
            events=events,
            last_update_time=last,
        )
        session._storage_update_marker = str(stored.last_seq)
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        key = self.key(app_name, user_id, session_id)

        def get() -> Session | None:
            try:
                stored = self.client.get_session(key)
            except NotFoundError:
                return None
            return self._session(app_name, user_id, session_id, stored, self._events(key, config))

        return await self._run(get)

    def _events(self, key: str, config: GetSessionConfig | None) -> list[Event]:
        recent = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        if recent == 0:
            return []
        if recent is not None:
            newest = self.client.list_messages(key, page_size=recent, newest_first=True)
            messages = [msg for _, msg in zip(range(recent), newest, strict=False)][::-1]
        else:
            messages = list(self.client.list_messages(key))
        if after is not None:
            messages = [msg for msg in messages if (event_timestamp(msg) or 0.0) >= after]
        return [e for e in map(from_message, messages) if e is not None]

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        def listing() -> ListSessionsResponse:
            shared: dict[str, session_pb2.Session] = {}
            sessions: list[Session] = []
            project = self.project_prefix + app_name
            for stored in self.client.list_sessions(user_id=user_id or "", project_id=project):
                try:
                    namespace, app, user, sid = split_session_key(stored.session_id)
                except ValueError:
                    continue
                if namespace != self.namespace or app != app_name or (user_id and user != user_id):
                    continue
                if user not in shared:  # the shared states come with GetSession
                    shared[user] = self.client.get_session(stored.session_id)
                stored.user_state.CopyFrom(shared[user].user_state)
                stored.project_state.CopyFrom(shared[user].project_state)
                sessions.append(self._session(app, user, sid, stored, []))
            sessions.sort(key=lambda s: s.last_update_time)
            return ListSessionsResponse(sessions=sessions)

        return await self._run(listing)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        def delete() -> None:
            with contextlib.suppress(NotFoundError):
                self.client.delete_session(self.key(app_name, user_id, session_id))

        await self._run(delete)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The ``user:`` state of the user in the app (keys without the prefix)."""

        def read() -> dict[str, Any]:
            project = self.project_prefix + app_name
            for stored in self.client.list_sessions(user_id=user_id, project_id=project):
                if stored.session_id.startswith(self.namespace + ":"):
                    return _plain(self.client.get_session(stored.session_id).user_state)
            return {}

        return await self._run(read)

    # -- events ------------------------------------------------------------------

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        deltas = _session_util.extract_json_safe_state_delta(event.actions.state_delta or {})
        key = self.key(session.app_name, session.user_id, session.id)
        message = to_message(event)
        marker = session._storage_update_marker

        def append() -> int:
            expected = int(marker) if marker is not None else self._current_seq(key, session)
            delta = state_delta(
                {**deltas["session"], UPDATE_TIME_KEY: event.timestamp},
                user=deltas["user"] or None,
                project=deltas["app"] or None,
            )
            try:
                response = self.client.append_messages(
                    key, [message], expected_last_seq=expected, state_delta=delta
                )
            except AbortedError as exc:
                if exc.reason == "LAST_SEQ_MISMATCH":
                    raise StaleSessionError(STALE_MESSAGE) from exc
                raise
            except NotFoundError as exc:
                raise SessionNotFoundError(f"Session {session.id} not found.") from exc
            return response.last_seq

        last_seq = await self._run(append)
        session._storage_update_marker = str(last_seq)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    def _current_seq(self, key: str, session: Session) -> int:
        """The revision of a session object without a marker (built by hand): the
        stored one, unless storage moved past the session's last_update_time."""
        try:
            stored = self.client.get_session(key)
        except NotFoundError as exc:
            raise SessionNotFoundError(f"Session {session.id} not found.") from exc
        updated = stored.state.fields.get(UPDATE_TIME_KEY)
        if updated is not None and updated.number_value > session.last_update_time + 1e-3:
            raise StaleSessionError(STALE_MESSAGE)
        return stored.last_seq
