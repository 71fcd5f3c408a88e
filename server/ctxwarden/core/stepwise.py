"""Work that grows with a session, written as steps.

A function of this kind is a generator that yields ``None`` between two pieces
of its work and returns its result: ``finish`` runs it in one go (tests, tools,
small inputs), the service runs it on the event loop a slice at a time
(``ctxwarden.util.loop_slices.finished``), so no call holds the loop for as long
as the work takes (docs/operations/event-loop.md). ``core`` stays pure: a step
is just a place where the caller may let other work run.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import ParamSpec, TypeAlias, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

Steps: TypeAlias = Generator[None, None, T]
"""Yields between pieces of work; returns the result."""

EVERY = 64
"""Items (messages, serialised parts) a loop handles between two steps."""


def finish(steps: Steps[T]) -> T:
    """Run ``steps`` to the end in one go; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: T = done.value
            return result


def in_one_go(steps: Callable[P, Steps[T]]) -> Callable[P, T]:
    """The function that runs ``steps`` to the end in one go (``finish``)."""

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return finish(steps(*args, **kwargs))

    run.__name__ = steps.__name__.removesuffix("_steps")
    run.__doc__ = steps.__doc__
    return run
