"""Where the cache ledger's state lives, per replica (see ``cache``): the model of each
session's stored ledger and version, each replica's hot copy, and each replica's previous
input per (session, format); and the checks of every live build against it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m
from tests.model.cache import Expected, Ledger, R, Reason, expected, input_tokens

NATIVE = pb.MODEL_INPUT_FORMAT_NATIVE
SYNTHETIC = "ctxwarden.synthetic"
EXPLAINED_BY: dict[Reason, str] = {
    R.CACHE_BREAK_REASON_COMPACTION: "compaction",
    R.CACHE_BREAK_REASON_CLEARING: "compaction",
    R.CACHE_BREAK_REASON_ROLLBACK: "rollback",
    R.CACHE_BREAK_REASON_MEMORY_REFRESH: "memory",
    R.CACHE_BREAK_REASON_MODEL: "model",
}
"""A shrunk prefix's reason, and the step of the model that must have come before it."""
KEEPS_PREFIX = {"append", "labels", "archive", "handover", "tokenizer"}
"""Events after which the previous input must be a prefix of the next (the stable-prefix
promise); an append may only answer a call the view had answered with a synthetic result.
A new tokenizer counts the same bytes anew: all of them are shared (in the new counts)."""
DEFAULT_MODEL = "gpt-4o"


@dataclass
class Copy:
    ledger: Ledger
    version: int


@dataclass
class Prev:
    mi: pb.ModelInput
    events: int
    """How many of the session's events had happened when it was built."""
    model: str
    """The session's model then (a ModelInput does not name it)."""


