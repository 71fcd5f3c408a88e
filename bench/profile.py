"""Where a server process spends its CPU: a sampled profile, summed by part.

``recording(pid, path)`` runs ``py-spy record`` (the ``profile`` extra:
``pip install -e '.[profile]'``) on a running server while the block runs;
``summary(path)`` reads the raw samples back and sums the event loop thread's
busy samples (py-spy leaves out a thread that sleeps, waiting for I/O or for
the GIL) by the innermost frame's part: ctxwarden's own packages (api,
service, core, store, observability, ...), the database driver, SQLAlchemy,
asyncio's machinery, gRPC's callbacks (which show as asyncio handles, their code
being compiled), the tokenizer. The benchmarks print it after their figures: it is what
explains the remaining ratio.

A sample names Python frames only: time in a C extension (tiktoken, the
protobuf runtime, a socket's ``send``) is counted to the Python function that
called it, which is where it can be changed.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

IDLE = ("EpollSelector.select", "select (selectors.py")
PARTS = (
    ("tiktoken", "tokenizer (tiktoken)"),
    ("aiomysql", "database driver"),
    ("pymysql", "database driver"),
    ("asyncpg", "database driver"),
    ("aiosqlite", "database driver"),
    ("sqlite3", "database driver"),
    ("sqlalchemy", "SQLAlchemy"),
    ("prometheus_client", "metrics library"),
    ("google/protobuf", "protobuf runtime"),
    ("grpc", "gRPC (Python part)"),
    ("asyncio/events.py", "asyncio callbacks (gRPC's compiled callbacks run here)"),
    ("asyncio/selector_events.py", "asyncio sockets (send/recv)"),
    ("asyncio", "asyncio machinery"),
    ("dataclasses", "dataclasses (replace)"),
    ("<string>", "dataclasses (generated __init__)"),
)
_FRAME = re.compile(r"\((.*?):\d+\)$")


def py_spy() -> str | None:
    """The py-spy executable next to this interpreter, or on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


@contextlib.contextmanager
def recording(pid: int, path: Path, rate: int = 250) -> Iterator[None]:
    """Sample ``pid`` into ``path`` (py-spy's raw format) while the block runs."""
    exe = py_spy()
    if exe is None:
        raise SystemExit("--profile needs py-spy: pip install -e '.[profile]'")
    cmd = [exe, "record", "-p", str(pid), "-o", str(path), "-f", "raw", "-r", str(rate)]
    cmd.append("--threads")  # the summary keeps the loop thread's samples
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        if not path.exists():
            raise SystemExit(f"py-spy wrote no profile: {err.decode(errors='replace')[-300:]}")


def part_of(frame: str) -> str:
    """The part a frame's file belongs to (see PARTS)."""
    found = _FRAME.search(frame)
    path = found.group(1) if found else frame
    if "ctxwarden/" in path:
        pieces = path.split("ctxwarden/")[-1].split("/")
        return f"ctxwarden.{pieces[0]}" if len(pieces) > 1 else "ctxwarden"
    for needle, part in PARTS:
        if needle in path:
            return part
    return "other Python"


def summary(paths: list[Path], thread: str = "MainThread", top: int = 12) -> str:
    """The loop thread's busy samples by part, then its busiest functions."""
    parts: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    busy = 0
    lines = [line for path in paths for line in path.read_text().splitlines()]
    for line in lines:
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if thread not in frames[0] or any(i in frames[-1] for i in IDLE):
            continue
        n = int(count)
        busy += n
        parts[part_of(frames[-1])] += n
        leaves[re.sub(r":\d+\)$", ")", frames[-1])] += n
    if not busy:
        return "profile: no busy samples of the loop thread"
    lines = [f"profile: {busy} busy samples of the loop thread, by part:"]
    lines += [f"  {n / busy * 100:5.1f}%  {part}" for part, n in parts.most_common()]
    lines.append("busiest functions (self time):")
    lines += [f"  {n / busy * 100:5.1f}%  {fn}" for fn, n in leaves.most_common(top)]
    return "\n".join(lines)
