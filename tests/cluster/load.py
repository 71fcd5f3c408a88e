"""Appends under load through several replicas, each request retried until acknowledged.

A worker appends one user message per request to the shared sessions in turn, with a
``request_id`` and a ``message_id`` of its own. It sends to its home replica first; on
UNAVAILABLE or DEADLINE_EXCEEDED (the replica's node is down, or the outcome of a commit
is unknown) it resends the very same request to the next replica, as a proxy that fails
over would; on ABORTED (the session changed under the replica three times) it resends
to the same one. So every request ends acknowledged exactly once, and the acknowledgements
are what the stored histories are checked against.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.support.builders import user
from tests.support.errors import call_error, error_info

RETRY_ON_NEXT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
GIVE_UP_AFTER = 60.0
"""Seconds one request may keep being retried before the worker reports a failure."""


@dataclass(frozen=True, slots=True)
class Ack:
    session_id: str
    message_id: str
    seq: int
    replica: int
    seconds: float
    """From the first attempt to the acknowledgement (retries included)."""


@dataclass
class Load:
    """Workers appending to ``sessions`` through ``targets`` until ``stop()``."""

    targets: list[str]
    sessions: list[str]
    workers: int
    affinity: bool = False
    """Route by session: a worker writes only the sessions of its home replica
    (session i belongs to replica i mod len(targets)); else every session everywhere."""
    acks: list[Ack] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    """What the retried attempts answered: "UNAVAILABLE", "ABORTED CONCURRENT_MODIFICATION"..."""
    failures: list[str] = field(default_factory=list)
    """Requests that could not be acknowledged (must stay empty)."""
    started: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self.started = time.monotonic()
        for w in range(self.workers):
            t = threading.Thread(target=self._work, args=(w,), name=f"load-{w}", daemon=True)
            self._threads.append(t)
            t.start()

    def stop(self) -> float:
        """Stop the workers (each finishes its request); seconds the load ran."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=GIVE_UP_AFTER + 30)
        return time.monotonic() - self.started

    def acked_by(self, replica: int) -> int:
        with self._changed:
            return sum(1 for a in self.acks if a.replica == replica)

    def wait_for(self, count: int, replica: int | None = None, timeout: float = 60.0) -> None:
        """Block until ``count`` appends were acknowledged (by ``replica``, or by any)."""

        def done() -> bool:
            if self.failures:
                return True
            if replica is None:
                return len(self.acks) >= count
            return sum(1 for a in self.acks if a.replica == replica) >= count

        with self._changed:
            if not self._changed.wait_for(done, timeout=timeout):
                raise AssertionError(
                    f"only {len(self.acks)} appends acknowledged in {timeout:g} s "
                    f"(wanted {count}{f' by replica {replica}' if replica is not None else ''}); "
                    f"errors: {dict(self.errors)}"
                )
        assert not self.failures, self.failures

    def _work(self, w: int) -> None:
        channels = [grpc.insecure_channel(t) for t in self.targets]
        stubs = [pb_grpc.ContextServiceStub(ch) for ch in channels]
        home = w % len(stubs)
        mine = self.sessions
        if self.affinity:
            mine = [s for i, s in enumerate(self.sessions) if i % len(stubs) == home]
        try:
            i = 0
            while not self._stop.is_set():
                sid = mine[(w + i) % len(mine)]
                key = f"w{w}-{i}"
                req = pb.AppendMessagesRequest(
                    session_id=sid,
                    messages=[user(f"message {key}", message_id=f"m-{key}")],
                    request_id=f"r-{key}",
                )
                self._append(stubs, home, req)
                i += 1
        finally:
            for ch in channels:
                ch.close()

    def _append(
        self, stubs: list[pb_grpc.ContextServiceStub], home: int, req: pb.AppendMessagesRequest
    ) -> None:
        began = time.monotonic()
        deadline = began + GIVE_UP_AFTER
        r = home
        while True:
            try:
                resp = stubs[r].AppendMessages(req, timeout=10)
            except grpc.RpcError as exc:
                err = call_error(exc)
                code = err.code()
                label = code.name
                if code == grpc.StatusCode.ABORTED:
                    label += f" {error_info(exc).reason}"
                with self._changed:
                    self.errors[label] += 1
                if code not in (*RETRY_ON_NEXT, grpc.StatusCode.ABORTED) or (
                    time.monotonic() > deadline
                ):
                    with self._changed:
                        self.failures.append(f"{req.request_id}: {label}: {err.details()}")
                        self._changed.notify_all()
                    return
                if code in RETRY_ON_NEXT:
                    r = (r + 1) % len(stubs)
                continue
            (stored,) = resp.messages
            own = req.messages[0].message_id
            if stored.message_id != own:  # answered with another request's message
                with self._changed:
                    self.failures.append(
                        f"{req.request_id}: answered with {stored.message_id} at seq "
                        f"{stored.seq}, not its own {own}"
                    )
                    self._changed.notify_all()
                return
            with self._changed:
                ack = Ack(
                    req.session_id, stored.message_id, stored.seq, r, time.monotonic() - began
                )
                self.acks.append(ack)
                self._changed.notify_all()
            return
