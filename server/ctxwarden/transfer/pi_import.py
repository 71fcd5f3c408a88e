"""A pi session file -> the records of a ctxwarden session and its forks
(``import --from pi``).

The branch of the file's last entry (the leaf pi's ``SessionManager`` opens a
file at) becomes the session; every other leaf's branch becomes a fork of it,
or of the fork whose own entries it leaves (see pi_tree). Along a branch, in
path order:

* model-visible entries (see pi_format) become messages, seq 1, 2, ...;
* every other entry (model and thinking-level changes, labels, session info,
  custom entries) becomes a history-only message, so nothing on the branch is
  lost and ``export --to pi`` writes it back;
* a ``compaction`` entry becomes a checkpoint: pi's summary verbatim,
  ``first_kept_seq`` the seq of ``firstKeptEntryId``, ``tokens_before`` pi's,
  ``at_seq`` the seq of the entry before it.

A fork is stored as ForkSession stores one: the messages up to its branch
point (``parent_seq``; see pi_tree for when it is one less) are its parent's
rows, read through the lineage; it
holds the messages after it, a copy of the checkpoint in force at the branch
point (a checkpoint record marked ``inherited``, under the original's ID) and
the checkpoints of the compactions after it. A fork's ID is ``SESSION_ID.LEAF``
(pi_tree.fork_id). pi reads a whole file into memory, and so does this.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgpack

from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import Message, Role, Visibility
from ctxwarden.core.session import (
    Checkpoint,
    CompactionTrigger,
    ContextPolicy,
    Session,
    effective_policy,
)
from ctxwarden.core.validation import SESSION_ID_RE
from ctxwarden.store.checkpoint_codec import checkpoint_bytes, checkpoint_row_values
from ctxwarden.store.codec import (
    message_row_values,
    revision_bytes,
    session_row_values,
    settings_data,
    stored_message_bytes,
)
from ctxwarden.store.transfer_format import (
    Record,
    checkpoint_record,
    message_record_of,
    session_record,
)
from ctxwarden.tokenizers import load_tokenizer
from ctxwarden.transfer.pi_format import PI_ENTRY, Entry, compact, message_of, time_us
from ctxwarden.transfer.pi_tree import Branch, branches, fork_id
from ctxwarden.util import ids


@dataclass
class PiFile:
    header: Entry
    branches: list[Branch]
    """The active branch first, then the others, each after the one it forks from."""
    skipped: int
    """Entries on no branch (their parentId links form a cycle no leaf hangs from)."""


@dataclass(frozen=True)
class PiSession:
    """One session of an import: the active branch's, or a fork."""

    session_id: str
    leaf: str
    parent_id: str
    """The session it forks from; "" for the active branch's."""
    parent_seq: int
    records: Iterator[Record]
    """Built as they are read: an error on a branch surfaces while it is written."""


def read_pi(lines: Sequence[str] | Iterator[str]) -> PiFile:
    """Parse a pi session file (malformed lines are skipped, as pi does)."""
    header: Entry | None = None
    entries: list[Entry] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if header is None:
            if not isinstance(value, dict) or value.get("type") != "session":
                raise ValueError("not a pi session file (the first line is no session header)")
            header = value
            continue
        entries.append(value)
    if header is None:
        raise ValueError("not a pi session file (empty)")
    if int(header.get("version", 1)) < 3:
        raise ValueError("pi session files before version 3: open them in pi once to migrate")
    found = branches(entries) or [Branch("", (), -1, 0, 0)]
    covered = sum(len(b.path) - b.shared for b in found)
    return PiFile(header, found, len(entries) - covered)


