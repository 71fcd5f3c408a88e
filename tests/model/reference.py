"""The reference model of a session: what the client was told, kept by the test.

The model records only acknowledged facts (the seqs, IDs and states the server answered
with) and derives from them what every later answer must be: which messages the view may
show, which calls are open, and what a replay or a fork at each seq returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m


@dataclass
class Ref:
    sid: str
    user_id: str = ""
    last_seq: int = 0
    ids: list[str] = field(default_factory=list)
    """Every acknowledged message ID, in seq order (inherited ones first for a fork)."""
    own: int = 0
    """How many of ``ids`` this session stored itself (ListMessages shows only those)."""
    by_seq: dict[int, str] = field(default_factory=dict)
    visible: list[str] = field(default_factory=list)
    """The IDs the effective history may show (active, not history-only), in seq order."""
    calls: dict[str, list[str]] = field(default_factory=dict)
    """message ID -> the IDs of the tool calls it makes."""
    answers: dict[str, str] = field(default_factory=dict)
    """message ID -> the tool call ID a result answers."""
    replays: dict[int, bytes] = field(default_factory=dict)
    """k -> the normalized input returned just before message k was appended."""
    visible_at: dict[int, list[str]] = field(default_factory=dict)
    latest: bytes = b""
    """The normalized input as of the last check."""
    state: dict[str, float] = field(default_factory=dict)
    archived: bool = False
    last_request: pb.AppendMessagesRequest | None = None
    """The last acknowledged AppendMessages request (sent again to check idempotency)."""
    labels: dict[str, str] = field(default_factory=dict)
    labels_at: dict[int, dict[str, str]] = field(default_factory=dict)
    """k -> the labels just before message k was appended (a fork at k takes the
    source's settings of then)."""
    parent: str = ""
    """The session a fork was made of, its ``fork_seq`` (the seq it forked at) and its
    ``parent_seq`` (the last seq it inherits)."""
    fork_seq: int = 0
    parent_seq: int = 0
    usage: list[int] = field(default_factory=lambda: [0] * 6)
    """The usage ledger's agent totals: the sum of the usage of every message stored
    (calls, input, cache read, cache write, output, reasoning); rollbacks refund nothing."""

    def before_append(self) -> None:
        k = self.last_seq + 1
        self.replays[k] = self.latest
        self.visible_at[k] = list(self.visible)
        self.labels_at[k] = dict(self.labels)

    def nothing_appended(self) -> None:
        """Undo ``before_append``: the append stored nothing (a replay at that seq
        would show whatever comes before the next message actually appended)."""
        k = self.last_seq + 1
        for noted in (self.replays, self.visible_at, self.labels_at):
            noted.pop(k, None)

    @property
    def open_calls(self) -> list[str]:
        """The calls of the last assistant turn still waiting for a result: once another
        message follows a turn, its unanswered calls are closed (the view answers them with
        a synthetic result), and a late result would be an orphan."""
        waiting: list[str] = []
        for mid in self.visible:
            if mid in self.answers:
                if self.answers[mid] in waiting:
                    waiting.remove(self.answers[mid])
            else:
                waiting = list(self.calls.get(mid, []))
        return waiting

    def stored(self, msg: m.Message) -> None:
        """One message of an append's answer."""
        self.last_seq = max(self.last_seq, msg.seq)
        self.ids.append(msg.message_id)
        self.own += 1
        self.by_seq[msg.seq] = msg.message_id
        if msg.HasField("usage"):
            u = msg.usage
            counts = [1, u.input_tokens, u.cache_read_tokens, u.cache_write_tokens]
            counts += [u.output_tokens, u.reasoning_tokens]
            self.usage = [a + b for a, b in zip(self.usage, counts, strict=True)]
        failed = msg.stop_reason == m.STOP_REASON_ERROR or bool(msg.error_message)
        shown = msg.visibility != m.MESSAGE_VISIBILITY_HISTORY_ONLY and not failed
        self.calls[msg.message_id] = [
            b.tool_call.id for b in msg.content if b.WhichOneof("block") == "tool_call"
        ]
        if msg.role == m.ROLE_TOOL_RESULT:
            self.answers[msg.message_id] = msg.tool_call_id
        if msg.state == m.MESSAGE_STATE_ACTIVE and shown:
            self.visible.append(msg.message_id)

    def rolled_back(self, seqs: list[int]) -> None:
        gone = {self.by_seq[s] for s in seqs if s in self.by_seq}
        if seqs and self.parent and min(seqs) <= self.parent_seq:
            self.parent_seq = min(seqs) - 1  # the fork now holds what it inherited from there
        self.visible = [i for i in self.visible if i not in gone]

    def fork(self, sid: str, at: int) -> Ref:
        """The fork at ``at``: the source as it was just before message ``at``."""
        labels = dict(self.labels_at.get(at, self.labels))
        child = Ref(sid=sid, user_id=self.user_id, last_seq=at - 1, labels=labels)
        child.parent, child.fork_seq, child.parent_seq = self.sid, at, at - 1
        child.ids = [self.by_seq[s] for s in sorted(self.by_seq) if s < at]
        child.by_seq = {s: i for s, i in self.by_seq.items() if s < at}
        child.visible = list(self.visible_at.get(at, self.visible))
        child.calls = dict(self.calls)
        child.answers = dict(self.answers)
        # Not at ``at`` itself: as_of_seq = last_seq + 1 is the fork's input now, which a
        # memory refresh or a compaction of the fork changes before it appends.
        child.replays = {k: v for k, v in self.replays.items() if k < at}
        child.visible_at = {k: v for k, v in self.visible_at.items() if k <= at}
        child.labels_at = {k: v for k, v in self.labels_at.items() if k <= at}
        child.latest = self.replays.get(at, self.latest)
        return child

    def copy_as(self, sid: str) -> Ref:
        """An imported copy: the same life under another ID."""
        twin = self.fork(sid, self.last_seq + 1)
        twin.latest = self.latest
        twin.visible = list(self.visible)
        twin.own = len(twin.ids)
        twin.state = dict(self.state)
        twin.labels = dict(self.labels)
        twin.parent, twin.fork_seq, twin.parent_seq = "", 0, 0  # a whole session of its own
        twin.usage = list(self.usage)  # the ledger travels with the export (a fork's starts at 0)
        return twin
