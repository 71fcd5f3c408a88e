"""Holding an async method at its next call, for tests that act while it waits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


class Held:
    """Wraps ``owner.name`` (an async method) so that its next call waits for
    ``release()`` after telling ``entered``."""

    def __init__(self, owner: Any, name: str) -> None:
        self.entered = asyncio.Event()
        self._go = asyncio.Event()
        real: Callable[..., Awaitable[Any]] = getattr(owner, name)

        async def held(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            await self._go.wait()
            setattr(owner, name, real)
            return await real(*args, **kwargs)

        setattr(owner, name, held)

    def release(self) -> None:
        self._go.set()


class Watched:
    """Wraps ``owner.name`` (an async method) so that ``entered`` tells when it was
    first called; every call goes through unchanged."""

    def __init__(self, owner: Any, name: str) -> None:
        self.entered = asyncio.Event()
        real: Callable[..., Awaitable[Any]] = getattr(owner, name)

        async def watched(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            return await real(*args, **kwargs)

        setattr(owner, name, watched)
