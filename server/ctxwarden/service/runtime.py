"""The session runtime every use case works over: hot sessions, the repository,
version checks, the database timeout and the error map, idempotency records."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

from ctxwarden.config import Settings
from ctxwarden.core.calibration import ModelCalibration
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import (
    Aborted,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from ctxwarden.core.prices import PriceTable
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Session, effective_policy
from ctxwarden.core.tenancy import visible_id
from ctxwarden.core.validation import check_key, check_session_id
from ctxwarden.observability.metrics import ServiceMetrics
from ctxwarden.service.errors import store_error
from ctxwarden.service.hot import EvictionCause, HotSessions
from ctxwarden.service.results import IdempotencyKey
from ctxwarden.service.slices import session_context as sliced_session_context
from ctxwarden.service.tokenizer_access import tokenizer_for
from ctxwarden.store.errors import (
    ConcurrentWrite,
    QuotaExceeded,
    StoreRejected,
    StoreUnavailable,
    TooLarge,
)
from ctxwarden.store.repository import RequestRecord, RequestScope, Store, StoredRequest
from ctxwarden.util import ids, loop_slices

log = logging.getLogger(__name__)
T = TypeVar("T")

CATCH_UP_LIMIT = 1000
"""A stale copy more messages behind than this is restored instead."""
LOST_COPIES = 256
"""Copies kept for a reload after a lost compare-and-set, at most."""

GrowthHook = Callable[[SessionContext], object]
"""Told that a live session's context grew; called with the session's lock held,
so it must be cheap and must not wait (the background scheduler only queues)."""


class SessionRuntime:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        """``clock`` (seconds) times how long a verified hot copy may be served
        unchecked (``settings.max_read_staleness_seconds``); the use cases record
        into ``metrics`` (none: nothing is recorded)."""
        self.clock = clock
        self.prices: PriceTable | None = None
        """The price table (serve --price-table) the usage metrics use."""
        self.metrics = metrics if metrics is not None else ServiceMetrics()
        self.store = store
        self.settings = settings
        self.hot = HotSessions(
            settings.max_hot_sessions, settings.db_timeout_seconds, lambda: self.clock()
        )
        self.restores = 0
        self.catch_ups = 0
        """Stale copies brought up to date from their appends instead of restored."""
        self._lost: dict[str, SessionContext] = {}
        """Copies whose write lost the compare-and-set, for ``reload`` to catch up."""
        self.model_calibration = ModelCalibration()
        self.db_timeout = settings.db_timeout_seconds
        self._growth_hooks: list[GrowthHook] = []

    def on_growth(self, hook: GrowthHook) -> None:
        """Subscribe to ``grew``. The runtime knows no subscriber: SessionManager
        wires the background compaction scheduler here, so the use cases that
        grow a session never depend on the compactions it may start."""
        self._growth_hooks.append(hook)

    def grew(self, ctx: SessionContext) -> None:
        """The session's context grew (an append, a BuildModelInput): tell the
        subscribers (never for an archived session, which is read-only)."""
        if ctx.session.archived:
            return
        for hook in self._growth_hooks:
            hook(ctx)

    # -- plumbing -------------------------------------------------------------

    async def db(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run a store call within the database timeout; a lost, hung or saturated
        database is UNAVAILABLE (safe to retry), a refused write a clear error."""
        try:
            if self.db_timeout > 0:
                async with asyncio.timeout(self.db_timeout) as deadline:
                    with loop_slices.excluding(deadline):  # decoding is not waiting
                        return await op()
            return await op()
        except (StoreUnavailable, TimeoutError) as exc:
            log.warning("database unavailable: %s", exc)
            raise store_error(exc) from exc
        except (TooLarge, QuotaExceeded, StoreRejected) as exc:
            raise store_error(exc) from exc

    async def write(self, session_id: str, op: Callable[[], Awaitable[None]]) -> bool:
        """Run a write that compares-and-sets the session (within ``db``).

        False when the compare-and-set lost: another writer moved the session on,
        and the in-memory copy is dropped (the caller reloads or gives up). When
        the outcome cannot be known (the database was lost; the caller was
        cancelled, yet the write goes on) the copy is dropped too, so the next
        call restores what was stored. DuplicateKey is the caller's to answer."""
        try:
            await self.db(op)
        except ConcurrentWrite:
            stale = self.hot.get(session_id)
            self.hot.evict(session_id)
            if stale is not None:
                if len(self._lost) >= LOST_COPIES:  # not reloaded (the caller gave up)
                    self._lost.clear()
                self._lost[session_id] = stale
            return False
        except (Unavailable, asyncio.CancelledError):
            self.hot.evict(session_id)
            raise
        return True

    async def context(self, session_id: str, *, verify: bool = True) -> SessionContext:
        """The hot session, restored from the database when it is not in memory.

        ``verify``: compare the copy's version with the stored one first (another
        replica may have changed the session); a stale copy is reloaded."""
        check_session_id(session_id)
        ctx = self.hot.get(session_id)
        if ctx is not None and (not verify or await self.current(ctx)):
            return ctx
        async with self.hot.lock(session_id):
            return await self._load(session_id, verify=verify)

    async def current(self, ctx: SessionContext) -> bool:
        """Whether the in-memory copy is the stored session's current version
        (checked in the database unless it was within the staleness bound)."""
        now = self.clock()
        if now - ctx.checked_at < self.settings.max_read_staleness_seconds:
            return True
        sid = ctx.session.session_id
        stored = await self.db(lambda: self.store.sessions.version(sid))
        if stored is None or stored.deleted:
            self.hot.evict(sid, EvictionCause.DELETED)
            raise self.not_found(sid)
        if stored.version != ctx.session.version:
            return False
        ctx.checked_at = now
        return True

    async def context_locked(self, session_id: str, *, verify: bool = False) -> SessionContext:
        """Like ``context``, for a caller that already holds the session's lock to
        write: an archived session is refused (FAILED_PRECONDITION). A restore
        here races other writers, so it never pauses for other calls."""
        with loop_slices.racing():
            ctx = await self._load(session_id, verify=verify)
        if ctx.session.archived:
            raise self.archived(session_id)
        return ctx

    async def _load(self, session_id: str, *, verify: bool) -> SessionContext:
        """The hot copy (checked when ``verify``; a stale one caught up), else the
        restored session."""
        check_session_id(session_id)
        ctx = self.hot.get(session_id)
        if ctx is not None:
            if not verify or await self.current(ctx):
                return ctx
            self.hot.evict(session_id)
            if await self.caught_up(ctx):
                return ctx
        return await self.restore(session_id)

    async def caught_up(self, ctx: SessionContext) -> bool:
        """Bring a stale copy up to date by reading only what was appended since
        its version (O(appended)), when nothing but appends changed the session;
        False: it must be restored. A restore takes O(kept), and a replica whose
        every try reloaded a long session while others appended to it lost every
        compare-and-set (docs/operations.md, Galera)."""
        s = ctx.session
        if s.archived:
            return False
        sid = s.session_id
        await self.settled(sid)
        tail = await self.db(
            lambda: self.store.load_tail(sid, s.version, s.last_seq, CATCH_UP_LIMIT)
        )
        if tail is None:
            return False
        ctx.install_appended(tail.session, tail.appended)
        self.catch_ups += 1
        ctx.checked_at = self.clock()
        self.hot.put(sid, ctx)
        return True

    async def restore(self, session_id: str) -> SessionContext:
        """Rebuild a session in memory from the database and keep it hot.

        Reads the session row, its newest valid checkpoint and the active
        messages from that checkpoint's first_kept_seq on (Store.load_snapshot):
        O(kept), whatever the length of the history. Caller holds the lock.
        An archived session is returned for reading but not kept in memory."""
        await self.settled(session_id)
        snapshot = await self.db(lambda: self.store.load_snapshot(session_id))
        if snapshot is None or snapshot.session.deleted:
            raise self.not_found(session_id)
        s = snapshot.session
        tokenizer = await tokenizer_for(effective_policy(s.policy, s.model).tokenizer)

        # Built a slice at a time: a long session does not hold the event loop.
        ctx = await sliced_session_context(s, snapshot.checkpoint, snapshot.kept, tokenizer)
        self.restores += 1
        ctx.checked_at = self.clock()
        if not s.archived:
            self.hot.put(session_id, ctx)
        return ctx

    @staticmethod
    def not_found(session_id: str) -> NotFound:
        shown = visible_id(session_id)
        return NotFound(
            f"session {shown!r} does not exist (or was deleted)",
            reason=ErrorReason.SESSION_NOT_FOUND,
            metadata={"session_id": shown},
        )

    @staticmethod
    def archived(session_id: str) -> FailedPrecondition:
        shown = visible_id(session_id)
        return FailedPrecondition(
            f"session {shown!r} is archived and read-only; call UnarchiveSession to write to it",
            reason=ErrorReason.SESSION_ARCHIVED,
            metadata={"session_id": shown},
        )

    def concurrent(self, session_id: str) -> Aborted:
        self.hot.evict(session_id)
        shown = visible_id(session_id)
        return Aborted(
            f"session {shown!r} was changed by another writer; reload it and retry",
            reason=ErrorReason.CONCURRENT_MODIFICATION,
            metadata={"session_id": shown},
        )

    async def replay(self, scope: RequestScope, key: IdempotencyKey | None) -> StoredRequest | None:
        if key is None:
            return None
        # Checked here too: every request-log lookup passes this way, and a key the
        # columns cannot hold must be INVALID_KEY, never a database error.
        check_key(key.request_id, "request_id")
        stored = await self.db(lambda: self.store.requests.get(scope, key.request_id))
        if stored is not None and stored.request_hash != key.request_hash:
            raise InvalidArgument(
                f"request_id {key.request_id!r} was already used for a different request",
                reason=ErrorReason.REQUEST_ID_REUSED,
                field="request_id",
            )
        return stored

    async def taken_id(
        self, scope: RequestScope, key: IdempotencyKey | None, session_id: str
    ) -> Session:
        """A create (or fork) found ``session_id`` taken: the session an applied try
        with ``key`` made, else ALREADY_EXISTS."""
        stored = await self.replay(scope, key)
        if stored is not None:
            return await self.get_session(str(stored.outcome["session_id"]))
        raise AlreadyExists(
            f"session {visible_id(session_id)!r} already exists",
            reason=ErrorReason.SESSION_ALREADY_EXISTS,
            metadata={"session_id": visible_id(session_id)},
        )

    def install_created(self, ctx: SessionContext, version: int) -> Session:
        """A new session is stored at ``version`` (after a deleted one's with its
        ID): its context becomes the hot copy."""
        session = ctx.session = replace(ctx.session, version=version)
        ctx.checked_at = self.clock()
        self.hot.put(session.session_id, ctx)
        return session

    @staticmethod
    def record(
        scope: RequestScope, key: IdempotencyKey | None, outcome: dict[str, Any]
    ) -> RequestRecord | None:
        if key is None:
            return None
        return RequestRecord(scope, key.request_id, key.request_hash, outcome, ids.now_us())

    async def get_session(self, session_id: str) -> Session:
        check_session_id(session_id)
        ctx = self.hot.get(session_id)
        if ctx is not None and await self.current(ctx):
            return ctx.session
        await self.settled(session_id)
        session = await self.db(lambda: self.store.sessions.get(session_id))
        if session is None or session.deleted:
            raise self.not_found(session_id)
        return session

    async def settled(self, session_id: str) -> None:
        """Before reading the session from the database: wait for the outcome of an
        append of it whose caller went away (a cancelled stream goes on writing), so
        that what is read is not older than what this process wrote. Otherwise the
        copy restored would miss that append, and the next append would lose its
        compare-and-set."""
        if self.store.unsettled(session_id):
            await self.db(lambda: self.store.settled(session_id))

    async def reload(self, session_id: str) -> SessionContext:
        """Bring the stale copy up to date, else restore the session (caller holds
        the lock)."""
        stale = self._lost.pop(session_id, None) or self.hot.get(session_id)
        self.hot.evict(session_id)
        if stale is not None:
            with loop_slices.racing():
                caught = await self.caught_up(stale)
            if caught:
                return stale
        return await self.context_locked(session_id)
