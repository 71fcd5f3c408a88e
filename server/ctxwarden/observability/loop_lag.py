"""Event-loop lag, measured all the time, and the call that held the loop.

Every tenant's calls run on one asyncio event loop; a callback that holds it
(CPU work on a big session) delays all of them. Two parts watch for that:

- a task on the loop sleeps ``interval`` s again and again; how late it wakes
  is the loop's lag, observed into ``ctxwarden_event_loop_lag_seconds``;
- a watchdog thread checks that the task keeps waking. While the loop is held
  past ``slow`` s it looks at the loop thread's stack once and notes the call
  (the gRPC method from the RPC observer's frame, or the console route) and
  the innermost ctxwarden frame. When the loop runs again, the task logs one
  WARNING line naming them: "event loop held for 1.9 s by gRPC
  ctxwarden.v1.ContextService/BuildModelInput (ctxwarden/api/...:123 fn)".

The thread only reads a timestamp and, rarely, a stack: it costs nothing
measurable. It needs the GIL to look, which the loop thread releases every
few milliseconds even while it computes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from prometheus_client import CollectorRegistry, Histogram

log = logging.getLogger(__name__)

LAG_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
INTERVAL_SECONDS = 0.1
"""How often the lag is sampled."""
SLOW_SECONDS = 0.2
"""A hold at least this long is logged, naming the call."""

_INTERCEPTOR = "observability/interceptor.py"
_CONSOLE = "console/web.py"
_SELF = "observability/loop_lag.py"


def _call_of(frame: FrameType) -> str:
    """The call a frame serves, if it is the RPC observer's or a console route's."""
    path = frame.f_code.co_filename.replace("\\", "/")
    if path.endswith(_INTERCEPTOR):
        method = frame.f_locals.get("method")
        return f"gRPC {method}" if isinstance(method, str) else ""
    if path.endswith(_CONSOLE):
        request = frame.f_locals.get("request")
        url = getattr(request, "url", None)
        if url is not None:
            return f"console {getattr(request, 'method', '')} {url.path}"
    return ""


def describe(frame: FrameType | None) -> tuple[str, str]:
    """(call, where) for a stack: the call it serves ("" if none is known) and its
    innermost ctxwarden frame as ``path:line function``."""
    call = where = ""
    while frame is not None:
        code = frame.f_code
        path = code.co_filename.replace("\\", "/")
        if not where and "/ctxwarden/" in path and not path.endswith(_SELF):
            where = f"ctxwarden/{path.rpartition('/ctxwarden/')[2]}:{frame.f_lineno} {code.co_name}"
        if not call:
            call = _call_of(frame)
        frame = frame.f_back
    return call, where


class LoopLag:
    """Samples the running loop's lag; names the call behind a slow hold."""

    def __init__(
        self,
        registry: CollectorRegistry | None,
        *,
        interval: float = INTERVAL_SECONDS,
        slow: float = SLOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.slow = slow
        self.clock = clock
        self.histogram = (
            None
            if registry is None
            else Histogram(
                "ctxwarden_event_loop_lag_seconds",
                "How late the event loop ran a timer (sampled every 0.1 s); a lag is "
                "time every call on this server waited",
                buckets=LAG_BUCKETS,
                registry=registry,
            )
        )
        self.beat = clock()
        """When the sampling task last ran (the loop was free then)."""
        self.culprit: tuple[float, str, str] | None = None
        """(beat, call, where) the watchdog saw holding the loop after that beat."""
        self._loop_thread = threading.get_ident()
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        """Start sampling on the running loop, and the watchdog thread."""
        self._loop_thread = threading.get_ident()
        self.beat = self.clock()
        self._task = asyncio.create_task(self._sample(), name="ctxwarden-loop-lag")
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._watch, name="ctxwarden-loop-watch", daemon=True
        )
        self._thread.start()

    async def stop(self) -> None:
        self._stop.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join, 1.0)

    async def _sample(self) -> None:
        while True:
            self.beat = started = self.clock()
            cpu = time.thread_time()
            await asyncio.sleep(self.interval)
            lag = max(0.0, self.clock() - started - self.interval)
            self.observe(lag, started, time.thread_time() - cpu)

    def observe(self, lag: float, beat: float, cpu: float | None = None) -> None:
        """Record one lag sample (the loop was free at ``beat``, then ``lag`` s late;
        the loop thread used ``cpu`` s of CPU meanwhile, when known)."""
        if self.histogram is not None:
            self.histogram.observe(lag)
        if lag < self.slow:
            return
        culprit, self.culprit = self.culprit, None
        # Little CPU in a long hold: the host gave the process no core (its load).
        on_cpu = "" if cpu is None else f", {cpu:.2f} s of CPU in that time"
        if culprit is not None and culprit[0] == beat:
            _, call, where = culprit
            log.warning(
                "event loop held for %.2f s by %s (%s%s): every other call waited",
                lag,
                call or "no known call",
                where or "outside ctxwarden code",
                on_cpu,
            )
        else:
            log.warning("event loop held for %.2f s%s: every other call waited", lag, on_cpu)

    def check(self, now: float) -> None:
        """The watchdog's look: if the loop is held past ``slow``, note who holds it."""
        beat = self.beat
        if now - beat - self.interval < self.slow:
            return
        if self.culprit is not None and self.culprit[0] == beat:
            return  # seen already
        call, where = describe(sys._current_frames().get(self._loop_thread))
        self.culprit = (beat, call, where)

    def _watch(self) -> None:
        step = max(0.01, self.slow / 4)
        while not self._stop.wait(step):
            try:
                self.check(self.clock())
            except Exception:  # never let the watchdog die
                log.debug("loop watchdog failed", exc_info=True)
