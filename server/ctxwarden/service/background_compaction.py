"""Background compaction: compact a session before the agent has to wait for it.

A session whose policy sets ``background_compaction_percent`` and whose context
grows past that soft threshold (seen by appends and BuildModelInput) is queued
here; up to ``--background-compactions`` workers compact queued sessions with
the server's summariser through ``Compactor.compact``. That path holds the
session lock only to plan and to commit, and commits against the plan's base
checkpoint (messages appended meanwhile stay kept, a compaction or rollback in
between makes the plan stale), so the agent's appends and BuildModelInput go on
while the summariser runs.

With ``cache_lifetime_seconds`` in the policy, a session past the soft
threshold may instead wait (``core.background.background_moment``): each
growth notice (an append, a BuildModelInput) marks it active, and one timer per
waiting session queues it once it has been idle for the cache lifetime (its
provider cache has expired anyway), unless it grew past the wait limit first
(then it is queued at once) or no longer needs it (a compaction or a rollback
came first). Waiting sessions are not ``pending``: ``waiting`` tells them.

One job per session at a time; a failed attempt is retried after a doubling
backoff up to ``--background-max-attempts``. Shutdown drops queued jobs (they
changed nothing; the next append queues them again) and gives in-flight ones
the grace period before cancelling them: a commit is one transaction, so a
cancelled job leaves the previous checkpoint in effect and loses nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from ctxwarden.core.background import (
    Moment,
    background_moment,
    idle_remaining,
    retry_delay,
    wants_background_compaction,
)
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import Aborted, FailedPrecondition, NotFound, Unavailable
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import CompactionTrigger
from ctxwarden.observability.background_metrics import BackgroundRecorder
from ctxwarden.service.compaction import Compactor
from ctxwarden.service.runtime import SessionRuntime

log = logging.getLogger(__name__)

_RETRY = "retry"


class BackgroundCompactions:
    """The scheduler: a queue of sessions, a fixed pool of workers, retry timers.

    ``sleep`` waits out a retry's backoff and an idle timer, ``clock``
    (seconds; default: the runtime's) tells how long a session has been idle;
    tests pass ones they control."""

    def __init__(
        self,
        rt: SessionRuntime,
        compactor: Compactor,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] | None = None,
    ) -> None:
        s = rt.settings
        self.rt = rt
        self.compactor = compactor
        self.sleep = sleep
        self.clock: Callable[[], float] = clock or (lambda: rt.clock())
        self.workers = max(0, s.background_compactions)
        self.max_attempts = max(1, s.background_max_attempts)
        self.retry_base = s.background_retry_seconds
        self.retry_max = s.background_retry_max_seconds
        self.metrics = BackgroundRecorder(lambda: rt.metrics.background())
        self._queue: asyncio.Queue[tuple[str, int, bool]] = asyncio.Queue()
        """(session, attempt, whether to check first that it is still wanted)."""
        self._pending: set[str] = set()
        """Sessions queued, compacting or waiting to retry: one job each."""
        self._idle = asyncio.Event()
        self._idle.set()
        self._running: dict[str, asyncio.Future[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._timers: set[asyncio.Task[None]] = set()
        self._waiting: dict[str, tuple[float, int]] = {}
        """Sessions waiting for an idle gap: (last active, cache lifetime)."""
        self._idle_timers: dict[str, asyncio.Task[None]] = {}
        self.queued_after_idle = 0
        """Sessions queued because their cache lifetime passed idle (for tests and benches)."""
        self._started = False
        self._closed = False

    @property
    def enabled(self) -> bool:
        return (
            self._started
            and not self._closed
            and self.workers > 0
            and self.compactor.summarizer is not None
        )

    def start(self) -> None:
        """Start the workers (in the server's event loop)."""
        if self._started or self._closed:
            return
        self._started = True
        if self.workers > 0 and self.compactor.summarizer is not None:
            self._tasks = [
                asyncio.create_task(self._work(), name=f"background-compaction-{i}")
                for i in range(self.workers)
            ]

    # -- what the use cases call ---------------------------------------------------

    def offer(self, ctx: SessionContext) -> bool:
        """Queue the session if its context passed the soft threshold, or let it
        wait for an idle gap (cheap when neither). Every call marks the session
        active. True: queued now. It needs no lock: it does not await, so it reads
        the copy as one version (a build calls it without the lock, a write with)."""
        percent = ctx.policy.background_compaction_percent
        sid = ctx.session.session_id
        if percent <= 0 or not self.enabled:
            self._stop_waiting(sid)  # the policy was changed meanwhile
            return False
        if sid in self._pending:
            return False
        after = ctx.checkpoint.tokens_after if ctx.checkpoint else None
        lifetime = ctx.session.policy.cache_lifetime_seconds
        moment = background_moment(ctx.view_tokens(), ctx.threshold(), percent, after, lifetime)
        if moment is Moment.WHEN_IDLE:
            self._wait_for_idle(sid, lifetime)
            return False
        self._stop_waiting(sid)
        if moment is Moment.NOT_YET:
            return False
        self._enqueue(sid, 1, recheck=False)
        return True

    def _enqueue(self, sid: str, attempt: int, *, recheck: bool) -> None:
        self._pending.add(sid)
        self._idle.clear()
        self._queue.put_nowait((sid, attempt, recheck))
        self._levels()

    def waiting(self, session_id: str) -> bool:
        """Whether the session waits for an idle gap of its cache lifetime."""
        return session_id in self._waiting

    def _wait_for_idle(self, sid: str, lifetime: int) -> None:
        self._waiting[sid] = (self.clock(), lifetime)
        if sid not in self._idle_timers:
            timer = asyncio.create_task(self._when_idle(sid), name=f"cache-idle-{sid}")
            self._idle_timers[sid] = timer
            self._levels()

    def _stop_waiting(self, sid: str) -> None:
        if self._waiting.pop(sid, None) is not None:
            timer = self._idle_timers.pop(sid, None)
            if timer is not None:
                timer.cancel()
            self._levels()

    async def _when_idle(self, sid: str) -> None:
        """Sleep until the session has been idle for its cache lifetime (each
        activity moves that moment on), then queue it, checked first."""
        try:
            while (entry := self._waiting.get(sid)) is not None:
                remaining = idle_remaining(entry[0], self.clock(), entry[1])
                if remaining <= 0:
                    break
                await self.sleep(remaining)
        finally:
            if self._idle_timers.get(sid) is asyncio.current_task():
                del self._idle_timers[sid]
        waited = self._waiting.pop(sid, None) is not None
        if waited and not self._closed and sid not in self._pending:
            self.queued_after_idle += 1
            self.metrics.after_idle()
            self._enqueue(sid, 1, recheck=True)  # updates the levels
        elif waited:
            self._levels()

    def pending(self, session_id: str) -> bool:
        """Whether a job for the session is queued, running or waiting to retry."""
        return session_id in self._pending

    async def idle(self) -> None:
        """Wait until no job is queued, running or waiting to retry."""
        await self._idle.wait()

    def _done(self, sid: str) -> None:
        self._pending.discard(sid)
        if not self._pending:
            self._idle.set()
        self._levels()

    async def wait_running(self, session_id: str) -> bool:
        """Wait for the session's attempt that is summarising now, if any (the
        caller is about to compact anyway: that attempt is the same work, begun
        earlier). Never cancels it. True: there was one."""
        running = self._running.get(session_id)
        if running is None:
            return False
        await asyncio.shield(running)
        return True

    # -- the workers -----------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            sid, attempt, recheck = await self._queue.get()
            self._levels()
            try:
                await self._job(sid, attempt, recheck)
            except Exception:  # a worker must outlive any one job
                log.exception("background compaction of session %s failed", sid)
                self._done(sid)

    async def _job(self, sid: str, attempt: int, recheck: bool) -> None:
        if (attempt > 1 or recheck) and not await self._still_wanted(sid):
            self.metrics.superseded()
            self._done(sid)
            return
        result = await self._attempt(sid)
        if result != _RETRY:
            self._done(sid)
            return
        if attempt >= self.max_attempts or self._closed:
            log.warning(
                "background compaction of session %s failed %d times; giving up until "
                "the session grows again",
                sid,
                attempt,
            )
            self.metrics.gave_up()
            self._done(sid)
            return
        self.metrics.retried()
        delay = retry_delay(attempt, self.retry_base, self.retry_max)
        timer = asyncio.create_task(self._retry_later(sid, attempt + 1, delay))
        self._timers.add(timer)
        timer.add_done_callback(self._timers.discard)

    async def _retry_later(self, sid: str, attempt: int, delay: float) -> None:
        try:
            await self.sleep(delay)
        except asyncio.CancelledError:
            self._done(sid)
            raise
        if self._closed:
            self._done(sid)
            return
        self._queue.put_nowait((sid, attempt, True))
        self._levels()

    async def _still_wanted(self, sid: str) -> bool:
        """Before a retry or after an idle wait: does the session still need it
        (another compaction, a rollback or a deletion may have come first)?"""
        try:
            ctx = await self.rt.context(sid)
        except (NotFound, Unavailable):
            return False
        after = ctx.checkpoint.tokens_after if ctx.checkpoint else None
        return wants_background_compaction(
            ctx.view_tokens(), ctx.threshold(), ctx.policy.background_compaction_percent, after
        )

    async def _attempt(self, sid: str) -> str:
        """One compaction: succeeded, superseded, failed or retry."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._running[sid] = done
        self._levels()
        self.metrics.started()
        start = time.perf_counter()
        result = "cancelled"
        try:
            result = await self._compact(sid)
            return result
        finally:
            del self._running[sid]
            done.set_result(None)
            self.metrics.finished(result, time.perf_counter() - start)
            self._levels()

    async def _compact(self, sid: str) -> str:
        try:
            await self.compactor.compact(sid, "", 0, None, CompactionTrigger.BACKGROUND)
        except NotFound:
            return "superseded"
        except Aborted as exc:
            if exc.reason == ErrorReason.PLAN_STALE:
                return "superseded"  # another compaction or a rollback came first
            log.info("background compaction of session %s will be retried: %s", sid, exc)
            return _RETRY
        except FailedPrecondition as exc:
            if exc.reason in (ErrorReason.NOTHING_TO_COMPACT, ErrorReason.SESSION_ARCHIVED):
                return "superseded"  # archived meanwhile: read-only now
            log.warning("background compaction of session %s failed: %s", sid, exc)
            return "failed"  # the summariser rejected the request: a retry would too
        except Unavailable as exc:
            log.info("background compaction of session %s will be retried: %s", sid, exc)
            return _RETRY
        except Exception:
            log.exception("background compaction of session %s failed; will retry", sid)
            return _RETRY
        return "succeeded"

    def _levels(self) -> None:
        self.metrics.levels(
            len(self._running), self._queue.qsize(), len(self._waiting), len(self._pending)
        )

    # -- shutdown ----------------------------------------------------------------------

    async def close(self, grace_seconds: float) -> None:
        """Stop: drop queued jobs and retry timers, give in-flight compactions up
        to ``grace_seconds`` to commit, then cancel them (nothing is lost: a
        cancelled compaction commits nothing)."""
        self._closed = True
        for timer in [*self._timers, *self._idle_timers.values()]:
            timer.cancel()
        self._waiting.clear()
        while not self._queue.empty():
            sid, _, _ = self._queue.get_nowait()
            self._done(sid)
        running = list(self._running.values())
        if running and grace_seconds > 0:
            await asyncio.wait(running, timeout=grace_seconds)
        for task in self._tasks:
            task.cancel()
        idle_timers = list(self._idle_timers.values())
        await asyncio.gather(*self._tasks, *self._timers, *idle_timers, return_exceptions=True)
        self._idle_timers.clear()
        self._tasks = []
        self._pending.clear()
        self._idle.set()
        self._levels()
