"""What the encoding cache costs: server RSS with the cache on and off.

Two servers with the same ``--max-hot-sessions`` (one with
``--encoding-cache-mb N``, one with ``0``) receive the same sessions of plain
0.8 KB messages, each built once with BuildModelInput after its append, far
more sessions than stay hot. RSS is sampled after every step of sessions; the
plateau is the largest sample after the hot set filled. The difference of the
plateaus is what the cache really costs; it should stay within its budget
(plus allocator slack), and evicted sessions must not stay behind in it.

    .venv/bin/python -m bench.cache_memory --sessions 6000 --hot 1000 --cache-mb 32
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests.support.server import ServerProcess, migrate_database

from bench.common import log
from bench.memory import _fill, rss_bytes


def rss_curve(
    url: str, log_dir: Path, hot: int, cache_mb: int, sessions: int, step: int, messages: int
) -> list[tuple[int, int]]:
    """(sessions filled, server RSS) after each step."""
    server = ServerProcess(
        url, log_dir, ["--max-hot-sessions", str(hot), "--encoding-cache-mb", str(cache_mb)]
    )
    server.start()
    curve: list[tuple[int, int]] = []
    try:
        assert server.proc is not None
        done = 0
        while done < sessions:
            n = min(step, sessions - done)
            asyncio.run(_fill(server.target, f"s{done}", n, messages, seed=1))
            done += n
            curve.append((done, rss_bytes(server.proc.pid)))
            log(f"cache {cache_mb} MiB: {done} sessions, RSS {curve[-1][1] / 2**20:.0f} MiB")
    finally:
        server.stop()
    return curve


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_memory", description=__doc__)
    parser.add_argument("--sessions", type=int, default=6000, help="sessions in all")
    parser.add_argument("--hot", type=int, default=1000, help="--max-hot-sessions")
    parser.add_argument("--cache-mb", type=int, default=32, help="--encoding-cache-mb when on")
    parser.add_argument("--messages", type=int, default=50, help="0.8 KB messages per session")
    parser.add_argument("--step", type=int, default=1000, help="sessions between RSS samples")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        plateaus = {}
        for mb in (args.cache_mb, 0):
            url = f"sqlite:///{tmp}/cache-{mb}.db"
            migrate_database(url)
            curve = rss_curve(url, Path(tmp), args.hot, mb, args.sessions, args.step, args.messages)
            full = [rss for n, rss in curve if n >= args.hot] or [curve[-1][1]]
            plateaus[mb] = max(full)
    on, off = plateaus[args.cache_mb], plateaus[0]
    print(
        f"{args.sessions} sessions x {args.messages} msgs, --max-hot-sessions {args.hot}: "
        f"RSS plateau {on / 2**20:.0f} MiB with --encoding-cache-mb {args.cache_mb}, "
        f"{off / 2**20:.0f} MiB with 0: the cache costs {(on - off) / 2**20:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
