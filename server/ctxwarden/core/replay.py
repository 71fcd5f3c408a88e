"""The session as it was just before message ``as_of_seq`` was appended.

Events are ordered by the session's last_seq when they happened: a checkpoint,
rollback, settings revision, memory block or calibration change made while
last_seq was below ``as_of_seq`` had happened by then; one made later had not. Messages
keep their seq when rolled back and seqs are never reused, so this order is
exact.

A replay is decided in two steps, so that a store reads only what it needs:
``plan_replay`` picks the checkpoint and settings revision in force and the
seqs whose messages can be in the context; ``replay_messages`` and
``replay_session`` then assemble the messages and the session from those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ctxwarden.core.memory import EMPTY_BLOCK, MemoryBlock
from ctxwarden.core.messages import Message, MessageState
from ctxwarden.core.rewind import newest_checkpoint
from ctxwarden.core.session import Checkpoint, Session

NO_CALIBRATION = (1.0, 0)
"""(ratio, samples) of a session that has never been calibrated."""


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """A checkpoint and the last_seq at which a rewind superseded it (0: never)."""

    checkpoint: Checkpoint
    superseded_at_seq: int = 0


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """A stored message and the last_seq at which it was rolled back (0: never)."""

    message: Message
    rolled_back_at_seq: int = 0


@dataclass(frozen=True, slots=True)
class RevisionMark:
    """A settings revision and the session's last_seq when it was made."""

    revision: int
    at_seq: int


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What was in force just before message ``as_of_seq`` was appended."""

    as_of_seq: int
    checkpoint: Checkpoint | None
    """The checkpoint in effect then (marked not superseded), None for none."""
    revision: int | None
    """The settings revision in effect then, None for none recorded."""
    seqs: range
    """The seqs whose messages can be in the context then."""


def in_force(record: CheckpointRecord, as_of_seq: int) -> bool:
    """Whether the checkpoint had been made and not yet superseded by then."""
    made = record.checkpoint.at_seq < as_of_seq
    return made and (record.superseded_at_seq == 0 or record.superseded_at_seq >= as_of_seq)


def checkpoint_at(checkpoints: Sequence[CheckpointRecord], as_of_seq: int) -> Checkpoint | None:
    """The newest checkpoint in force just before ``as_of_seq`` (not superseded then)."""
    newest = newest_checkpoint(r.checkpoint for r in checkpoints if in_force(r, as_of_seq))
    return replace(newest, superseded=False) if newest is not None else None


def revision_at(revisions: Sequence[RevisionMark], as_of_seq: int) -> int | None:
    """The newest settings revision made before ``as_of_seq`` (None for none)."""
    made = [r.revision for r in revisions if r.at_seq < as_of_seq]
    return max(made, default=None)


def plan_replay(
    checkpoints: Sequence[CheckpointRecord], revisions: Sequence[RevisionMark], as_of_seq: int
) -> ReplayPlan:
    """Which checkpoint and settings revision were in force just before
    ``as_of_seq``, and which seqs the context can hold: from the checkpoint's
    first kept message (the first message without one) up to ``as_of_seq``."""
    checkpoint = checkpoint_at(checkpoints, as_of_seq)
    first = checkpoint.first_kept_seq if checkpoint is not None else 0
    return ReplayPlan(
        as_of_seq=as_of_seq,
        checkpoint=checkpoint,
        revision=revision_at(revisions, as_of_seq),
        seqs=range(first, max(first, as_of_seq)),
    )


def was_active(record: MessageRecord, as_of_seq: int) -> bool:
    """Whether the message was active just before ``as_of_seq``: not rolled back
    yet (a rollback at last_seq ``as_of_seq - 1`` had happened)."""
    state = record.message.state
    return state == MessageState.ACTIVE or record.rolled_back_at_seq >= as_of_seq


def replay_messages(plan: ReplayPlan, messages: Sequence[MessageRecord]) -> tuple[Message, ...]:
    """The context's messages then, by seq, each active as it was then.

    ``messages`` are the session's stored messages in any order; only those
    with a seq in ``plan.seqs`` matter, so a caller may pass just those."""
    kept = [
        replace(r.message, state=MessageState.ACTIVE)
        for r in messages
        if r.message.seq in plan.seqs and was_active(r, plan.as_of_seq)
    ]
    return tuple(sorted(kept, key=lambda m: m.seq))


def calibration_at(
    changes: Sequence[tuple[int, tuple[float, int]]], as_of_seq: int
) -> tuple[float, int] | None:
    """The (ratio, samples) the newest message before ``as_of_seq`` left, of
    ``changes``: (seq, calibration) of the messages that changed it. Only the
    newest such change matters, so a caller may pass just that one."""
    made = [(seq, calibration) for seq, calibration in changes if seq < as_of_seq]
    return max(made, key=lambda change: change[0])[1] if made else None


def memory_at(blocks: Sequence[tuple[int, MemoryBlock]], as_of_seq: int) -> MemoryBlock:
    """The memory block in force just before ``as_of_seq``, of ``blocks``:
    (from_seq, block) of each change, from_seq being the session's last_seq + 1
    when it was made (of two at one from_seq, the later is passed). None made by
    then: no block. Only the newest such change matters, so a caller may pass
    just that one."""
    made = [(seq, block) for seq, block in blocks if seq <= as_of_seq]
    return max(made, key=lambda change: change[0])[1] if made else EMPTY_BLOCK


def replay_session(
    plan: ReplayPlan,
    current: Session,
    settings: Session | None,
    calibration: tuple[float, int] | None,
    memory: MemoryBlock = EMPTY_BLOCK,
) -> Session:
    """The session then.

    ``current`` is the session now; ``settings`` the session with the settings
    and number of ``plan.revision`` (None when none is recorded: the current
    settings); ``calibration`` what ``calibration_at`` found, ``memory`` what
    ``memory_at`` found. The calibration is the newest message's, else the
    revision's, else none at all.
    """
    session = settings if settings is not None else current
    fallback = (session.estimate_ratio, session.estimate_samples)
    ratio, samples = calibration or (fallback if settings is not None else NO_CALIBRATION)
    return replace(
        session,
        last_seq=plan.as_of_seq - 1,
        estimate_ratio=float(ratio),
        estimate_samples=int(samples),
        memory=memory,
    )
