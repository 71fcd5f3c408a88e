"""The tree of a pi session file as one session and its forks (pure).

pi's entries form a tree through ``id``/``parentId``; each leaf ends a branch
(the path from its root to it). The branch of the file's last entry, which pi
opens the file at, is the session; every other leaf's branch is a fork. A fork
forks from the branch that first holds the deepest entry its path shares with
the branches before it (its branch point), so a branch that leaves another
fork's own entries is a fork of that fork, and what a fork stores are the
entries after its branch point only. Branches are listed so that each one
comes after the branch it forks from; the other leaves go in file order.

A seq is the position of an entry on its path counting every entry but
compactions (those become checkpoints): entries shared by two paths have the
same seq on both, so a fork's ``parent_seq`` is the seq of its branch point,
with one exception. A checkpoint belongs to the seq it was made after
(``at_seq``), and a fork made after that seq inherits it; so when the parent's
path goes on from the branch point with a compaction the fork does not have, the
fork leaves one seq earlier and stores its copy of the last shared message
itself (as a rollback into inherited rows does, see store/lineage.py).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ctxwarden.core.validation import SESSION_ID_RE
from ctxwarden.transfer.pi_format import Entry

LEAF_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,64}")
"""A leaf ID used as it is in a fork's session ID (pi's are 8 hex digits)."""


@dataclass(frozen=True, slots=True)
class Branch:
    """The path root -> ``leaf`` and where it leaves the branch it forks from."""

    leaf: str
    path: tuple[Entry, ...]
    parent: int
    """Index of the branch it forks from (in the list of ``branches``); -1: the session."""
    shared: int
    """How many entries at the start of ``path`` it shares with that branch."""
    parent_seq: int
    """The last seq the fork reads from its parent (0 for the session)."""


def seq_count(entries: Sequence[Entry]) -> int:
    return sum(1 for e in entries if e["type"] != "compaction")


def _path(leaf: Entry, by_id: dict[str, Entry]) -> list[Entry]:
    """Root to ``leaf``; an entry whose parent is not in the file is a root, as in pi."""
    path: list[Entry] = []
    node: Entry | None = leaf
    while node is not None:
        path.append(node)
        if len(path) > len(by_id):
            raise ValueError(f"the parentId links of entry {leaf['id']!r} form a cycle")
        parent = node.get("parentId")
        node = by_id.get(parent) if parent else None
    path.reverse()
    return path


def branches(entries: Sequence[Entry]) -> list[Branch]:
    """The active branch (to the last entry), then one branch per other leaf,
    each after the branch it forks from. Empty for a file without entries."""
    by_id: dict[str, Entry] = {}
    for e in entries:
        if e["id"] in by_id:
            raise ValueError(f"entry ID {e['id']!r} appears twice")
        by_id[e["id"]] = e
    if not entries:
        return []
    with_children = {e.get("parentId") for e in entries}
    active = entries[-1]
    leaves = [active, *(e for e in entries[:-1] if e["id"] not in with_children)]
    owner: dict[str, int] = {}
    out: list[Branch] = []
    for leaf in leaves:
        path = _path(leaf, by_id)
        # The active branch forks from nothing; a path sharing no entry forks at seq 0.
        parent, shared = (-1, 0) if not out else (0, 0)
        for i in range(len(path) - 1, -1, -1):
            if path[i]["id"] in owner:
                parent, shared = owner[path[i]["id"]], i + 1
                break
        for e in path[shared:]:
            owner[e["id"]] = len(out)
        parent_seq = seq_count(path[:shared]) if out else 0
        if out and parent_seq and _compaction_next(out[parent].path, shared):
            parent_seq -= 1
        out.append(Branch(str(leaf["id"]), tuple(path), parent, shared, parent_seq))
    return out


def _compaction_next(path: tuple[Entry, ...], shared: int) -> bool:
    """Whether ``path`` goes on after its first ``shared`` entries with a compaction."""
    return len(path) > shared and path[shared]["type"] == "compaction"


def fork_id(session_id: str, leaf: str) -> str:
    """``SESSION_ID.LEAF``: the leaf's ID, or 12 hex digits of its SHA-256 when it
    holds characters a session ID may not (or is long)."""
    tail = leaf if LEAF_ID_RE.fullmatch(leaf) else hashlib.sha256(leaf.encode()).hexdigest()[:12]
    sid = f"{session_id}.{tail}"
    if not SESSION_ID_RE.fullmatch(sid):
        raise ValueError(f"the fork ID {sid[:270]!r} is no valid session ID (too long?)")
    return sid
