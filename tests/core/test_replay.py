"""Exact replay: what was in force just before message ``as_of_seq`` was appended."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.core.memory import EMPTY_BLOCK, MemoryBlock
from ctxwarden.core.messages import ContentBlock, Message, MessageState, Role
from ctxwarden.core.replay import (
    NO_CALIBRATION,
    CheckpointRecord,
    MessageRecord,
    ReplayPlan,
    RevisionMark,
    calibration_at,
    checkpoint_at,
    memory_at,
    plan_replay,
    replay_messages,
    replay_session,
    revision_at,
)
from ctxwarden.core.session import Checkpoint, Session

ROLLED_BACK = MessageState.ROLLED_BACK


def checkpoint(cid: str, first_kept_seq: int, at_seq: int, t: int | None = None) -> Checkpoint:
    return Checkpoint(
        compaction_id=cid,
        session_id="s",
        summary=f"summary {cid}",
        first_kept_seq=first_kept_seq,
        tokens_before=100,
        create_time_us=at_seq if t is None else t,
        at_seq=at_seq,
    )


def msg(seq: int, calibration: tuple[float, int] | None = None) -> Message:
    return Message(Role.USER, (ContentBlock.of_text(f"m{seq}"),), seq=seq, calibration=calibration)


def stored(seq: int, rolled_back_at_seq: int = 0) -> MessageRecord:
    state = ROLLED_BACK if rolled_back_at_seq else MessageState.ACTIVE
    return MessageRecord(replace(msg(seq), state=state), rolled_back_at_seq)


def seqs(messages: tuple[Message, ...]) -> list[int]:
    return [m.seq for m in messages]


# A session of 12 messages: checkpoint "a" (kept from 4) made at last_seq 6,
# "b" (kept from 8) at 10; a rewind at last_seq 11 to seq 5 rolled back 6..11
# and superseded "b"; message 12 followed.
CHECKPOINTS = [
    CheckpointRecord(replace(checkpoint("a", 4, 6)), 0),
    CheckpointRecord(replace(checkpoint("b", 8, 10), superseded=True), 11),
]
MESSAGES = [stored(s) for s in range(1, 6)] + [stored(s, 11) for s in range(6, 12)] + [stored(12)]


def replayed(as_of_seq: int) -> tuple[ReplayPlan, tuple[Message, ...]]:
    plan = plan_replay(CHECKPOINTS, [], as_of_seq)
    return plan, replay_messages(plan, list(reversed(MESSAGES)))


def test_replay_at_seq_zero_and_one_is_empty() -> None:
    for n in (0, 1):
        plan, kept = replayed(n)
        assert plan.checkpoint is None
        assert plan.revision is None
        assert kept == ()


def test_replay_before_the_first_checkpoint() -> None:
    plan, kept = replayed(7)  # "a" was made at last_seq 6: in force for 7
    assert plan.checkpoint is not None
    assert plan.checkpoint.compaction_id == "a"
    assert seqs(kept) == [4, 5, 6]
    plan, kept = replayed(6)
    assert plan.checkpoint is None
    assert seqs(kept) == [1, 2, 3, 4, 5]


def test_replay_between_checkpoints_uses_the_superseded_one_then_in_force() -> None:
    plan, kept = replayed(11)
    assert plan.checkpoint is not None
    assert plan.checkpoint.compaction_id == "b"
    assert not plan.checkpoint.superseded
    assert plan.seqs == range(8, 11)
    # Rolled back at last_seq 11, after message 11 was appended: active before it.
    assert seqs(kept) == [8, 9, 10]
    assert all(m.state is MessageState.ACTIVE for m in kept)


def test_replay_at_last_seq_after_the_rewind() -> None:
    plan, kept = replayed(12)  # the rewind (at last_seq 11) had happened
    assert plan.checkpoint is not None
    assert plan.checkpoint.compaction_id == "a"
    assert seqs(kept) == [4, 5]
    plan, kept = replayed(13)  # last_seq + 1: the session as it is now
    assert plan.checkpoint is not None
    assert plan.checkpoint.compaction_id == "a"
    assert seqs(kept) == [4, 5, 12]


def test_newest_checkpoint_in_force_wins_ties_by_id() -> None:
    records = [
        CheckpointRecord(checkpoint("a", 2, 3, t=5)),
        CheckpointRecord(checkpoint("b", 3, 3, t=5)),
    ]
    found = checkpoint_at(records, 4)
    assert found is not None
    assert found.compaction_id == "b"
    assert checkpoint_at(records, 3) is None


def test_revision_at() -> None:
    revisions = [RevisionMark(1, 0), RevisionMark(3, 7), RevisionMark(2, 4)]
    assert revision_at(revisions, 0) is None
    assert revision_at(revisions, 1) == 1
    assert revision_at(revisions, 5) == 2
    assert revision_at(revisions, 7) == 2
    assert revision_at(revisions, 8) == 3
    assert revision_at([], 8) is None


def test_calibration_at_takes_the_newest_change_before() -> None:
    changes = [(2, (1.5, 1)), (5, (1.2, 2)), (9, (1.1, 3))]
    assert calibration_at(changes, 2) is None
    assert calibration_at(changes, 3) == (1.5, 1)
    assert calibration_at(list(reversed(changes)), 9) == (1.2, 2)
    assert calibration_at(changes, 10) == (1.1, 3)


def test_memory_at_takes_the_newest_block_from_a_seq_up_to_it() -> None:
    one, two = MemoryBlock("one", ("m1",)), MemoryBlock("two", ("m2",))
    blocks = [(1, one), (5, two), (9, EMPTY_BLOCK)]
    assert memory_at([], 3) == EMPTY_BLOCK
    assert memory_at(blocks[1:], 4) == EMPTY_BLOCK  # none made by then: no block
    assert memory_at(blocks, 1) == one and memory_at(blocks, 4) == one
    assert memory_at(list(reversed(blocks)), 5) == two
    assert memory_at(blocks, 9) == EMPTY_BLOCK  # a refresh that found nothing


def test_replay_session_precedence() -> None:
    now = Session("s", title="now", last_seq=20, revision=5, estimate_ratio=1.3, estimate_samples=9)
    then = replace(now, title="then", revision=2, estimate_ratio=1.7, estimate_samples=4)
    plan = plan_replay([], [RevisionMark(2, 3)], 8)
    # The newest message's calibration, else the revision's, else none.
    s = replay_session(plan, now, then, (1.1, 2))
    assert (s.title, s.revision, s.last_seq) == ("then", 2, 7)
    assert (s.estimate_ratio, s.estimate_samples) == (1.1, 2)
    s = replay_session(plan, now, then, None)
    assert (s.estimate_ratio, s.estimate_samples) == (1.7, 4)
    s = replay_session(plan, now, None, None)
    assert (s.title, s.revision, s.last_seq) == ("now", 5, 7)
    assert (s.estimate_ratio, s.estimate_samples) == NO_CALIBRATION
    # The block is the one found then, whatever the session carries now.
    block = MemoryBlock("then", ("m",))
    with_block = replace(now, memory=MemoryBlock("now", ("n",)))
    assert replay_session(plan, with_block, None, None, block).memory == block
    assert replay_session(plan, with_block, None, None).memory == EMPTY_BLOCK


# -- property: replay agrees with a model that applies events in order -------------


@dataclass
class Model:
    """A session driven event by event; ``seen[n]`` is what it looked like just
    before message n was appended."""

    last_seq: int = 0
    messages: dict[int, Message] = field(default_factory=dict)
    rolled_back_at: dict[int, int] = field(default_factory=dict)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    superseded_at: dict[str, int] = field(default_factory=dict)
    revisions: dict[int, tuple[int, Session]] = field(default_factory=dict)
    blocks: dict[int, MemoryBlock] = field(default_factory=dict)
    """from_seq (last_seq + 1 then) -> the block selected (the later of two at one seq)."""
    session: Session = field(default_factory=lambda: Session("s"))
    seen: dict[int, tuple[Checkpoint | None, tuple[int, ...], Session]] = field(
        default_factory=dict
    )

    def current(self) -> Checkpoint | None:
        valid = [c for c in self.checkpoints if c.compaction_id not in self.superseded_at]
        return valid[-1] if valid else None  # the one made last

    def observe(self) -> tuple[Checkpoint | None, tuple[int, ...], Session]:
        cp = self.current()
        first = cp.first_kept_seq if cp is not None else 0
        kept = tuple(
            s for s in sorted(self.messages) if s >= first and s not in self.rolled_back_at
        )
        return cp, kept, replace(self.session, last_seq=self.last_seq)

    def append(self, calibration: tuple[float, int] | None) -> None:
        seq = self.last_seq + 1
        self.seen[seq] = self.observe()
        self.messages[seq] = msg(seq, calibration)
        self.last_seq = seq
        if calibration is not None:
            ratio, samples = calibration
            self.session = replace(self.session, estimate_ratio=ratio, estimate_samples=samples)

    def compact(self, first_kept_seq: int, t: int) -> None:
        cid = f"c{len(self.checkpoints):03}"
        self.checkpoints.append(checkpoint(cid, first_kept_seq, self.last_seq, t))

    def rewind(self, to_seq: int) -> None:
        for s in self.messages:
            if s > to_seq and s not in self.rolled_back_at:
                self.rolled_back_at[s] = self.last_seq
        for c in self.checkpoints:
            summarised = range(1, c.first_kept_seq)
            if c.compaction_id not in self.superseded_at and any(s > to_seq for s in summarised):
                self.superseded_at[c.compaction_id] = self.last_seq

    def select_memory(self, n: int) -> None:
        block = MemoryBlock(f"block {n}", (f"m{n}",)) if n else EMPTY_BLOCK
        self.session = replace(self.session, memory=block)
        self.blocks[self.last_seq + 1] = block

    def update_settings(self) -> None:
        revision = len(self.revisions) + 1
        self.session = replace(self.session, title=f"title {revision}", revision=revision)
        self.revisions[revision] = (self.last_seq, self.session)


events = st.one_of(
    st.tuples(st.just("append"), st.none() | st.tuples(st.floats(0.5, 2.0), st.integers(1, 9))),
    st.tuples(st.just("compact"), st.integers(0, 40), st.integers(0, 2)),
    st.tuples(st.just("rewind"), st.integers(0, 40)),
    st.tuples(st.just("settings")),
    st.tuples(st.just("memory"), st.integers(0, 3)),
)


def run(script: list[tuple[object, ...]]) -> Model:
    model = Model()
    # A session records revision 1, with its prior calibration, when it is created.
    model.session = replace(model.session, estimate_ratio=1.25)
    model.update_settings()
    t = 0
    for event in script:
        kind = event[0]
        if kind == "append":
            calibration = event[1]
            assert calibration is None or isinstance(calibration, tuple)
            model.append(calibration)
        elif kind == "compact":
            first, dt = event[1], event[2]
            assert isinstance(first, int)
            assert isinstance(dt, int)
            t += dt  # creation times may tie: the id breaks them
            model.compact(first % (model.last_seq + 1) + 1, t)
        elif kind == "rewind":
            to_seq = event[1]
            assert isinstance(to_seq, int)
            model.rewind(to_seq % (model.last_seq + 1))
        elif kind == "memory":
            n = event[1]
            assert isinstance(n, int)
            model.select_memory(n)
        else:
            model.update_settings()
    model.seen[model.last_seq + 1] = model.observe()
    return model


@given(st.lists(events, max_size=40))
def test_replay_agrees_with_the_model(script: list[tuple[object, ...]]) -> None:
    model = run(script)
    # What a store holds at the end: final states, with the stamps of rewinds.
    checkpoints = [
        CheckpointRecord(
            replace(c, superseded=c.compaction_id in model.superseded_at),
            model.superseded_at.get(c.compaction_id, 0),
        )
        for c in model.checkpoints
    ]
    messages = [
        MessageRecord(
            replace(m, state=ROLLED_BACK if s in model.rolled_back_at else MessageState.ACTIVE),
            model.rolled_back_at.get(s, 0),
        )
        for s, m in model.messages.items()
    ]
    revisions = [RevisionMark(r, at) for r, (at, _) in model.revisions.items()]
    changes = [(s, m.calibration) for s, m in model.messages.items() if m.calibration]
    now = replace(model.session, last_seq=model.last_seq)

    for n, (cp, kept, session) in model.seen.items():
        plan = plan_replay(checkpoints, revisions, n)
        assert plan.checkpoint == (replace(cp, superseded=False) if cp is not None else None)
        got = replay_messages(plan, messages)
        assert seqs(got) == list(kept)
        assert all(m.state is MessageState.ACTIVE for m in got)
        # What a store reads (the messages in plan.seqs, the newest change) suffices.
        assert replay_messages(plan, [r for r in messages if r.message.seq in plan.seqs]) == got
        newest = [max((c for c in changes if c[0] < n), default=None, key=lambda c: c[0])]
        calibration = calibration_at(changes, n)
        assert calibration == calibration_at([c for c in newest if c is not None], n)
        settings = model.revisions[plan.revision][1] if plan.revision is not None else None
        blocks = list(model.blocks.items())
        memory = memory_at(blocks, n)
        newest_block = [max((b for b in blocks if b[0] <= n), default=None, key=lambda b: b[0])]
        assert memory == memory_at([b for b in newest_block if b is not None], n)
        assert replay_session(plan, now, settings, calibration, memory) == session
