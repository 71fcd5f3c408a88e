"""Export and import stream: their memory does not grow with the session.

A session of about 1 MB and one of about 60 MB go through ``ctxwarden import``
and ``ctxwarden export``; the peak RSS of each command (``wait4``) must grow by far
less than the session does. The figures are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctxwarden.core.messages import ContentBlock, Message, Role
from ctxwarden.store.transfer_format import message_record_of
from ctxwarden.transfer.native import write
from tests.support.server import CLI

SMALL, LARGE = 400, 24_000
TEXT_BYTES = 2_400
GROWTH_LIMIT = 24 * 1024 * 1024
"""Allowed growth of peak RSS from the small to the large session (the large
file is ~60 MB bigger)."""


def _session_file(path: Path, sid: str, messages: int) -> int:
    session = {
        "type": "session",
        "session_id": sid,
        "tenant": "",
        "user_id": "",
        "project_id": "",
        "title": "big",
        "system_prompt": "sys",
        "model": "gpt-4o",
        "pinned_state": "",
        "last_seq": messages,
        "context_tokens": 0,
        "revision": 1,
        "consecutive_failures": 0,
        "create_time_us": 1_700_000_000_000_000,
        "update_time_us": 1_700_000_000_000_000,
        "compaction_id": "",
        "stored_bytes": 0,
        "version": 1,
        "tools": [],
        "policy": {
            "context_window": 0,
            "keep_recent_tokens": 0,
            "keep_tool_results": 0,
            "reserve_tokens": 0,
            "tokenizer": "",
            "tool_output_max_bytes": 0,
            "tool_output_max_lines": 0,
        },
        "labels": {},
        "calibration": {"ratio": 1.0, "samples": 0},
        "state": {},
    }

    def records() -> Iterator[dict[str, Any]]:
        yield session
        yield {
            "type": "revision",
            "revision": 1,
            "at_seq": 0,
            "create_time_us": 1_700_000_000_000_000,
            "settings": {"title": "big"},
        }
        filler = "0123456789abcdef" * (TEXT_BYTES // 16)
        for seq in range(1, messages + 1):
            role = Role.USER if seq % 2 else Role.ASSISTANT
            text = f"{seq} {filler}"
            yield message_record_of(
                Message(
                    role,
                    (ContentBlock.of_text(text),),
                    seq=seq,
                    message_id=f"m{seq}",
                    token_count=len(text) // 4,
                    counted_with="heuristic",
                    create_time_us=1_700_000_000_000_000 + seq,
                )
            )

    with path.open("w", encoding="utf-8") as f:
        write(records(), f)
    return path.stat().st_size


def _run(*args: str) -> tuple[float, int]:
    """Seconds and peak RSS (bytes) of one CLI command."""
    start = time.perf_counter()
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, f"{args[0]} failed: {stderr}"
    return seconds, usage.ru_maxrss * 1024


def test_memory_stays_flat(backend_url: str, tmp_path: Path) -> None:
    figures = {}
    for name, count in (("small", SMALL), ("large", LARGE)):
        sid = f"stream-{name}-{os.getpid()}"
        source = tmp_path / f"{name}.jsonl"
        size = _session_file(source, sid, count)
        t_import, rss_import = _run("import", str(source), "--database-url", backend_url)
        out = tmp_path / f"{name}-out.jsonl"
        t_export, rss_export = _run("export", sid, "--database-url", backend_url, "-o", str(out))
        figures[name] = (size, t_import, rss_import, t_export, rss_export)
        with source.open(encoding="utf-8") as a, out.open(encoding="utf-8") as b:
            next(a), next(b)  # headers differ in their export time
            for n, (x, y) in enumerate(zip(a, b, strict=True)):
                if n == 0:  # the session record: its bytes counter is the importer's
                    x, y = json.loads(x), json.loads(y)
                assert x == y
    for name, (size, ti, ri, te, re_) in figures.items():
        print(
            f"\n{name}: {size / 2**20:.1f} MB, {LARGE if name == 'large' else SMALL} messages; "
            f"import {ti:.1f} s, peak RSS {ri / 2**20:.0f} MB; "
            f"export {te:.1f} s, peak RSS {re_ / 2**20:.0f} MB"
        )
    grown = figures["large"][0] - figures["small"][0]
    assert grown > 50 * 2**20
    assert figures["large"][2] - figures["small"][2] < GROWTH_LIMIT, "import memory grew"
    assert figures["large"][4] - figures["small"][4] < GROWTH_LIMIT, "export memory grew"
