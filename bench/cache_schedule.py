"""Cache-aware background compaction: provider cache tokens with and without it.

    .venv/bin/python -m bench.cache_schedule [--seeds 3] [--lifetime 300] [--json out.json]

The scenario suite (``ctxwarden.evaluation.scenarios``, every kind, a few seeds)
is replayed as agent loops through the real service (``SessionManager`` over
SQLite in a temporary directory, the extractive summariser, background
compaction on): before every assistant step the agent builds its model input
(``auto_compact``, the cache ledger's report), then appends the step. Time is
simulated and seeded: tool calls and model answers take seconds, a user's next
task mostly comes within a minute or two, and about one in four comes after a
break longer than the cache lifetime. The scheduler's clock and sleep are the
simulated ones, so its idle timers fire as they would in those gaps, and each
background compaction commits within the gap it was started in (a summariser
faster than the agent's next step).

Each scenario runs twice with the same policy (threshold 7,000 tokens, soft
threshold 60%): ``eager`` compacts at once past the soft threshold (today's
behaviour), ``aware`` sets ``cache_lifetime_seconds``. For each model input the
tokens a provider serves from cache are the prefix it shares with the previous
input (the cache ledger's ``shared_tokens``) if that input was sent less than a
lifetime ago, else 0. The table: cache tokens read, the input tokens not served
from cache (what the provider charges in full), how many fewer of those the
cache-aware schedule sends (absolute and %), compactions (of which at the hard
threshold, where the agent waits for the summariser) and the peak input tokens.
Deterministic: the same arguments print the same table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ctxwarden.app.server import build_manager
from ctxwarden.config import Settings
from ctxwarden.core.compaction.extractive import ExtractiveSummarizer
from ctxwarden.core.messages import Role
from ctxwarden.core.session import Checkpoint, CompactionTrigger, ContextPolicy, Session
from ctxwarden.evaluation.policies import BASE
from ctxwarden.evaluation.scenarios import SCENARIOS, Scenario, build
from ctxwarden.service.manager import SessionManager
from ctxwarden.store.migrate import upgrade

POLICY = ContextPolicy(**BASE, background_compaction_percent=60)
"""Threshold 7,000 tokens; soft threshold 4,200; a waiting session compacts at 5,600."""
MODES = ("eager", "aware")
LONG_BREAK_SHARE = 0.25
"""The share of user turns that come after a break longer than the cache lifetime."""


class ManualTime:
    """A simulated clock (seconds) and the sleep that goes with it: a sleeper
    wakes when ``advance`` moves the clock past its deadline."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self.now + seconds, done)
        self._sleepers.append(entry)
        try:
            await done
        finally:
            self._sleepers.remove(entry)

    @property
    def sleepers(self) -> int:
        return len(self._sleepers)

    async def advance(self, seconds: float) -> None:
        """Move the clock on and let every sleeper that is due run to its next wait."""
        self.now += seconds
        for deadline, done in list(self._sleepers):
            if deadline <= self.now and not done.done():
                done.set_result(None)
        for _ in range(8):  # a woken timer queues its job within a few loop turns
            await asyncio.sleep(0)


@dataclass(slots=True)
class Tally:
    """One scenario run (or a sum of them)."""

    inputs: int = 0
    input_tokens: int = 0
    cache_read: int = 0
    compactions: int = 0
    at_hard_threshold: int = 0
    peak_tokens: int = 0

    @property
    def uncached(self) -> int:
        return self.input_tokens - self.cache_read

    def add(self, other: Tally) -> None:
        self.inputs += other.inputs
        self.input_tokens += other.input_tokens
        self.cache_read += other.cache_read
        self.compactions += other.compactions
        self.at_hard_threshold += other.at_hard_threshold
        self.peak_tokens = max(self.peak_tokens, other.peak_tokens)


@asynccontextmanager
async def service(url: str, clock: ManualTime) -> AsyncIterator[SessionManager]:
    """The service over ``url`` with background compaction on simulated time."""
    settings = Settings(database_url=url, background_compactions=1)
    manager = await build_manager(settings, ExtractiveSummarizer())
    manager.background.clock = clock
    manager.background.sleep = clock.sleep
    manager.start()
    try:
        yield manager
    finally:
        await manager.close()


async def settle(m: SessionManager, clock: ManualTime, seconds: float) -> None:
    """Let ``seconds`` pass; background work started meanwhile commits in them."""
    await clock.advance(seconds)
    await m.background.idle()


