"""pi_tree: a pi file's tree as the session's branch and its forks."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from ctxwarden.transfer.pi_import import pi_sessions, read_pi
from ctxwarden.transfer.pi_tree import branches, fork_id, seq_count


def _e(eid: str, parent: str | None, kind: str = "message") -> dict[str, Any]:
    return {"type": kind, "id": eid, "parentId": parent, "timestamp": "2026-01-02T03:04:05.000Z"}


def _shape(entries: list[dict[str, Any]]) -> list[tuple[str, int, int, int]]:
    """(leaf, parent branch, shared entries, parent_seq) of each branch."""
    return [(b.leaf, b.parent, b.shared, b.parent_seq) for b in branches(entries)]


def test_the_last_entry_is_the_session_and_the_other_leaves_fork_in_file_order() -> None:
    entries = [
        _e("a", None),
        _e("b", "a"),
        _e("c", "b", "compaction"),
        _e("d", "c"),
        _e("x", "b"),  # leaves the main line right before the compaction
        _e("y", "x"),
        _e("z", "x"),  # off the branch of y: a fork of that fork
        _e("w", "c"),  # off the compaction itself
        _e("e", "d"),  # the main line, last
    ]
    assert _shape(entries) == [
        ("e", -1, 0, 0),
        # b (seq 2) is followed by the compaction on the main line: a fork after seq 2
        # would inherit it, so this one leaves at seq 1 and stores its own copy of b.
        ("y", 0, 2, 1),
        ("z", 1, 3, 3),
        ("w", 0, 3, 2),
    ]
    assert seq_count(branches(entries)[0].path) == 4  # a b d e: the compaction takes none


def test_leaves_go_in_file_order_so_a_branch_continued_later_forks_from_a_branch_off_it() -> None:
    entries = [
        _e("a", None),
        _e("b", "a"),
        _e("c", "b"),
        _e("d", "c"),
        _e("c2", "c"),  # off the branch of d
        _e("d3", "d"),  # that branch goes on: its leaf comes after c2
        _e("e", "b"),  # the main line, last
    ]
    assert _shape(entries) == [("e", -1, 0, 0), ("c2", 0, 2, 2), ("d3", 1, 3, 3)]


def test_a_second_root_forks_at_seq_0_and_a_missing_parent_is_a_root() -> None:
    entries = [_e("a", None), _e("b", "a"), _e("r", None), _e("s", "gone"), _e("c", "b")]
    assert _shape(entries) == [("c", -1, 0, 0), ("r", 0, 0, 0), ("s", 0, 0, 0)]


def test_no_entries_no_branch() -> None:
    assert branches([]) == []


def test_duplicate_ids_and_cycles_are_refused() -> None:
    with pytest.raises(ValueError, match="appears twice"):
        branches([_e("a", None), _e("a", "a")])
    with pytest.raises(ValueError, match="cycle"):
        branches([_e("a", "b"), _e("b", "a"), _e("c", "b")])
    with pytest.raises(ValueError, match="cycle"):
        branches([_e("a", None), _e("b", "b")])


def test_fork_ids() -> None:
    assert fork_id("s1", "0af3eb1d") == "s1.0af3eb1d"
    digest = hashlib.sha256(b"a b/c").hexdigest()[:12]
    assert fork_id("s1", "a b/c") == f"s1.{digest}"
    assert fork_id("s1", "x" * 65) == "s1." + hashlib.sha256(b"x" * 65).hexdigest()[:12]
    with pytest.raises(ValueError, match="no valid session ID"):
        fork_id("s" * 250, "0af3eb1d")


def test_a_malformed_session_id_is_refused() -> None:
    pi = read_pi(['{"type":"session","version":3,"id":"x","timestamp":"2026-01-02T03:04:05Z"}'])
    with pytest.raises(ValueError, match="malformed"):
        pi_sessions(pi, "no spaces please")
    [session] = pi_sessions(pi, "ok")
    assert session.parent_id == "" and next(session.records)["last_seq"] == 0
