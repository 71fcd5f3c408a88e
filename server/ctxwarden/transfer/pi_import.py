"""A pi session file -> the records of a ctxwarden session (``import --from pi``).

The active branch (root to the last entry of the file, the leaf pi's
``SessionManager`` opens a file at) becomes the session, in path order:

* model-visible entries (see pi_format) become messages, seq 1, 2, ...;
* every other entry on the path (model and thinking-level changes, labels,
  session info, custom entries) becomes a history-only message, so nothing on
  the branch is lost and ``export --to pi`` writes it back;
* a ``compaction`` entry becomes a checkpoint: pi's summary verbatim,
  ``first_kept_seq`` the seq of ``firstKeptEntryId``, ``tokens_before`` pi's,
  ``at_seq`` the seq of the entry before it.

Entries on other branches are not imported (ctxwarden has no forks yet); the
importer counts them. pi reads a whole file into memory, and so does this.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgpack

from ctxwarden import ids
from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import Message, Role, Visibility
from ctxwarden.core.session import (
    Checkpoint,
    CompactionTrigger,
    ContextPolicy,
    Session,
    effective_policy,
)
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


@dataclass
class PiFile:
    header: Entry
    path: list[Entry]
    """Root to leaf: the active branch."""
    skipped: int
    """Entries on other branches."""


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
    by_id = {e["id"]: e for e in entries}
    path: list[Entry] = []
    node = entries[-1] if entries else None
    while node is not None:
        path.append(node)
        node = by_id.get(node["parentId"]) if node.get("parentId") else None
    path.reverse()
    return PiFile(header, path, len(entries) - len(path))


def _history_only(entry: Entry) -> Message:
    return Message(
        Role.USER,
        (),
        message_id=entry["id"],
        create_time_us=time_us(entry["timestamp"]),
        metadata={PI_ENTRY: compact(entry)},
        visibility=Visibility.HISTORY_ONLY,
    )


def pi_records(
    pi: PiFile, session_id: str, *, system_prompt: str = "", model: str = "", tokenizer: str = ""
) -> Iterator[Record]:
    """The records of the ctxwarden session made from ``pi``'s active branch."""
    messages: list[Message] = []
    found: list[tuple[Checkpoint, dict[str, Any]]] = []
    name, model_seen = "", ""
    for entry in pi.path:
        kind = entry["type"]
        if kind == "compaction":
            found.append(_checkpoint(entry, session_id, messages, pi.path))
            continue
        if kind == "session_info":
            name = entry.get("name") or name
        if kind == "model_change":
            model_seen = entry.get("modelId", model_seen)
        msg = message_of(entry)
        if msg is None:
            msg = _history_only(entry)
        elif msg.role is Role.ASSISTANT and msg.model:
            model_seen = msg.model
        messages.append(replace(msg, seq=len(messages) + 1))
    # firstKeptEntryId past every message before the compaction: nothing kept. The
    # newest checkpoint is the one made last: pi's millisecond times can tie.
    checkpoints: list[Checkpoint] = []
    for c, _ in found:
        after = checkpoints[-1].create_time_us + 1 if checkpoints else 0
        checkpoints.append(
            replace(
                c,
                first_kept_seq=c.first_kept_seq or c.at_seq + 1,
                create_time_us=max(c.create_time_us, after),
            )
        )
    now = ids.now_us()
    created = time_us(pi.header["timestamp"]) if pi.header.get("timestamp") else now
    session = Session(
        session_id=session_id,
        title=name,
        system_prompt=system_prompt,
        model=model or model_seen,
        policy=ContextPolicy(tokenizer=tokenizer),
        labels={
            "pi.session_id": str(pi.header.get("id", "")),
            "pi.cwd": str(pi.header.get("cwd", "")),
        },
        last_seq=len(messages),
        create_time_us=created,
        update_time_us=messages[-1].create_time_us if messages else created,
        version=1,
    )
    spec = effective_policy(session.policy, session.model).tokenizer
    context = SessionContext(session, None, (), load_tokenizer(spec))
    key = context.profile.key
    messages = [replace(m, token_count=context.count(m), counted_with=key) for m in messages]
    latest = checkpoints[-1] if checkpoints else None
    kept = [m for m in messages if latest is None or m.seq >= latest.first_kept_seq]
    context = SessionContext(
        session, latest, [m for m in kept if not m.history_only], context.tokenizer
    )
    session = replace(session, context_tokens=context.context_tokens)
    stored = revision_bytes(session)
    stored += sum(stored_message_bytes(message_row_values(session_id, m)) for m in messages)
    stored += sum(checkpoint_bytes(checkpoint_row_values(c)) for c in checkpoints)
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
        "at_seq": 0,
        "create_time_us": created,
        "settings": msgpack.unpackb(settings_data(session), raw=False),
    }
    for c, (_, pi_fields) in zip(checkpoints, found, strict=True):
        record = checkpoint_record(checkpoint_row_values(c))
        record["details"]["pi"] = pi_fields
        yield record
    for m in messages:
        yield message_record_of(m)


def _checkpoint(
    entry: Entry, session_id: str, before: list[Message], path: list[Entry]
) -> tuple[Checkpoint, dict[str, Any]]:
    """A pi compaction entry as a checkpoint over the messages before it, and the
    pi fields kept in its details (key "pi")."""
    first_kept = 0
    order = {e["id"]: n for n, e in enumerate(path)}
    target = order.get(entry.get("firstKeptEntryId", ""), len(path))
    for m in before:  # the first message at or after firstKeptEntryId on the path
        if order.get(m.message_id, -1) >= target:
            first_kept = m.seq
            break
    kept = ("id", "timestamp", "firstKeptEntryId", "details", "fromHook")
    checkpoint = Checkpoint(
        compaction_id=ids.new_id(),
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
