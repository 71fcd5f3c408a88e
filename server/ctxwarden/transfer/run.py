"""The two commands: arguments and what they run."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO

from ctxwarden.core.tenancy import scoped_id
from ctxwarden.store.engine import make_engine
from ctxwarden.store.errors import StoreError
from ctxwarden.store.transfer import (
    ImportResult,
    Incoming,
    SessionNotFound,
    export_records,
    export_tree,
    has_forks,
    import_records,
    import_sessions,
)
from ctxwarden.transfer import native
from ctxwarden.transfer.native import BadExport, Record
from ctxwarden.transfer.pi_export import PiExport, pi_entries, pi_tree_entries
from ctxwarden.transfer.pi_export import dumps as pi_dumps
from ctxwarden.transfer.pi_import import PiSession, pi_sessions, read_pi


def add_arguments(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ctxwarden.config.serve_options import add_database

    exp = sub.add_parser("export", help="write one session to a JSONL file (or pi's format)")
    add_database(exp)
    exp.add_argument("session_id")
    exp.add_argument("--tenant", default="", help="the session's tenant (default: none)")
    exp.add_argument("--to", choices=("ctxwarden", "pi"), default="ctxwarden")
    exp.add_argument(
        "--no-forks",
        action="store_true",
        help="pi: only the session's branch (default: its forks too, as pi branches)",
    )
    exp.add_argument("-o", "--output", default="-", help="file (.gz: compressed; - stdout)")

    imp = sub.add_parser("import", help="read a session file (ctxwarden's or pi's)")
    add_database(imp)
    imp.add_argument("file", help="file (.gz: compressed; - stdin)")
    imp.add_argument("--tenant", default="", help="tenant to import into (default: none)")
    imp.add_argument("--session-id", default="", help="ID to import as (default: the file's)")
    imp.add_argument("--from", dest="source", choices=("ctxwarden", "pi"), default="ctxwarden")
    pi = imp.add_argument_group("pi files")
    pi.add_argument("--system-prompt", default="", help="pi files hold none (default: empty)")
    pi.add_argument("--model", default="", help="default: the branch's last model")
    pi.add_argument("--tokenizer", default="", help="default: the model's")


class _Sync:
    """Drive an async iterator from synchronous code running in a worker thread."""

    def __init__(self, agen: AsyncIterator[Record], loop: asyncio.AbstractEventLoop) -> None:
        self.agen, self.loop = agen, loop

    async def _next(self) -> Record:
        return await anext(self.agen)

    def __iter__(self) -> Iterator[Record]:
        while True:
            try:
                yield asyncio.run_coroutine_threadsafe(self._next(), self.loop).result()
            except StopAsyncIteration:
                return


async def export_session(
    database_url: str, key: str, out: IO[str], to: str = "ctxwarden", forks: bool = True
) -> list[str]:
    """Stream one session's records to ``out`` (for pi, with its forks unless
    ``forks`` is false); what was written, as lines to print."""
    engine = make_engine(database_url)
    try:
        loop = asyncio.get_running_loop()
        if to == "pi":
            # A tree keeps a fingerprint per entry in memory; a lone session streams.
            tree = forks and await has_forks(engine, key)
            records = (
                export_tree(engine, key) if tree else export_records(engine, key, replays=False)
            )
            stats = PiExport()
            entries = pi_tree_entries if tree else pi_entries

            def write_pi() -> None:
                for entry in entries(_Sync(records, loop), stats):
                    out.write(pi_dumps(entry) + "\n")

            await asyncio.to_thread(write_pi)
            return _pi_export_lines(stats)
        records = export_records(engine, key)
        counts = await asyncio.to_thread(native.write, _Sync(records, loop), out)
        return [", ".join(f"{n} {kind}s" for kind, n in counts.items())]
    finally:
        await engine.dispose()


def _pi_export_lines(stats: PiExport) -> list[str]:
    counts = {
        "pi entries": stats.entries + stats.fork_entries,
        "forks as branches": len(stats.forks),
        "rolled-back messages left out": stats.rolled_back,
        "superseded checkpoints left out": stats.superseded,
        "history-only messages left out": stats.history_only,
    }
    lines = [", ".join(f"{n} {what}" for what, n in counts.items())]
    lines += [f"  fork {fork}: leaf {leaf}" for fork, leaf in stats.forks.items()]
    lines += [
        f"  fork {fork}: no branch of its own (nothing after its branch point)"
        for fork in stats.forks_without_branch
    ]
    return lines


async def import_session(
    database_url: str, records: Iterator[Record], *, tenant: str, session_id: str
) -> ImportResult:
    """Write the session of ``records`` (its file's ID unless ``session_id``)."""
    first = next(records)
    key = scoped_id(tenant, session_id or first["session_id"])

    def all_records() -> Iterator[Record]:
        yield first
        yield from records

    engine = make_engine(database_url)
    try:
        return await import_records(engine, key, all_records())
    finally:
        await engine.dispose()


def run_export(args: argparse.Namespace) -> int:
    key = scoped_id(args.tenant, args.session_id)
    try:
        with native.open_text(args.output, "w") as out:
            lines = asyncio.run(
                export_session(args.database_url, key, out, args.to, not args.no_forks)
            )
    except SessionNotFound:
        if args.output != "-":
            Path(args.output).unlink(missing_ok=True)
        print(f"ctxwarden: no session {args.session_id!r}", file=sys.stderr)
        return 1
    first, *rest = lines
    print("\n".join([f"exported {args.session_id}: {first}", *rest]), file=sys.stderr)
    return 0


def incoming_of(tenant: str, sessions: list[PiSession]) -> list[Incoming]:
    """A pi file's sessions as the store imports them, IDs scoped to ``tenant``."""
    return [
        Incoming(
            scoped_id(tenant, s.session_id),
            s.records,
            scoped_id(tenant, s.parent_id) if s.parent_id else "",
            s.parent_seq,
        )
        for s in sessions
    ]


async def import_pi(
    database_url: str, sessions: list[PiSession], *, tenant: str
) -> list[ImportResult]:
    """Write a pi file's session and its forks, in one transaction."""
    incoming = incoming_of(tenant, sessions)
    engine = make_engine(database_url)
    try:
        return await import_sessions(engine, incoming)
    finally:
        await engine.dispose()


def _counts(result: ImportResult) -> str:
    return (
        f"{result.messages} messages, {result.checkpoints} checkpoints, "
        f"{result.revisions} revisions"
    )


def _pi_lines(pi_file: list[PiSession], results: list[ImportResult], skipped: int) -> list[str]:
    """What an import of a pi file prints: the session, then one line per fork."""
    main, *forks = results
    lines = [f"imported {main.key}: {_counts(main)}; {len(forks)} forks from other branches"]
    if skipped:
        lines[0] += f"; {skipped} entries on no branch skipped"
    keys = {s.session_id: r.key for s, r in zip(pi_file, results, strict=True)}
    for s, r in zip(pi_file[1:], forks, strict=True):
        lines.append(
            f"  fork {r.key} (leaf {s.leaf}) of {keys[s.parent_id]} at seq {s.parent_seq}: "
            f"{_counts(r)}"
        )
    return lines


def run_import(args: argparse.Namespace) -> int:
    try:
        with native.open_text(args.file, "r") as f:
            if args.source == "pi":
                pi = read_pi(f)
                sessions = pi_sessions(
                    pi,
                    args.session_id or str(pi.header.get("id", "")),
                    system_prompt=args.system_prompt,
                    model=args.model,
                    tokenizer=args.tokenizer,
                )
                results = asyncio.run(import_pi(args.database_url, sessions, tenant=args.tenant))
                lines = _pi_lines(sessions, results, pi.skipped)
            else:
                result = asyncio.run(
                    import_session(
                        args.database_url,
                        native.read(f),
                        tenant=args.tenant,
                        session_id=args.session_id,
                    )
                )
                results, lines = [result], [f"imported {result.key}: {_counts(result)}"]
    except (BadExport, ValueError, KeyError, TypeError, StopIteration) as exc:
        print(f"ctxwarden: nothing imported: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except StoreError as exc:
        print(f"ctxwarden: nothing imported: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    renamed = {k: v for r in results for k, v in r.renamed_checkpoints.items()}
    if renamed:
        lines[0] += f"; checkpoint IDs taken, renamed: {renamed}"
    print("\n".join(lines))
    return 0
