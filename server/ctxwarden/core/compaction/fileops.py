"""File operations kept by program, not by the summariser."""

from __future__ import annotations

import json
from collections.abc import Iterable

from ctxwarden.core.compaction.types import FileLists, FileToolNames
from ctxwarden.core.messages import Message
from ctxwarden.core.stepwise import EVERY, Steps, finish


def _path(arguments_json: str, key: str) -> str | None:
    try:
        args = json.loads(arguments_json or "{}")
    except ValueError:
        return None
    value = args.get(key) if isinstance(args, dict) else None
    return value if isinstance(value, str) and value else None


def collect_file_ops(
    messages: Iterable[Message], previous: FileLists, tools: FileToolNames
) -> FileLists:
    """Cumulative lists: everything read or modified so far. A file that was
    modified is listed only as modified (read = read minus modified)."""
    return finish(file_ops_steps(messages, previous, tools))


def file_ops_steps(
    messages: Iterable[Message], previous: FileLists, tools: FileToolNames
) -> Steps[FileLists]:
    """``collect_file_ops`` in steps (core.stepwise)."""
    read = set(previous.read)
    modified = set(previous.modified)
    writers = set(tools.write) | set(tools.edit)
    readers = set(tools.read)
    for i, m in enumerate(messages):
        if i % EVERY == EVERY - 1:
            yield
        if m.failed or m.history_only:
            continue
        for call in m.tool_calls:
            if call.tool_name not in readers and call.tool_name not in writers:
                continue
            path = _path(call.arguments_json, tools.path_argument)
            if path is None:
                continue
            if call.tool_name in writers:
                modified.add(path)
            else:
                read.add(path)
    return FileLists(tuple(sorted(read - modified)), tuple(sorted(modified)))


def render_file_lists(files: FileLists) -> str:
    parts = []
    if files.read:
        parts.append("<read-files>\n" + "\n".join(files.read) + "\n</read-files>")
    if files.modified:
        parts.append("<modified-files>\n" + "\n".join(files.modified) + "\n</modified-files>")
    return "\n\n".join(parts)
