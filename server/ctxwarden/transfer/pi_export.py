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
"""

from __future__ import annotations

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
    )
    text = summary_text(checkpoint, pinned_state)
    body, _, rest = text[len(SUMMARY_HEAD) :].partition("\n</summary>")
    return body + rest


def pi_entries(records: Iterable[Record], stats: PiExport) -> Iterator[Entry]:
    """The pi header and entries for the records of one ctxwarden session."""
    it = iter(records)
    session = next(it)
    labels = session.get("labels", {})
    pinned_state = str(session.get("pinned_state", ""))
    yield {
        "type": "session",
        "version": CURRENT_SESSION_VERSION,
        "id": labels.get("pi.session_id") or str(uuid.uuid4()),
        "timestamp": iso(int(session["create_time_us"])),
        "cwd": labels.get("pi.cwd", ""),
    }
    pending: list[Record] = []  # valid checkpoints, by at_seq
    first_kept: dict[int, str] = {}  # first_kept_seq -> entry id, once written
    taken: set[str] = set()
    parent: str | None = None

    def compactions(before_seq: int | None) -> Iterator[Entry]:
        nonlocal parent
        while pending and (before_seq is None or pending[0]["at_seq"] < before_seq):
            c = pending.pop(0)
            pi = c["details"].get("pi", {})
            entry: Entry = {
                "type": "compaction",
                "id": _entry_id(0, str(pi.get("id", "")), taken),
                "parentId": parent,
                "timestamp": pi.get("timestamp") or iso(int(c["create_time_us"])),
                "summary": pi_summary(c, pinned_state),
                "firstKeptEntryId": first_kept.get(int(c["first_kept_seq"]), ""),
                "tokensBefore": c["tokens_before"],
            }
            for k in ("details", "fromHook"):
                if k in pi:
                    entry[k] = pi[k]
            parent = entry["id"]
            yield entry

    for record in it:
        kind = record["type"]
        if kind == "checkpoint":
            if record["superseded_at_seq"]:
                stats.superseded += 1
            else:
                pending.append(record)
                pending.sort(key=lambda c: int(c["at_seq"]))
            continue
        if kind != "message":
            continue
        if record["state"] != "active":
            stats.rolled_back += 1
            continue
        message = message_of(record)
        if message.history_only and PI_ENTRY not in message.metadata:
            stats.history_only += 1
            continue
        seq = message.seq
        yield from compactions(seq)
        entry = entry_of(message, _entry_id(seq, message.message_id, taken), parent)
        for c in pending:
            fk = int(c["first_kept_seq"])
            if fk <= seq and fk not in first_kept:
                first_kept[fk] = entry["id"]
        parent = entry["id"]
        stats.entries += 1
        yield entry
    yield from compactions(None)


def dumps(entry: Entry) -> str:
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
