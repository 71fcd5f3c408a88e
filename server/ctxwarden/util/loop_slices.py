"""Work that grows with a session, done on the event loop in slices.

Every tenant's calls share one event loop. Work proportional to a session's
length (decoding 100,000 rows on a restore or replay, encoding a first native
input, rendering for a provider) is cut into slices of about ``SLICE_SECONDS``
of CPU; between two slices the loop runs whatever else is ready. A worker
thread would not do this: it takes the GIL for 5 ms at a time and the loop
waits for it at every turn. The total work is the same; no call holds the
loop for longer than a slice (docs/operations/event-loop.md).

Sliced work inside a database call (decoding the rows of a restore) does not
count toward the call's database timeout (``excluding``): the timeout is for a
database that does not answer, and the time spent decoding or letting other
calls run is neither; in one go, it could not fire during that work either.

The garbage collector is the other thing that holds the loop for long: with
the default thresholds, restoring 100,000 messages triggered four or five full
collections of the whole heap, 0.2-0.6 s each, that collected nothing (these
objects are freed by reference counting). ``tune_gc`` makes young collections
rarer and full ones far rarer (``GC_THRESHOLDS``), and freezes what the server
loaded at startup so no collection scans it again.

Slicing alone is not enough while other calls are in flight: a small call
(a GetSession) needs a dozen or more loop turns (its database round trips, its
gRPC events), and between any two of them the big call works another slice, so
the small one waited 30-100 times a slice, 0.3-1 s. So while any other call is
in flight (``call_began``/``call_ended``: every RPC and console request), a
slice is followed by a pause as long as it (the big call gets at most half of
the loop, and the small ones run their turns in the gaps); alone, it runs
flat out.

``CTXWARDEN_LOOP_SLICES=0`` turns slicing and the GC tuning off, each piece of
work running in one go (or in a worker thread where it did before): the
benchmark's "before".
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator
from contextvars import ContextVar, Token
from typing import ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")

ENABLED = os.environ.get("CTXWARDEN_LOOP_SLICES", "1") != "0"
SLICE_SECONDS = 0.003
"""CPU time worked between two yields to the event loop (a few loop turns of
this are what another call waits, so it is kept short; a yield costs ~20 us)."""
PAUSE_AFTER = int(os.environ.get("CTXWARDEN_LOOP_PAUSE_AFTER", "1"))
"""Slices a piece of work runs before it pauses for other calls (1: any work of more
than one slice); 0: it never pauses. Work that races a compare-and-set never pauses
(``racing``)."""
GC_THRESHOLDS = (10_000, 10, 100)
"""gen0 every 10,000 net allocations (CPython's default: 700), gen1 every 10 of
those, a full collection considered every 100 gen1 (default: 10)."""


def tune_gc() -> None:
    """At server startup: the thresholds above, and the startup heap frozen."""
    if not ENABLED:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


_calls_in_flight = 0
_in_call: ContextVar[bool] = ContextVar("ctxwarden_in_call", default=False)


def call_began() -> Token[bool]:
    """A call (an RPC, a console request) started in this context."""
    global _calls_in_flight
    _calls_in_flight += 1
    return _in_call.set(True)


def call_ended(token: Token[bool]) -> None:
    """The call that ``call_began`` returned ``token`` for is over."""
    global _calls_in_flight
    _calls_in_flight -= 1
    with contextlib.suppress(ValueError):  # ended in another context: nothing to undo
        _in_call.reset(token)


def others_in_flight() -> int:
    """Calls in flight other than the one this code runs in."""
    return _calls_in_flight - (1 if _in_call.get() else 0)


_racing: ContextVar[bool] = ContextVar("ctxwarden_racing", default=False)


@contextlib.contextmanager
def racing() -> Iterator[None]:
    """Work within this block races other writers' compare-and-set (a write's
    restore or reload, under the session's lock): it never pauses for other
    calls. Every pause widens the window in which another replica can move the
    session on, and three replicas writing the same sessions then starved one
    of them (each of its tries reloaded, lost the compare-and-set, reloaded
    again: ABORTED for a minute, the Galera node-kill test). Reads do not race,
    so the big reads the pause is for (first inputs, replays, the console) keep
    it."""
    token = _racing.set(True)
    try:
        yield
    finally:
        _racing.reset(token)


def in_race() -> bool:
    """Whether this code runs within ``racing``."""
    return _racing.get()


_deadline: ContextVar[asyncio.Timeout | None] = ContextVar("ctxwarden_deadline", default=None)


@contextlib.contextmanager
def excluding(deadline: asyncio.Timeout) -> Iterator[None]:
    """Sliced work within this block pushes ``deadline`` back by the time it took."""
    token = _deadline.set(deadline)
    try:
        yield
    finally:
        _deadline.reset(token)


def _postpone(since: float) -> float:
    """Move the current deadline (if any) back by the time since ``since``; returns now."""
    now = asyncio.get_running_loop().time()  # the clock deadlines are kept in
    deadline = _deadline.get()
    when = None if deadline is None else deadline.when()
    if deadline is not None and when is not None:
        deadline.reschedule(when + (now - since))
    return now


class Slicer:
    """Counts the time worked since the loop last ran; ``pause`` when it is due.

    ``sleep``: how a pause waits (tests pass one that records the delays)."""

    __slots__ = ("budget", "mark", "sleep", "slices", "started")

    def __init__(
        self,
        budget: float = SLICE_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.budget = budget
        self.sleep = sleep
        self.slices = 0
        self.started = time.perf_counter()
        self.mark = asyncio.get_running_loop().time()

    def due(self) -> bool:
        return ENABLED and time.perf_counter() - self.started >= self.budget

    async def pause(self) -> None:
        """Let the loop run everything that is ready (and poll for I/O), then go on;
        while other calls are in flight, leave the loop to them for as long as
        this slice worked."""
        # For one budget at most: a slice's wall time grows with the host's load.
        self.slices += 1
        worked = min(time.perf_counter() - self.started, self.budget)
        long_work = 0 < PAUSE_AFTER < self.slices and not in_race() and others_in_flight() > 0
        self.mark = _postpone(self.mark)  # before yielding: the deadline cannot fire now
        await self.sleep(worked if long_work else 0)
        self.mark = _postpone(self.mark)
        self.started = time.perf_counter()

    def done(self) -> None:
        """The work is over: its last slice does not count toward the deadline either."""
        self.mark = _postpone(self.mark)


async def stepped(steps: Iterable[None]) -> None:
    """Run ``steps`` (a generator that yields between pieces of its work), letting
    the loop run when a slice is due."""
    slicer = Slicer()
    for _ in steps:
        if slicer.due():
            await slicer.pause()
    slicer.done()


async def finished(steps: Generator[None, None, T]) -> T:
    """The result of ``steps`` (``core.stepwise``), run a slice at a time."""
    slicer = Slicer()
    while True:
        try:
            next(steps)
        except StopIteration as done:
            slicer.done()
            result: T = done.value
            return result
        if slicer.due():
            await slicer.pause()


def in_slices(steps: Callable[P, Generator[None, None, T]]) -> Callable[P, Awaitable[T]]:
    """The coroutine function that runs ``steps`` a slice at a time (``finished``):
    the event loop's counterpart of ``core.stepwise.in_one_go``."""

    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return await finished(steps(*args, **kwargs))

    run.__name__ = steps.__name__.removesuffix("_steps")
    run.__doc__ = steps.__doc__
    return run


async def mapped(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(x) for x in items]``, yielding to the loop every slice."""
    out: list[R] = []
    slicer = Slicer()
    for i, item in enumerate(items):
        out.append(fn(item))
        if i & 63 == 63 and slicer.due():
            await slicer.pause()
    slicer.done()
    return out