def pi_sessions(
    pi: PiFile, session_id: str, *, system_prompt: str = "", model: str = "", tokenizer: str = ""
) -> list[PiSession]:
    """The session (first) and its forks, each after the session it forks from."""
    if not SESSION_ID_RE.fullmatch(session_id):
        raise ValueError(f"the session ID {session_id[:270]!r} is malformed")
    names = [session_id, *(fork_id(session_id, b.leaf) for b in pi.branches[1:])]
    if len(set(names)) != len(names):
        raise ValueError("two leaves of the file give the same fork ID")
    builder = _Builder(pi.header, system_prompt, model, tokenizer)
    out = []
    for name, b in zip(names, pi.branches, strict=True):
        parent = names[b.parent] if b.parent >= 0 else ""
        out.append(PiSession(name, b.leaf, parent, b.parent_seq, builder.records(b, name)))
    return out


def _history_only(entry: Entry) -> Message:
    return Message(
        Role.USER,
        (),
        message_id=entry["id"],
        create_time_us=time_us(entry["timestamp"]),
        metadata={PI_ENTRY: compact(entry)},
        visibility=Visibility.HISTORY_ONLY,
    )


class _Builder:
    """Builds the records of each branch. An entry on several branches has the
    same seq, message and checkpoint ID on each (they are made once)."""

    def __init__(self, header: Entry, system_prompt: str, model: str, tokenizer: str) -> None:
        self.header = header
        self.system_prompt, self.model, self.tokenizer = system_prompt, model, tokenizer
        self.messages: dict[str, Message] = {}
        self.counted: dict[tuple[str, str], Message] = {}
        self.compaction_ids: dict[str, str] = {}

    def message(self, entry: Entry, seq: int) -> Message:
        msg = self.messages.get(entry["id"])
        if msg is None:
            msg = message_of(entry) or _history_only(entry)
            self.messages[entry["id"]] = msg = replace(msg, seq=seq)
        return msg

    def count(self, m: Message, context: SessionContext) -> Message:
        key = context.profile.key
        counted = self.counted.get((m.message_id, key))
        if counted is None:
            counted = replace(m, token_count=context.count(m), counted_with=key)
            self.counted[(m.message_id, key)] = counted
        return counted

    def _walk(
        self, b: Branch, session_id: str
    ) -> tuple[list[Message], list[tuple[int, Checkpoint, dict[str, Any]]], str, str]:
        """Branch ``b``'s messages, its compactions (entry index, checkpoint, pi
        fields), the session's name and the last model seen."""
        order = {e["id"]: n for n, e in enumerate(b.path)}
        messages: list[Message] = []
        found: list[tuple[int, Checkpoint, dict[str, Any]]] = []
        name, model_seen = "", ""
        for n, entry in enumerate(b.path):
            kind = entry["type"]
            if kind == "compaction":
                found.append((n, *self.checkpoint(entry, session_id, messages, order)))
                continue
            if kind == "session_info":
                name = entry.get("name") or name
            if kind == "model_change":
                model_seen = entry.get("modelId", model_seen)
            msg = self.message(entry, len(messages) + 1)
            if msg.role is Role.ASSISTANT and msg.model:
                model_seen = msg.model
            messages.append(msg)
        return messages, found, name, model_seen

    def _session(
        self, b: Branch, session_id: str, name: str, model: str, messages: list[Message]
    ) -> Session:
        stamp = self.header.get("timestamp")
        created = time_us(stamp) if stamp else ids.now_us()
        labels = {
            "pi.session_id": str(self.header.get("id", "")),
            "pi.cwd": str(self.header.get("cwd", "")),
        }
        if b.parent >= 0:  # a fork
            created = time_us(b.path[b.shared]["timestamp"])
            labels["pi.leaf_id"] = b.leaf
        return Session(
            session_id=session_id,
            title=name,
            system_prompt=self.system_prompt,
            model=self.model or model,
            policy=ContextPolicy(tokenizer=self.tokenizer),
            labels=labels,
            last_seq=len(messages),
            create_time_us=created,
            update_time_us=messages[-1].create_time_us if messages else created,
            version=1,
        )

    def records(self, b: Branch, session_id: str) -> Iterator[Record]:
        """The records of the session made from branch ``b``."""
        messages, found, name, model_seen = self._walk(b, session_id)
        checkpoints = _in_time_order([c for _, c, _ in found])
        parent_seq = b.parent_seq
        # A fork holds the checkpoint in force at its branch point (a copy) and its own.
        in_force = max((n for n, _, _ in found if n < b.shared), default=-1)
        held = [
            (c, pi, n >= b.shared)
            for (n, _, pi), c in zip(found, checkpoints, strict=True)
            if n >= b.shared or n == in_force
        ]
        session = self._session(b, session_id, name, model_seen, messages)
        created = session.create_time_us
        spec = effective_policy(session.policy, session.model).tokenizer
        context = SessionContext(session, None, (), load_tokenizer(spec))
        latest = checkpoints[-1] if checkpoints else None
        first_kept = latest.first_kept_seq if latest is not None else 0
        own = [self.count(m, context) for m in messages[parent_seq:]]
        kept = [self.count(m, context) for m in messages if m.seq >= first_kept]
        context = SessionContext(
            session, latest, [m for m in kept if not m.history_only], context.tokenizer
        )
        session = replace(session, context_tokens=context.context_tokens)
        stored = revision_bytes(session)
        stored += sum(stored_message_bytes(message_row_values(session_id, m)) for m in own)
        stored += sum(checkpoint_bytes(checkpoint_row_values(c)) for c, _, _ in held)
        yield session_record(
            {
                **session_row_values(session),
                "compaction_id": latest.compaction_id if latest else "",
                "stored_bytes": stored,
            }
        )
        yield {
            "type": "revision",
            "revision": 1,
            "at_seq": parent_seq,
            "create_time_us": created,
            "settings": msgpack.unpackb(settings_data(session), raw=False),
        }
        for c, pi_fields, mine in held:
            record = checkpoint_record(checkpoint_row_values(c))
            record["details"]["pi"] = pi_fields
            if not mine:
                record["inherited"] = True
            yield record
        for m in own:
            yield message_record_of(m)

    def checkpoint(
        self, entry: Entry, session_id: str, before: list[Message], order: dict[str, int]
    ) -> tuple[Checkpoint, dict[str, Any]]:
        """A pi compaction entry as a checkpoint over the messages before it, and the
        pi fields kept in its details (key "pi")."""
        first_kept = 0
        target = order.get(entry.get("firstKeptEntryId", ""), len(order))
        for m in before:  # the first message at or after firstKeptEntryId on the path
            if order.get(m.message_id, -1) >= target:
                first_kept = m.seq
                break
        cid = self.compaction_ids.get(entry["id"])
        if cid is None:
            self.compaction_ids[entry["id"]] = cid = ids.new_id()
        kept = ("id", "timestamp", "firstKeptEntryId", "details", "fromHook")
        checkpoint = Checkpoint(
            compaction_id=cid,
            session_id=session_id,
            summary=entry["summary"],
            first_kept_seq=first_kept,
            tokens_before=int(entry.get("tokensBefore", 0)),
            create_time_us=time_us(entry["timestamp"]),
            summarizer="pi:hook" if entry.get("fromHook") else "pi",
            trigger=CompactionTrigger.MANUAL,
            at_seq=len(before),
        )
        return checkpoint, {k: entry[k] for k in kept if k in entry}


def _in_time_order(found: list[Checkpoint]) -> list[Checkpoint]:
    """firstKeptEntryId past every message before the compaction: nothing kept. The
    newest checkpoint is the one made last: pi's millisecond times can tie."""
    checkpoints: list[Checkpoint] = []
    for c in found:
        after = checkpoints[-1].create_time_us + 1 if checkpoints else 0
        checkpoints.append(
            replace(
                c,
                first_kept_seq=c.first_kept_seq or c.at_seq + 1,
                create_time_us=max(c.create_time_us, after),
            )
        )
    return checkpoints
