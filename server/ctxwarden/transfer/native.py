"""The ctxwarden session file: JSON Lines, one record a line.

    {"format": "ctxwarden.session", "version": 2, ...}      header
    {"type": "session", ...}                                 the session row
    {"type": "revision", ...}*                               settings revisions
    {"type": "memory_block", ...}*                           memory block history (v2)
    {"type": "checkpoint", ...}*                             compaction checkpoints
    {"type": "message", ...}*                                every message, by seq
    {"type": "end", "messages": N, ...}                      trailer (counts)

Both directions stream: the writer gets records one at a time, the reader
parses one line at a time. A file without its trailer, or whose counts differ
from the trailer's, is refused while it is read (so the import, one
transaction, is rolled back).

Version 2 added the memory block (the session record's ``memory``) and its
history (``memory_block`` records, counted in the trailer); files of version 1
are still read (their sessions have no block).
"""

from __future__ import annotations

import gzip
import io
import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import IO, Any, cast

FORMAT = "ctxwarden.session"
VERSION = 2
COUNTED = ("revision", "memory_block", "checkpoint", "message")
COUNTED_BY_VERSION = {1: ("revision", "checkpoint", "message"), 2: COUNTED}
"""The record kinds each version's trailer counts (the versions read)."""

Record = dict[str, Any]


class BadExport(ValueError):
    """The file is not a complete ctxwarden session file."""


def dumps(record: Record) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def header(session_id: str, tenant: str) -> Record:
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_time": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "source": {"session_id": session_id, "tenant": tenant},
        "records": ["session", "revision*", "memory_block*", "checkpoint*", "message*", "end"],
    }


def write(records: Iterable[Record], out: IO[str]) -> dict[str, int]:
    """Write the records (session record first) with header and trailer; the counts."""
    counts = dict.fromkeys(COUNTED, 0)
    wrote_header = False
    for record in records:
        if not wrote_header:
            out.write(dumps(header(record["session_id"], record.get("tenant", ""))) + "\n")
            wrote_header = True
        kind = record["type"]
        if kind in counts:
            counts[kind] += 1
        out.write(dumps(record) + "\n")
    out.write(dumps({"type": "end", **{f"{k}s": v for k, v in counts.items()}}) + "\n")
    return counts


def read(lines: Iterable[str]) -> Iterator[Record]:
    """The records of a session file, header and trailer checked (not yielded)."""
    it = iter(lines)
    first = next(it, "")
    try:
        head = json.loads(first) if first.strip() else None
    except json.JSONDecodeError:
        head = None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise BadExport(f'not a {FORMAT} file (first line has no "format": "{FORMAT}")')
    version = head.get("version")
    counted = COUNTED_BY_VERSION.get(version) if isinstance(version, int) else None
    if counted is None:
        raise BadExport(f"{FORMAT} version {head.get('version')!r} is not supported")
    counts = dict.fromkeys(counted, 0)
    for n, line in enumerate(it, start=2):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadExport(f"line {n} is not JSON: {exc}") from None
        kind = record.get("type") if isinstance(record, dict) else None
        if kind == "end":
            expected = {k: record.get(f"{k}s") for k in counted}
            if expected != counts:
                raise BadExport(f"the trailer counts {expected}, the file holds {counts}")
            return
        if kind in counts:
            counts[kind] += 1
        yield record
    raise BadExport("the file ends before its trailer (truncated?)")


def sniff(path: str) -> bool:
    """Whether a file starts like a ctxwarden session file."""
    with open_text(path, "r") as f:
        return f.readline().startswith('{"format":"ctxwarden.session"')


@contextmanager
def open_text(path: str, mode: str) -> Iterator[IO[str]]:
    """A text file, gzip-compressed when its name ends in .gz; "-": stdin/stdout."""
    if path == "-":
        stream = sys.stdout if mode == "w" else sys.stdin
        yield stream
        if mode == "w":
            stream.flush()
        return
    if path.endswith(".gz"):
        with (
            gzip.open(path, mode + "b") as raw,
            io.TextIOWrapper(cast(IO[bytes], raw), encoding="utf-8", newline="\n") as f,
        ):
            yield f
        return
    with open(path, mode, encoding="utf-8", newline="\n") as f:
        yield f
