"""The records of a ctxwarden session -> a pi session file (``export --to pi``).

One linear branch: a ``session`` header (version 3), then every active message
in seq order, each the child of the one before (pi opens a file at its last
entry, so that is the whole session). A valid checkpoint becomes a
``compaction`` entry after the last message before its ``at_seq``, its
``firstKeptEntryId`` the entry of ``first_kept_seq``. Left out, and counted:
rolled-back messages, superseded checkpoints and history-only messages (pi has
none of them; history-only entries that came from pi go back). Left out:
provider-specific content blocks (no pi form). Messages imported from pi are
written back as they came (their ``pi.entry`` metadata).

Checkpoints come before messages in a ctxwarden file; they are held (IDs and
summaries, never messages) until their place in the message stream is reached.

A session with forks (``pi_tree_entries``) becomes one tree: each session's
branch is made as above, and an entry equal to one already written under the
same parent (the rows a fork shares with its parent, the checkpoint it
inherited) is that entry, so a fork's branch leaves its parent's where their
content first differs. The session's own last entry is written last, so pi
opens the file at the session; a fork's branch ends at its own leaf. A fork
that adds nothing after its branch point has no leaf of its own (pi has no
such branch) and is listed as such.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ctxwarden.core.session import Checkpoint
from ctxwarden.core.summary import SUMMARY_PREAMBLE, summary_text
from ctxwarden.store.transfer_format import Record, message_of
from ctxwarden.transfer.pi_format import PI_ENTRY, Entry, entry_of, iso

CURRENT_SESSION_VERSION = 3
SUMMARY_HEAD = f"{SUMMARY_PREAMBLE}\n\n<summary>\n"


@dataclass
class PiExport:
    rolled_back: int = 0
    superseded: int = 0
    history_only: int = 0
    """History-only messages that did not come from pi (pi has no such entry)."""
    entries: int = 0
    notes: list[str] = field(default_factory=list)
    forks: dict[str, str] = field(default_factory=dict)
    """Fork session ID -> the ID of its branch's leaf entry."""
    forks_without_branch: list[str] = field(default_factory=list)
    """Forks that add no entry after their branch point (or end where another
    branch goes on): pi has no leaf for them."""
    fork_entries: int = 0
    checkpoints: list[Record] = field(default_factory=list)
    """The valid checkpoints written, by at_seq."""


def _entry_id(seq: int, message_id: str, taken: set[str]) -> str:
    """pi's IDs are 8 hex digits; a message from pi keeps its own."""
    candidate = message_id if message_id and len(message_id) <= 36 else f"{seq:08x}"
    while candidate in taken:
        candidate = uuid.uuid4().hex[:8]
    taken.add(candidate)
    return candidate


def pi_summary(record: Record, pinned_state: str) -> str:
    """The summary as pi puts it between its <summary> tags: ctxwarden's text, with
    what ctxwarden adds after the tags (file lists, pinned state) moved inside."""
    d = record["details"]
    checkpoint = Checkpoint(
        compaction_id=record["compaction_id"],
        session_id="",
        summary=record["summary"],
        first_kept_seq=int(record["first_kept_seq"]),
        tokens_before=int(record["tokens_before"]),
        create_time_us=int(record["create_time_us"]),
        turn_prefix_summary=d.get("turn_prefix_summary", ""),
        read_files=tuple(d.get("read_files", ())),
        modified_files=tuple(d.get("modified_files", ())),
        preserved_anchors=d.get("preserved_anchors", ""),  # shown in the pinned state
    )
    text = summary_text(checkpoint, pinned_state)
    body, _, rest = text[len(SUMMARY_HEAD) :].partition("\n</summary>")
    return body + rest


def pi_entries(
    records: Iterable[Record], stats: PiExport, inherited: Iterable[Record] = ()
) -> Iterator[Entry]:
    """The pi header and entries for the records of one ctxwarden session.

    ``inherited``: checkpoints of the branch a fork leaves that were made before
    its branch point; the fork holds only the one in force there, these others
    put it on the same entries as its parent (pi's context is the same)."""
    it = iter(records)
    session = next(it)
    labels = session.get("labels", {})
    yield {
        "type": "session",
        "version": CURRENT_SESSION_VERSION,
        "id": labels.get("pi.session_id") or str(uuid.uuid4()),
        "timestamp": iso(int(session["create_time_us"])),
        "cwd": labels.get("pi.cwd", ""),
    }
    chain = _Chain(stats, inherited, str(session.get("pinned_state", "")))
    for record in it:
        kind = record["type"]
        if kind == "checkpoint":
            chain.checkpoint(record)
        elif kind == "message":
            yield from chain.message(record)
    chain.merge_inherited()
    yield from chain.compactions(None)


