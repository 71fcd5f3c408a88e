"""Which messages and checkpoints a rewind across compaction checkpoints changes."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.core.messages import MessageState
from ctxwarden.core.rewind import Rewind, newest_checkpoint, plan_rewind, summarised_after
from ctxwarden.core.session import Checkpoint

ACTIVE, ROLLED_BACK = MessageState.ACTIVE, MessageState.ROLLED_BACK


def checkpoint(cid: str, first_kept_seq: int, t: int, *, superseded: bool = False) -> Checkpoint:
    return Checkpoint(
        compaction_id=cid,
        session_id="s",
        summary=f"summary {cid}",
        first_kept_seq=first_kept_seq,
        tokens_before=100,
        create_time_us=t,
        at_seq=first_kept_seq + 2,
        superseded=superseded,
    )


def active(*seqs: int) -> list[tuple[int, MessageState]]:
    return [(s, ACTIVE) for s in seqs]


def test_rewind_before_the_first_checkpoint_leaves_none() -> None:
    cps = [checkpoint("a", 5, 10), checkpoint("b", 9, 20)]
    r = plan_rewind(active(*range(1, 13)), cps, to_seq=2, last_seq=12)
    assert r == Rewind(
        rolled_back=tuple(range(3, 13)), superseded=("a", "b"), current="", at_seq=12
    )


def test_rewind_to_zero_rolls_back_everything() -> None:
    r = plan_rewind(active(1, 2, 3), [checkpoint("a", 2, 10)], to_seq=0, last_seq=3)
    assert r == Rewind((1, 2, 3), ("a",), "", 3)


def test_rewind_exactly_at_first_kept_seq_keeps_the_checkpoint() -> None:
    # The checkpoint summarised 1..4; rewinding to 5 or to 4 removes none of them.
    cps = [checkpoint("a", 5, 10)]
    for to_seq in (5, 4):
        r = plan_rewind(active(*range(1, 9)), cps, to_seq=to_seq, last_seq=8)
        assert r.superseded == ()
        assert r.current == "a"
        assert r.rolled_back == tuple(range(to_seq + 1, 9))


def test_rewind_one_before_the_last_summarised_message_supersedes() -> None:
    r = plan_rewind(active(*range(1, 9)), [checkpoint("a", 5, 10)], to_seq=3, last_seq=8)
    assert r.superseded == ("a",)
    assert r.current == ""


def test_rewind_across_several_checkpoints_falls_back_to_the_newest_valid() -> None:
    cps = [
        checkpoint("a", 3, 10),
        checkpoint("b", 6, 20),
        checkpoint("c", 10, 30),
        checkpoint("d", 14, 40),
    ]
    r = plan_rewind(active(*range(1, 17)), cps, to_seq=7, last_seq=16)
    assert r.superseded == ("c", "d")
    assert r.current == "b"
    assert r.rolled_back == tuple(range(8, 17))
    assert r.at_seq == 16


def test_superseded_checkpoints_stay_superseded_and_are_never_current() -> None:
    # "c" was superseded by an earlier rewind: neither stamped again nor current.
    cps = [checkpoint("a", 3, 10), checkpoint("c", 9, 30, superseded=True)]
    r = plan_rewind(active(*range(1, 6)), cps, to_seq=4, last_seq=20)
    assert r.superseded == ()
    assert r.current == "a"
    r = plan_rewind(active(*range(1, 6)), cps, to_seq=1, last_seq=20)
    assert r.superseded == ("a",)
    assert r.current == ""


def test_rolled_back_messages_keep_their_stamp() -> None:
    msgs = [(1, ACTIVE), (2, ROLLED_BACK), (3, ACTIVE), (4, ROLLED_BACK), (5, ACTIVE)]
    r = plan_rewind(list(reversed(msgs)), [], to_seq=1, last_seq=5)
    assert r.rolled_back == (3, 5)
    assert r.current == ""


def test_newest_checkpoint_orders_by_time_then_id() -> None:
    cps = [checkpoint("b", 1, 10), checkpoint("a", 1, 10), checkpoint("z", 1, 5)]
    newest = newest_checkpoint(cps)
    assert newest is not None
    assert newest.compaction_id == "b"
    assert newest_checkpoint([]) is None


# -- properties ------------------------------------------------------------------


@st.composite
def histories(
    draw: st.DrawFn,
) -> tuple[list[tuple[int, MessageState]], list[Checkpoint], int, int]:
    last_seq = draw(st.integers(0, 30))
    states = [(s, draw(st.sampled_from([ACTIVE, ROLLED_BACK]))) for s in range(1, last_seq + 1)]
    n = draw(st.integers(0, 6))
    cps = [
        checkpoint(
            f"c{i}",
            draw(st.integers(1, last_seq + 1)),
            draw(st.integers(0, 5)),
            superseded=draw(st.booleans()),
        )
        for i in range(n)
    ]
    to_seq = draw(st.integers(0, last_seq))
    return draw(st.permutations(states)), draw(st.permutations(cps)), to_seq, last_seq


@given(histories())
def test_rewind_properties(
    h: tuple[list[tuple[int, MessageState]], list[Checkpoint], int, int],
) -> None:
    states, cps, to_seq, last_seq = h
    r = plan_rewind(states, cps, to_seq=to_seq, last_seq=last_seq)
    by_seq = dict(states)
    # Exactly the active messages after to_seq, ascending.
    assert list(r.rolled_back) == sorted(
        s for s, st_ in by_seq.items() if s > to_seq and st_ is ACTIVE
    )
    # Superseded: valid checkpoints that summarised a message after to_seq; no
    # checkpoint superseded before is superseded again.
    by_id = {c.compaction_id: c for c in cps}
    assert len(set(r.superseded)) == len(r.superseded)
    assert set(r.superseded) == {
        c.compaction_id for c in cps if not c.superseded and c.first_kept_seq > to_seq + 1
    }
    # Current: a valid checkpoint that survives, newer than every other survivor.
    survivors = [c for c in cps if not c.superseded and c.compaction_id not in r.superseded]
    if r.current:
        chosen = by_id[r.current]
        assert chosen in survivors
        assert all(
            (c.create_time_us, c.compaction_id) <= (chosen.create_time_us, chosen.compaction_id)
            for c in survivors
        )
    else:
        assert survivors == []
    assert r.at_seq == last_seq
    # Passing only what the store reads (messages after to_seq, valid
    # checkpoints) gives the same decision.
    narrowed = plan_rewind(
        [(s, st_) for s, st_ in states if s > to_seq],
        [c for c in cps if not c.superseded],
        to_seq=to_seq,
        last_seq=last_seq,
    )
    assert narrowed == r


@given(histories())
def test_rewinding_again_to_the_same_seq_changes_nothing(
    h: tuple[list[tuple[int, MessageState]], list[Checkpoint], int, int],
) -> None:
    states, cps, to_seq, last_seq = h
    r = plan_rewind(states, cps, to_seq=to_seq, last_seq=last_seq)
    rolled = set(r.rolled_back)
    states2 = [(s, ROLLED_BACK if s in rolled else st_) for s, st_ in states]
    cps2 = [replace(c, superseded=c.superseded or c.compaction_id in r.superseded) for c in cps]
    again = plan_rewind(states2, cps2, to_seq=to_seq, last_seq=last_seq)
    assert again.rolled_back == ()
    assert again.superseded == ()
    assert again.current == r.current


def test_summarised_after() -> None:
    c = checkpoint("a", 5, 0)
    assert summarised_after(c, 3)
    assert not summarised_after(c, 4)
    assert not summarised_after(c, 5)
