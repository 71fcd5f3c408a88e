"""pi_export.pi_tree_entries: a session and its forks as one pi tree (pure).

For any lineage of forks (each a random branch point in its parent, with or
without messages of its own), walking the written tree from a session's leaf to
the root gives exactly the entries of that session exported alone (IDs aside);
the session's last entry is the file's last line; every entry is written once;
a fork that adds nothing has no leaf of its own. (Messages only: with
checkpoints a fork's branch also carries its parent's earlier ones, which pi's
context ignores; tests/parity/test_pi_fork_export.py checks that with pi.)
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.content import ContentBlock, ContentKind
from ctxwarden.core.messages import Message, Role
from ctxwarden.store.transfer_format import message_record_of
from ctxwarden.transfer.pi_export import PiExport, pi_entries, pi_tree_entries

Record = dict[str, Any]


def _message(seq: int, text: str) -> Record:
    role = Role.USER if seq % 2 else Role.ASSISTANT
    m = Message(
        role=role,
        content=(ContentBlock(ContentKind.TEXT, text),),
        seq=seq,
        message_id=f"m{seq}-{zlib.crc32(text.encode()) % 10**6}",
        create_time_us=1_767_000_000_000_000 + seq,
    )
    return message_record_of(m)


def _session(sid: str, parent: str = "", parent_seq: int = 0) -> Record:
    record: Record = {
        "type": "session",
        "session_id": sid,
        "create_time_us": 1_767_000_000_000_000,
        "labels": {},
        "pinned_state": "",
    }
    if parent:
        record["lineage"] = {"parent_session_id": parent, "parent_seq": parent_seq}
    return record


@st.composite
def lineages(draw: st.DrawFn) -> list[list[Record]]:
    """The records of a session and of its forks, each fork after its parent."""
    messages: list[list[Record]] = [
        [_message(s, f"main {s}") for s in range(1, draw(st.integers(0, 8)) + 1)]
    ]
    out = [[_session("main"), *messages[0]]]
    for n in range(1, draw(st.integers(0, 6)) + 1):
        parent = draw(st.integers(0, n - 1))
        parent_seq = draw(st.integers(0, len(messages[parent])))
        own = [
            _message(parent_seq + i, f"fork {n} {i}") for i in range(1, draw(st.integers(0, 3)) + 1)
        ]
        messages.append(messages[parent][:parent_seq] + own)
        name = "main" if parent == 0 else f"fork{parent}"
        out.append([_session(f"fork{n}", name, parent_seq), *messages[n]])
    return out


def _content(entry: Record) -> str:
    return json.dumps({k: v for k, v in entry.items() if k not in ("id", "parentId")})


def _branch(by_id: dict[str, Record], leaf: str | None) -> list[str]:
    path = []
    while leaf is not None:
        path.append(_content(by_id[leaf]))
        leaf = by_id[leaf]["parentId"]
    return path[::-1]


@settings(max_examples=300, deadline=None)
@given(lineages())
def test_each_branch_of_the_tree_is_that_session_exported_alone(
    sessions: list[list[Record]],
) -> None:
    stats = PiExport()
    header, *entries = pi_tree_entries([r for s in sessions for r in s], stats)
    assert header["type"] == "session"
    by_id = {e["id"]: e for e in entries}
    assert len(by_id) == len(entries)  # every ID once
    contents = [(e["parentId"], _content(e)) for e in entries]
    assert len(set(contents)) == len(contents)  # no entry written twice under one parent
    alone = {
        str(s[0]["session_id"]): [_content(e) for e in list(pi_entries(s, PiExport()))[1:]]
        for s in sessions
    }
    if alone["main"]:  # (a session with no message has no branch: pi opens a fork's)
        assert _branch(by_id, entries[-1]["id"]) == alone["main"]
    assert set(stats.forks) | set(stats.forks_without_branch) == set(alone) - {"main"}
    children = {e["parentId"] for e in entries}
    for fork, leaf in stats.forks.items():
        assert leaf not in children  # a leaf of pi's tree
        assert _branch(by_id, leaf) == alone[fork], fork
    for fork in stats.forks_without_branch:
        branch = alone[fork]
        # Its branch ends where another one goes on, or is another's whole branch.
        assert any(other[: len(branch)] == branch for name, other in alone.items() if name != fork)
