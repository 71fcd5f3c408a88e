"""Background compactions in the whole-API model, on one replica or two.

A session created with a background policy is compacted by the server on its own, after
the call that grew it returned (an append or a live build: the replica that served it
compacts). The model cannot say when, so after every live build and every acknowledged
append of such a session it waits until no replica has a background compaction to come
(``Harness.settle``: the metrics' pending gauge) and asks which background checkpoints
are new (``ListCompactions``). A new one is a write of the replica that served that call
(its metrics' count of committed background compactions must have moved, and no other
replica's), recorded in the cache ledger's model before the next build, and the build
that came before it is taken again, so what the model notes as the session's input
(its replays, a fork's start) is the input after it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses
from tests.model.harness import Stub

SOFT_PERCENT = 5
"""Of the background sessions' threshold (4000 - 3900 tokens): 5 tokens. A session is
compacted again once it grew by half the gap to the threshold (~48 tokens), so an
example's sessions are compacted every few turns."""
RESERVE_TOKENS = 3900
KEEP_RECENT_TOKENS = 15
"""Short enough that an example's sessions have history to summarise."""
WAIT_SECONDS = 86_400
"""The cache-aware sessions' lifetime: never idle that long in a test, so they are
compacted only past the wait limit (halfway to the threshold)."""
MODES = ("off", "eager", "cache-aware")


def configure(policy: ses.ContextPolicy, mode: str) -> None:
    """Set the background fields of a new session's ``policy`` for ``mode``."""
    if mode == "off":
        return
    policy.reserve_tokens = RESERVE_TOKENS
    policy.keep_recent_tokens = KEEP_RECENT_TOKENS
    policy.background_compaction_percent = SOFT_PERCENT
    if mode == "cache-aware":
        policy.cache_lifetime_seconds = WAIT_SECONDS


@dataclass
class BackgroundWatch:
    """The background checkpoints seen so far, per watched session."""

    seen: dict[str, set[str]] = field(default_factory=dict)

    def watches(self, sid: str) -> bool:
        return sid in self.seen

    def watch(self, stub: Stub, sid: str) -> None:
        """Watch ``sid`` (a new session, a fork or an import of a watched one): the
        checkpoints it starts with are not new."""
        self.seen[sid] = set()
        self.new(stub, sid)

    def forget(self, sid: str) -> None:
        self.seen.pop(sid, None)

    def new(self, stub: Stub, sid: str) -> list[str]:
        """The background checkpoints of ``sid`` not seen before (now seen)."""
        page = stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid, page_size=1000))
        found = [
            c.compaction_id
            for c in page.compactions
            if c.trigger == pb.COMPACTION_TRIGGER_BACKGROUND
        ]
        fresh = [c for c in found if c not in self.seen[sid]]
        self.seen[sid].update(fresh)
        return fresh
