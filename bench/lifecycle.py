"""What the session lifecycle costs, in process (service layer, real database):

* ``BuildModelInput`` of a hot session vs the same session archived (restored from
  the database on every call, never kept in memory), and the first call after
  unarchiving;
* a retention run purging N archived sessions of M messages each.

    .venv/bin/python -m bench.lifecycle --messages 1000 --sessions 200
    .venv/bin/python -m bench.lifecycle --database-url mysql+aiomysql://root@127.0.0.1:3306/bench
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from tests.support.inproc import assistant_msg, new_session, replica, user_msg

from ctxwarden.core.retention import RetentionRule, RetentionRules
from ctxwarden.service.manager import SessionManager
from ctxwarden.service.retention import Retention
from ctxwarden.store import migrate
from ctxwarden.util import ids

DAY_US = 86_400_000_000


async def _median_ms(call: Callable[[], Awaitable[object]], n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def _session(m: SessionManager, tenant: str, messages: int) -> str:
    sid = await new_session(m, tenant, f"b-{ids.new_id()}")
    body = "x" * 700
    for i in range(0, messages, 100):
        batch = [
            user_msg(f"{i + j} {body}") if j % 2 == 0 else assistant_msg(f"{i + j} {body}")
            for j in range(min(100, messages - i))
        ]
        await m.append(sid, batch, None, None)
    return sid


async def run(url: str, messages: int, sessions: int, calls: int) -> None:
    await asyncio.to_thread(migrate.upgrade, url)
    async with replica(url) as m:
        sid = await _session(m, "bench", messages)
        hot = await _median_ms(lambda: m.build_model_input(sid, 0), calls)
        await m.archive_session(sid)
        archived = await _median_ms(lambda: m.build_model_input(sid, 0), calls)
        await m.unarchive_session(sid)
        start = time.perf_counter()
        await m.build_model_input(sid, 0)
        first = (time.perf_counter() - start) * 1000
        print(
            f"BuildModelInput, {messages} messages: hot {hot:.2f} ms, archived {archived:.2f} ms "
            f"(median of {calls}), first call after unarchive {first:.2f} ms"
        )
        tenant = f"purge{ids.new_id()[-8:].lower()}"
        for _ in range(sessions):
            await m.archive_session(await _session(m, tenant, 20))
        rules = RetentionRules(tenants={tenant: RetentionRule(purge_archived_after_days=1)})
        later = ids.now_us() + 2 * DAY_US
        start = time.perf_counter()
        report = await Retention(m.store, rules, now_us=lambda: later).run()
        took = time.perf_counter() - start
        purged = sum(report.counts.values())
        print(
            f"purge of {purged} archived sessions x 20 messages: {took:.2f} s "
            f"({purged / took:.0f} sessions/s)"
        )


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--database-url", default="")
    p.add_argument("--messages", type=int, default=1000)
    p.add_argument("--sessions", type=int, default=200)
    p.add_argument("--calls", type=int, default=30)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        asyncio.run(run(url, args.messages, args.sessions, args.calls))


if __name__ == "__main__":
    main()
