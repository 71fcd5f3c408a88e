"""``ctxwarden serve --workers N``: N server processes on one port.

The supervisor (this process) reserves the port with SO_REUSEPORT and starts N
workers (``spawn``: nothing of gRPC's state is forked), each an ordinary
``serve`` with its own event loop, hot sessions and group committer, bound to
the same port. The kernel spreads connections over them. Correctness across
workers is what already makes replicas safe: the session version
compare-and-set and the read-staleness checks.

The supervisor announces the address once every worker listens, serves the
merged metrics (observability/worker_metrics.py), restarts a worker that dies
(with a growing delay when it keeps dying), and on SIGTERM/SIGINT passes the
signal on and waits for every worker to drain. A worker that fails before it
ever listened (bad settings, an outdated schema) stops them all, with its exit
code.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import socket
import sys
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from ctxwarden.app.worker_link import NOT_SERVING, STARTING, WorkerLink
from ctxwarden.config import Settings
from ctxwarden.util import listen

log = logging.getLogger("ctxwarden")

START_TIMEOUT = 120.0
RESTART_DELAY = 0.5
RESTART_DELAY_MAX = 30.0
STABLE_SECONDS = 60.0
"""A worker up this long resets its restart delay."""


def reserve_port(address: listen.Address) -> socket.socket:
    """A bound, non-listening SO_REUSEPORT socket: it holds the port (port 0: a free
    one) while the workers bind it too; the kernel routes only to listening ones."""
    family, kind, proto, _, addr = socket.getaddrinfo(
        address.host, address.port, type=socket.SOCK_STREAM
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        raise listen.ListenError(f"cannot listen on {address.text}: {exc}") from None
    return sock


def worker_main(settings: Settings, link: WorkerLink) -> None:
    """A worker process: an ordinary serve that reports to the supervisor."""
    from ctxwarden.app.server import run

    _stop_with_parent()
    sys.exit(run(settings, link))


def _stop_with_parent() -> None:
    """Linux: SIGTERM (a graceful drain) when the supervisor dies, even by SIGKILL,
    so no orphaned worker keeps serving the port."""
    import ctypes
    import ctypes.util
    import signal

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


@dataclass
class Slot:
    index: int
    process: BaseProcess | None = None
    conn: Connection | None = None
    started: float = 0.0
    ready: bool = False
    delay: float = RESTART_DELAY
    restart_at: float | None = None
    metrics: str = ""
    console: str = ""
    restarts: int = 0


@dataclass
class Supervisor:
    settings: Settings
    count: int
    ctx: Any = field(default_factory=lambda: multiprocessing.get_context("spawn"))
    slots: list[Slot] = field(default_factory=list)
    stopping: bool = False

    def __post_init__(self) -> None:
        self.board = self.ctx.Array("b", self.count, lock=False)
        self.slots = [Slot(i) for i in range(self.count)]

    def worker_settings(self, index: int) -> Settings:
        """Worker 0 also runs the console and the retention schedule (one is enough)."""
        extra: dict[str, Any] = {"reuse_port": True}
        if self.settings.metrics_listen:
            extra["metrics_listen"] = "127.0.0.1:0"  # private: the supervisor merges them
        if index:
            extra.update(console_listen="", purge_interval_seconds=0.0)
        return replace(self.settings, **extra)

    def start(self, slot: Slot) -> None:
        ours, theirs = self.ctx.Pipe(duplex=False)
        self.board[slot.index] = STARTING
        link = WorkerLink(slot.index, self.board, theirs)
        process = self.ctx.Process(
            target=worker_main,
            args=(self.worker_settings(slot.index), link),
            name=f"ctxwarden-worker-{slot.index}",
        )
        process.start()
        theirs.close()
        slot.process, slot.conn, slot.ready = process, ours, False
        slot.started, slot.restart_at = time.monotonic(), None
        log.info("worker %d started (pid %s)", slot.index, process.pid)

    def metrics_addresses(self) -> dict[int, str]:
        return {s.index: s.metrics for s in self.slots if s.ready and s.metrics}

    def on_message(self, slot: Slot) -> None:
        assert slot.conn is not None
        try:
            message = slot.conn.recv()
        except (EOFError, OSError):
            slot.conn.close()
            slot.conn = None
            return
        _, _, _bound, slot.metrics, slot.console = message
        slot.ready = True

    def on_exit(self, slot: Slot) -> int | None:
        """A worker ended: schedule its restart; an exit code when that is fatal."""
        assert slot.process is not None
        code = slot.process.exitcode
        self.board[slot.index] = NOT_SERVING
        was_ready, slot.ready, slot.process = slot.ready, False, None
        if self.stopping:
            return None
        if not was_ready and not slot.restarts:
            log.error("worker %d exited with %s before it listened; stopping", slot.index, code)
            return code or 1
        up = time.monotonic() - slot.started
        slot.delay = (
            RESTART_DELAY if up > STABLE_SECONDS else min(slot.delay * 2, RESTART_DELAY_MAX)
        )
        slot.restart_at = time.monotonic() + slot.delay
        slot.restarts += 1
        log.error(
            "worker %d (up %.1f s) exited with %s; restarting it in %.1f s",
            slot.index,
            up,
            code,
            slot.delay,
        )
        return None

    def step(self, timeout: float) -> int | None:
        """Wait for one event (a message, an exit, a due restart); a fatal exit code."""
        waiting: dict[Any, tuple[str, Slot]] = {}
        for slot in self.slots:
            if slot.process is not None:
                waiting[slot.process.sentinel] = ("exit", slot)
            if slot.conn is not None:
                waiting[slot.conn] = ("message", slot)
        due = [s.restart_at for s in self.slots if s.restart_at is not None]
        if due:
            timeout = max(0.0, min([timeout, *(d - time.monotonic() for d in due)]))
        for handle in wait(list(waiting), timeout):
            kind, slot = waiting[handle]
            if kind == "message":
                self.on_message(slot)
            elif slot.process is not None and not slot.process.is_alive():
                code = self.on_exit(slot)
                if code is not None:
                    return code
        for slot in self.slots:
            if (
                not self.stopping
                and slot.restart_at is not None
                and slot.restart_at <= time.monotonic()
            ):
                self.start(slot)
        return None

    def all_ready(self) -> bool:
        return all(s.ready for s in self.slots)

    def live(self) -> list[BaseProcess]:
        return [s.process for s in self.slots if s.process is not None and s.process.is_alive()]

    def stop(self, grace: float) -> None:
        """SIGTERM to every worker; each drains like a single server. SIGKILL stragglers."""
        self.stopping = True
        for process in self.live():
            if process.pid is not None:
                process.terminate()
        deadline = time.monotonic() + grace + 15.0
        for process in self.live():
            process.join(max(0.1, deadline - time.monotonic()))
        for process in self.live():
            log.error("worker pid %s did not stop in time; killing it", process.pid)
            process.kill()
            process.join(5)