@dataclass
class CacheModel:
    stored: dict[str, Ledger] = field(default_factory=dict)
    version: dict[str, int] = field(default_factory=dict)
    events: dict[str, list[str]] = field(default_factory=dict)
    """Per session, what changed it, in order: append, rollback, compaction, memory,
    labels, archive, handover."""
    archived: set[str] = field(default_factory=set)
    models: dict[str, str] = field(default_factory=dict)
    copies: dict[tuple[int, str], Copy] = field(default_factory=dict)
    prev: dict[tuple[int, str, int], Prev] = field(default_factory=dict)
    uncertain: set[tuple[int, str, int]] = field(default_factory=set)
    """Previous inputs a replica may have dropped (``maybe_dropped``)."""
    latest: dict[str, pb.ModelInput] = field(default_factory=dict)
    """The session's last live input, from any replica (every build reads the current
    version: the servers run with no read staleness)."""

    # -- what the test did ------------------------------------------------------------

    def created(
        self,
        sid: str,
        replica: int | None,
        ledger: Ledger | None = None,
        model: str = DEFAULT_MODEL,
    ) -> None:
        """A new session (held by ``replica`` when it created it; an import is not)."""
        self.stored[sid] = ledger.copy() if ledger is not None else Ledger()
        self.models[sid] = model
        self.version[sid] = 0
        self.events[sid] = []
        if replica is not None:
            self.copies[(replica, sid)] = Copy(Ledger(), 0)

    def access(self, replica: int, sid: str) -> Copy | None:
        """A call that reads the session on ``replica``: a stale copy is dropped and the
        session restored (not kept when archived)."""
        c = self.copies.get((replica, sid))
        if c is not None and c.version != self.version[sid]:
            self.dropped(replica, sid)
            c = None
        if c is None and sid not in self.archived:
            c = self.copies[(replica, sid)] = Copy(self.stored[sid].copy(), self.version[sid])
        return c

    def dropped(self, replica: int, sid: str) -> None:
        """The replica's copy left memory, and with it its previous inputs' shapes."""
        self.copies.pop((replica, sid), None)
        for key in [k for k in self.prev if k[:2] == (replica, sid)]:
            del self.prev[key]
            self.uncertain.discard(key)

    def maybe_dropped(self, replica: int, sid: str) -> list[int]:
        """A call cancelled on ``replica`` while its write was in flight: the replica
        dropped its copy (it could not know the outcome) or had answered first and kept
        it. The formats whose previous input is now uncertain are returned: the next
        build of one of them, with a report, tells which (``built``)."""
        keys = {k for k in self.prev if k[:2] == (replica, sid)}
        self.uncertain |= keys
        return sorted(k[2] for k in keys)

    def _resolve(self, replica: int, sid: str, fmt: int, mi: pb.ModelInput, report: bool) -> None:
        """The first build of an uncertain format: FIRST_INPUT where a previous input
        was, so the replica dropped its copy (and every previous input with it)."""
        assert report, "an uncertain previous input is resolved by a build with a report"
        keys = {k for k in self.uncertain if k[:2] == (replica, sid)}
        self.uncertain -= keys
        if mi.cache_prefix.break_reason == R.CACHE_BREAK_REASON_FIRST_INPUT:
            self.copies.pop((replica, sid), None)
            for key in keys:
                self.prev.pop(key, None)

    def wrote(
        self,
        replica: int,
        sid: str,
        event: str,
        usages: Iterable[m.Usage] = (),
        ledger: bool = True,
    ) -> None:
        """A write on ``replica``: it stores the copy's ledger (unless ``ledger`` is
        False: a memory refresh), and every other replica's copy is stale."""
        c = self.access(replica, sid)
        assert c is not None, f"a write to archived {sid}"
        for u in usages:
            c.ledger.paired(u)
        if ledger:
            self.stored[sid] = c.ledger.copy()
        self.bumped(sid, event)
        c.version = self.version[sid]

    def bumped(self, sid: str, event: str) -> None:
        self.version[sid] += 1
        self.events[sid].append(event)

    def set_archived(self, replica: int, sid: str, archived: bool) -> None:
        self.bumped(sid, "archive")
        if archived:
            self.archived.add(sid)
            self.dropped(replica, sid)
        else:
            self.archived.discard(sid)

    def restarted(self) -> None:
        self.copies.clear()
        self.prev.clear()
        self.uncertain.clear()

    def reported(self, replica: int, sid: str) -> Ledger:
        """What GetUsage on ``replica`` shows: its current copy, else the stored row."""
        c = self.copies.get((replica, sid))
        if c is not None and c.version == self.version[sid]:
            return c.ledger
        return self.stored[sid]

    # -- what a build must report -----------------------------------------------------

    def built(self, replica: int, sid: str, fmt: int, mi: pb.ModelInput, report: bool) -> list[str]:
        """Check a live build against the previous one on its replica, then count it."""
        fmt = fmt or NATIVE
        key = (replica, sid, fmt)
        if key in self.uncertain:
            self._resolve(replica, sid, fmt, mi, report)
        c = self.access(replica, sid)
        before = self.prev.get(key)
        model = self.models[sid]
        self.prev[key] = Prev(mi, len(self.events[sid]), model)
        self.latest[sid] = mi
        if before is None:
            want = pb.CachePrefix(
                input_tokens=input_tokens(mi), break_reason=R.CACHE_BREAK_REASON_FIRST_INPUT
            )
            problems: list[str] = []
        else:
            e = expected(before.mi, mi, fmt == NATIVE, before.model == model)
            want = pb.CachePrefix(
                shared_tokens=e.shared_tokens,
                shared_bytes=e.shared_bytes or 0,
                input_tokens=input_tokens(mi),
                previous_input_tokens=e.previous_tokens,
                break_reason=e.reason,
            )
            problems = self._explained(sid, before, e, want)
        if not report:
            if mi.HasField("cache_prefix"):
                problems.append("cache_prefix without report_cache_prefix")
        else:
            got = mi.cache_prefix
            if before is not None and e.shared_bytes is None:
                problems += _rendered_prefix(before.mi, mi, got.shared_bytes)
                want.shared_bytes = got.shared_bytes
            if got != want:
                problems.append(f"cache_prefix {_text(got)} != expected {_text(want)}")
            if got.shared_tokens > min(got.input_tokens, got.previous_input_tokens):
                problems.append(f"a prefix longer than an input: {_text(got)}")
        if c is not None:
            c.ledger.built(want)
        return [f"{sid} replica {replica} format {fmt}: {p}" for p in problems]

    def _explained(self, sid: str, before: Prev, e: Expected, want: pb.CachePrefix) -> list[str]:
        """The prefix shrank only for what the model did in between (and never when it
        only appended: the stable-prefix promise)."""
        since = set(self.events[sid][before.events :])
        synthetic = any(SYNTHETIC in x.metadata for x in before.mi.messages)
        if since <= KEEPS_PREFIX and not synthetic:
            if e.reason or want.shared_tokens != want.previous_input_tokens:
                return [f"only {sorted(since)} since, yet {_text(want)}"]
            return []
        need = EXPLAINED_BY.get(e.reason)
        if need is not None and need not in since:
            return [f"break {R.Name(e.reason)} with only {sorted(since)} since"]
        if e.reason == R.CACHE_BREAK_REASON_VIEW_CHANGE and (e.gone is None or e.gone.seq):
            return [f"view change of a stored message: {e.gone}"]
        return []


def _rendered_prefix(prev: pb.ModelInput, cur: pb.ModelInput, n: int) -> list[str]:
    """A provider format's shared bytes: a byte prefix of both rendered_json."""
    a, b = prev.rendered_json.encode(), cur.rendered_json.encode()
    if 0 <= n <= min(len(a), len(b)) and a[:n] == b[:n]:
        return []
    return [f"shared_bytes {n} is no common prefix of {len(a)} and {len(b)} bytes"]


def _text(p: pb.CachePrefix) -> str:
    return (
        f"(shared {p.shared_tokens} tokens/{p.shared_bytes} bytes of {p.input_tokens}, "
        f"previous {p.previous_input_tokens}, {R.Name(p.break_reason)})"
    )