class _Chain:
    """The entries of one session as a parent chain: messages in order, each
    valid checkpoint a compaction entry before the first message after it."""

    def __init__(self, stats: PiExport, inherited: Iterable[Record], pinned_state: str) -> None:
        self.stats = stats
        self.inherited = inherited
        self.pinned_state = pinned_state
        self.pending: list[Record] = []  # valid checkpoints, by at_seq
        self.first_kept: dict[int, str] = {}  # first_kept_seq -> entry id, once written
        self.taken: set[str] = set()
        self.parent: str | None = None
        self.merged = False

    def checkpoint(self, record: Record) -> None:
        if record["superseded_at_seq"]:
            self.stats.superseded += 1
        else:
            self.pending.append(record)

    def merge_inherited(self) -> None:
        """Once, after the checkpoints (which come before the messages)."""
        if self.merged:
            return
        self.merged = True
        own = {c["compaction_id"] for c in self.pending}
        self.pending.extend(c for c in self.inherited if c["compaction_id"] not in own)
        self.pending.sort(key=lambda c: (int(c["at_seq"]), int(c["create_time_us"])))
        self.stats.checkpoints = list(self.pending)

    def message(self, record: Record) -> Iterator[Entry]:
        self.merge_inherited()
        if record["state"] != "active":
            self.stats.rolled_back += 1
            return
        message = message_of(record)
        if message.history_only and PI_ENTRY not in message.metadata:
            self.stats.history_only += 1
            return
        seq = message.seq
        yield from self.compactions(seq)
        entry = entry_of(message, _entry_id(seq, message.message_id, self.taken), self.parent)
        for c in self.pending:
            fk = int(c["first_kept_seq"])
            if fk <= seq and fk not in self.first_kept:
                self.first_kept[fk] = entry["id"]
        self.parent = entry["id"]
        self.stats.entries += 1
        yield entry

    def compactions(self, before_seq: int | None) -> Iterator[Entry]:
        """The pending checkpoints made before ``before_seq`` (None: all)."""
        while self.pending and (before_seq is None or self.pending[0]["at_seq"] < before_seq):
            c = self.pending.pop(0)
            pi = c["details"].get("pi", {})
            entry: Entry = {
                "type": "compaction",
                "id": _entry_id(0, str(pi.get("id", "")), self.taken),
                "parentId": self.parent,
                "timestamp": pi.get("timestamp") or iso(int(c["create_time_us"])),
                "summary": pi_summary(c, self.pinned_state),
                "firstKeptEntryId": self.first_kept.get(int(c["first_kept_seq"]), ""),
                "tokensBefore": c["tokens_before"],
            }
            for k in ("details", "fromHook"):
                if k in pi:
                    entry[k] = pi[k]
            self.parent = entry["id"]
            yield entry


class _Tree:
    """Entries placed by (parent, content): equal content under one parent is one entry."""

    def __init__(self) -> None:
        self.placed: dict[tuple[str | None, bytes], str] = {}
        self.taken: set[str] = set()
        self.parents: set[str | None] = set()
        self.leaf: str | None = None
        """The last entry of the branch placed last."""

    def place(self, path: Iterable[Entry]) -> Iterator[Entry]:
        """The entries of one branch not placed yet (IDs and links made global);
        ``self.leaf`` is the branch's last entry afterwards."""
        parent: str | None = None
        global_id: dict[str, str] = {}
        for entry in path:
            local = str(entry["id"])
            content = {k: v for k, v in entry.items() if k not in ("id", "parentId")}
            if "firstKeptEntryId" in content:
                kept = str(content["firstKeptEntryId"])
                content["firstKeptEntryId"] = global_id.get(kept, kept)
            digest = hashlib.blake2b(dumps(content).encode(), digest_size=16).digest()
            found = self.placed.get((parent, digest))
            if found is None:
                found = local
                while found in self.taken:
                    found = uuid.uuid4().hex[:8]
                self.taken.add(found)
                self.placed[(parent, digest)] = found
                self.parents.add(parent)
                yield {**entry, **content, "id": found, "parentId": parent}
            global_id[local] = found
            parent = found
        self.leaf = parent


def _by_session(records: Iterable[Record]) -> Iterator[Iterator[Record]]:
    """The records of each session in turn (each starts with its session record)."""
    count = 0

    def session_number(record: Record) -> int:
        nonlocal count
        if record["type"] == "session":
            count += 1
        return count

    for _, group in itertools.groupby(records, session_number):
        yield group


def pi_tree_entries(records: Iterable[Record], stats: PiExport) -> Iterator[Entry]:
    """The pi header and entries for a session's records followed by its forks'
    (each fork after the one it forks from), as one tree."""
    tree = _Tree()
    held: Entry | None = None
    main_leaf: str | None = None
    leaves: dict[str, str | None] = {}
    checkpoints: dict[str, list[Record]] = {}  # session ID -> the valid ones written
    for n, group in enumerate(_by_session(records)):
        first = next(group)
        group = itertools.chain([first], group)
        sid = str(first["session_id"])
        if n == 0:
            path = pi_entries(group, stats)
            yield next(path)  # the header
            for entry in tree.place(path):
                if held is not None:
                    yield held
                held = entry
            main_leaf = tree.leaf
            checkpoints[sid] = stats.checkpoints
            continue
        lineage = first.get("lineage", {})
        parent_seq = int(lineage.get("parent_seq", 0))
        before = [
            c
            for c in checkpoints.get(str(lineage.get("parent_session_id", "")), ())
            if int(c["at_seq"]) <= parent_seq
        ]
        fork_stats = PiExport()
        path = pi_entries(group, fork_stats, before)
        next(path)
        for entry in tree.place(path):
            stats.fork_entries += 1
            yield entry
        leaves[sid] = tree.leaf
        checkpoints[sid] = fork_stats.checkpoints
    if held is not None:
        yield held
    seen: set[str | None] = {None, main_leaf}
    for fork, leaf in leaves.items():
        if leaf in seen or leaf in tree.parents:
            stats.forks_without_branch.append(fork)
        else:
            stats.forks[fork] = str(leaf)
        seen.add(leaf)


def dumps(entry: Entry) -> str:
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
