"""What a rewind across compaction checkpoints changes.

A rewind to ``to_seq`` rolls back every active message after ``to_seq`` and
supersedes every checkpoint that summarised one of them; the newest checkpoint
still valid becomes the current one. Both changes are stamped with the
session's last_seq at the time, which is what exact replay orders them by.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ctxwarden.core.messages import MessageState
from ctxwarden.core.session import Checkpoint


@dataclass(frozen=True, slots=True)
class Rewind:
    """The decision of a rewind; the store writes exactly this."""

    rolled_back: tuple[int, ...]
    """Seqs of the messages that become ROLLED_BACK, ascending."""
    superseded: tuple[str, ...]
    """Compaction ids of the checkpoints that become superseded."""
    current: str
    """The checkpoint in effect afterwards ("" for none)."""
    at_seq: int
    """The stamp of both changes: the session's last_seq."""


def checkpoint_order(c: Checkpoint) -> tuple[int, str]:
    """How checkpoints are ordered: by creation time, then by compaction id."""
    return (c.create_time_us, c.compaction_id)


def newest_checkpoint(checkpoints: Iterable[Checkpoint]) -> Checkpoint | None:
    """The newest of ``checkpoints`` (None for none)."""
    return max(checkpoints, key=checkpoint_order, default=None)


def summarised_after(checkpoint: Checkpoint, to_seq: int) -> bool:
    """Whether ``checkpoint`` summarised a message after ``to_seq`` (it summarised
    every message before its first_kept_seq)."""
    return checkpoint.first_kept_seq - 1 > to_seq


def plan_rewind(
    messages: Sequence[tuple[int, MessageState]],
    checkpoints: Sequence[Checkpoint],
    *,
    to_seq: int,
    last_seq: int,
) -> Rewind:
    """Rewind to ``to_seq`` in a session whose last_seq is ``last_seq``.

    ``messages`` are (seq, state) of the session's messages and ``checkpoints``
    its checkpoints, in any order. Only messages after ``to_seq`` and
    checkpoints not yet superseded matter, so a caller may pass just those.
    Messages already rolled back and checkpoints already superseded keep the
    stamp they have.
    """
    rolled_back = sorted(
        seq for seq, state in messages if seq > to_seq and state == MessageState.ACTIVE
    )
    valid = [c for c in checkpoints if not c.superseded]
    superseded = [c for c in valid if summarised_after(c, to_seq)]
    current = newest_checkpoint(c for c in valid if not summarised_after(c, to_seq))
    return Rewind(
        rolled_back=tuple(rolled_back),
        superseded=tuple(c.compaction_id for c in sorted(superseded, key=checkpoint_order)),
        current=current.compaction_id if current is not None else "",
        at_seq=last_seq,
    )