async def replay(
    m: SessionManager,
    clock: ManualTime,
    scenario: Scenario,
    policy: ContextPolicy,
    lifetime: int,
    seed: int,
) -> Tally:
    """One scenario as an agent loop; the time gaps are a function of ``seed``
    (the same in both modes); ``lifetime``: the provider cache's."""
    rng = random.Random(f"gaps:{scenario.name}:{seed}")
    session = Session(
        "", system_prompt=scenario.system_prompt, pinned_state=scenario.pinned_state, policy=policy
    )
    sid = (await m.create_session(session, "", None, tenant="")).session_id
    tally = Tally()
    last_input: float | None = None
    for step in scenario.steps:
        if step[0].role is Role.USER:
            long_break = rng.random() < LONG_BREAK_SHARE
            await settle(
                m, clock, lifetime + rng.uniform(60, 1800) if long_break else rng.uniform(10, 120)
            )
        else:
            await settle(m, clock, rng.uniform(1, 10))  # the tools run
            view = await m.build_model_input(sid, 0, auto_compact=True, report_cache=True)
            assert view.cache is not None
            fresh = last_input is not None and clock.now - last_input < lifetime
            tally.inputs += 1
            tally.input_tokens += view.tokens.total_tokens
            tally.cache_read += view.cache.shared_tokens if fresh else 0
            tally.peak_tokens = max(tally.peak_tokens, view.tokens.total_tokens)
            last_input = clock.now
            await settle(m, clock, rng.uniform(2, 30))  # the model answers
        await m.append(sid, list(step), None, None)
    await settle(m, clock, 0)
    checkpoints = await all_checkpoints(m, sid)
    tally.compactions = len(checkpoints)
    tally.at_hard_threshold = sum(c.trigger == CompactionTrigger.THRESHOLD for c in checkpoints)
    return tally


async def all_checkpoints(m: SessionManager, sid: str) -> list[Checkpoint]:
    out: list[Checkpoint] = []
    token = ""
    while True:
        page, token = await m.list_compactions(sid, 50, token)
        out.extend(page)
        if not token:
            return out


async def run(
    kinds: Sequence[str], seeds: Sequence[int], lifetime: int, url: str
) -> dict[str, dict[str, Tally]]:
    """{kind: {mode: tally}}, summed over the seeds, on the migrated database ``url``."""
    policies = {"eager": POLICY, "aware": replace(POLICY, cache_lifetime_seconds=lifetime)}
    out = {kind: {mode: Tally() for mode in MODES} for kind in kinds}
    clock = ManualTime()
    async with service(url, clock) as m:
        for kind in kinds:
            for seed in seeds:
                scenario = build(kind, seed)
                for mode in MODES:
                    tally = await replay(m, clock, scenario, policies[mode], lifetime, seed)
                    out[kind][mode].add(tally)
    return out


def run_on_sqlite(
    kinds: Sequence[str], seeds: Sequence[int], lifetime: int
) -> dict[str, dict[str, Tally]]:
    """``run`` on a new SQLite database in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="ctxw-cache-schedule-") as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
        upgrade(url)
        return asyncio.run(run(kinds, seeds, lifetime, url))


CACHE_READ_PRICE = 0.1
"""A cache read's price relative to an uncached input token (Anthropic and OpenAI: 10%)."""


def _row(kind: str, e: Tally, a: Tally) -> list[str]:
    saved = e.uncached - a.uncached
    cost_e = e.uncached + CACHE_READ_PRICE * e.cache_read
    cost_a = a.uncached + CACHE_READ_PRICE * a.cache_read

    def pct(part: float, whole: float) -> str:
        return f"{100.0 * part / whole:.1f}%" if whole else "-"

    return [
        kind,
        str(e.inputs),
        f"{e.cache_read:,} / {a.cache_read:,}",
        f"{a.cache_read - e.cache_read:+,}",
        f"{e.uncached:,} / {a.uncached:,}",
        f"{saved:,}",
        pct(saved, e.uncached),
        pct(cost_e - cost_a, cost_e),
        f"{e.compactions} / {a.compactions}",
        f"{e.at_hard_threshold} / {a.at_hard_threshold}",
        f"{e.peak_tokens:,} / {a.peak_tokens:,}",
    ]


HEADER = [
    "scenario",
    "inputs",
    "cache read (eager / aware)",
    "more read",
    "uncached (eager / aware)",
    "saved",
    "saved %",
    "cost saved",
    "compactions",
    "at hard threshold",
    "peak tokens",
]


def table(results: dict[str, dict[str, Tally]]) -> str:
    """A Markdown table: per scenario kind and the total."""
    total = {mode: Tally() for mode in MODES}
    for by_mode in results.values():
        for mode in MODES:
            total[mode].add(by_mode[mode])
    rows = [_row(kind, m["eager"], m["aware"]) for kind, m in results.items()]
    rows.append(_row("total", total["eager"], total["aware"]))
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]

    def line(cells: list[str]) -> str:
        padded = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = (
        "|" + "|".join("-" * (w + 1) + ("-" if i == 0 else ":") for i, w in enumerate(widths)) + "|"
    )
    return "\n".join([line(HEADER), rule, *(line(r) for r in rows)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seeds", type=int, default=3, help="seeds 1..N of each scenario kind")
    ap.add_argument("--kinds", default=",".join(SCENARIOS), help="scenario kinds, comma-separated")
    ap.add_argument("--lifetime", type=int, default=300, help="provider cache lifetime (s)")
    ap.add_argument("--json", type=Path, help="also write the tallies as JSON")
    args = ap.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    results = run_on_sqlite(kinds, range(1, args.seeds + 1), args.lifetime)
    print(
        f"policy: window 8000, threshold 7000, soft 60% (4200), wait limit 5600; "
        f"cache lifetime {args.lifetime} s; seeds 1-{args.seeds}; cost: uncached tokens plus "
        f"cache reads at {CACHE_READ_PRICE:.0%} of their price"
    )
    print(table(results))
    if args.json:
        doc = {k: {mode: asdict(t) for mode, t in v.items()} for k, v in results.items()}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
