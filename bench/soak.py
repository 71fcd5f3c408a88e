"""Soak run: simulated agents against one real server for minutes. Does it stay flat?

Run ``.venv/bin/python -m bench.soak [--minutes 5] [--backend mysql|sqlite] [--agents N]
[--json out.json]``.

The agents are the reliability tests' (tests/support/agents.py): each owns a
session and loops over turns (append, BuildModelInput, tool rounds, failed
model calls rolled back, a compaction every few turns), with idempotency keys
and retries. Every second the server's resident memory (VmRSS in
/proc/<pid>/status) and CPU time are sampled. At the end a table gives, per
minute: operations, throughput, latency median and p99 (client side, all
calls), errors, server RSS and CPU. "Flat" compares the last minute with the
second one (the first includes session creation and warm-up): latency median
and p99 within 1.5x, throughput at least 2/3, RSS within 1.2x. Afterwards the
database is read directly to check that every acknowledged message is there
exactly once (as in the reliability tests). The exit status is 1 when an
error, a violation or a database problem was found; flatness is reported, not
enforced.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.support.agents import LoadOptions, LoadReport, run_agents, verify_database
from tests.support.server import ServerProcess

from bench.common import BACKENDS, backend_database, log
from bench.host_load import cpu_seconds

LATENCY_RATIO_MAX = 1.5
THROUGHPUT_RATIO_MIN = 2 / 3
RSS_RATIO_MAX = 1.2


@dataclass
class Window:
    index: int
    start_s: float
    end_s: float
    ops: int
    ops_per_s: float
    median_ms: float
    p99_ms: float
    append_p99_ms: float
    build_p99_ms: float
    errors: int
    rss_mb: float
    """Server VmRSS at the end of the window."""
    rss_max_mb: float
    cpu_pct: float
    """Server CPU time over the window, in % of one core."""


def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


class Sampler:
    """Samples the server's RSS (MB) and CPU time every ``interval`` seconds."""

    def __init__(self, pid: int, report: LoadReport, interval: float = 1.0) -> None:
        self.pid = pid
        self.report = report
        self.interval = interval
        self.samples: list[tuple[float, float, float]] = []
        """(report time, RSS MB, CPU seconds)."""
        self.peak_mb = 0.0

    def sample(self) -> None:
        rss = _status_kb(self.pid, "VmRSS") / 1024
        self.samples.append((self.report.now(), rss, cpu_seconds(self.pid)))
        self.peak_mb = _status_kb(self.pid, "VmHWM") / 1024

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    def at(self, t: float) -> tuple[float, float, float]:
        """The last sample at or before ``t`` (else the first)."""
        before = [s for s in self.samples if s[0] <= t]
        return before[-1] if before else self.samples[0]


async def soak(target: str, pid: int, options: LoadOptions) -> tuple[LoadReport, Sampler]:
    report = LoadReport(options)
    sampler = Sampler(pid, report)
    sampling = asyncio.create_task(sampler.run())
    progress = asyncio.create_task(_progress(report))
    try:
        await run_agents(target, options, report)
    finally:
        for task in (sampling, progress):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        sampler.sample()
    return report, sampler


async def _progress(report: LoadReport) -> None:
    while True:
        await asyncio.sleep(30)
        t = report.now()
        stats = report.latency(since=t - 30)
        log(
            f"{t:6.0f} s: {report.ops(since=t - 30) / 30:6.0f} ops/s, median "
            f"{stats.median_ms:.1f} ms, p99 {stats.p99_ms:.1f} ms, errors {len(report.errors)}"
        )


def windows(report: LoadReport, sampler: Sampler, width: float) -> list[Window]:
    """Per-window figures up to the end of the run proper (not the wind-down, while
    agents finish their last operation)."""
    end = min(report.elapsed, report.options.duration)
    out = []
    n = max(1, math.ceil(end / width - 1e-9))
    for i in range(n):
        t0, t1 = i * width, min((i + 1) * width, end)
        if t1 - t0 < width / 2 and i > 0:
            break  # a last partial window would skew the comparison
        lat = report.latency(since=t0, until=t1)
        s0, s1 = sampler.at(t0), sampler.at(t1)
        in_window = [rss for t, rss, _ in sampler.samples if t0 <= t <= t1] or [s1[1]]
        cpu = (s1[2] - s0[2]) / (s1[0] - s0[0]) * 100 if s1[0] > s0[0] else math.nan
        ops = report.ops(since=t0, until=t1)
        out.append(
            Window(
                index=i + 1,
                start_s=t0,
                end_s=t1,
                ops=ops,
                ops_per_s=ops / (t1 - t0),
                median_ms=lat.median_ms,
                p99_ms=lat.p99_ms,
                append_p99_ms=report.latency("append", t0, t1).p99_ms,
                build_p99_ms=report.latency("build", t0, t1).p99_ms,
                errors=len(report.errors_between(t0, t1)),
                rss_mb=s1[1],
                rss_max_mb=max(in_window),
                cpu_pct=cpu,
            )
        )
    return out


def flatness(rows: list[Window]) -> dict[str, Any]:
    """Last window against the second one (the first includes warm-up)."""
    if len(rows) < 3:
        return {"verdict": "n/a (fewer than 3 windows)"}
    base, last = rows[1], rows[-1]
    ratios = {
        "median": last.median_ms / base.median_ms,
        "p99": last.p99_ms / base.p99_ms,
        "throughput": last.ops_per_s / base.ops_per_s,
        "rss": last.rss_mb / base.rss_mb,
    }
    flat = {
        "median": ratios["median"] <= LATENCY_RATIO_MAX,
        "p99": ratios["p99"] <= LATENCY_RATIO_MAX,
        "throughput": ratios["throughput"] >= THROUGHPUT_RATIO_MIN,
        "rss": ratios["rss"] <= RSS_RATIO_MAX,
    }
    return {
        "compared": f"window {last.index} vs window {base.index}",
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        "flat": flat,
        "latency_flat": flat["median"] and flat["p99"] and flat["throughput"],
        "rss_flat": flat["rss"],
        "verdict": "flat" if all(flat.values()) else "NOT flat",
    }


def table(rows: list[Window], width: float) -> str:
    unit = "min" if width == 60 else f"{width:g}s"
    head = (
        f"{unit:>4} {'ops':>7} {'ops/s':>7} {'median ms':>10} {'p99 ms':>9} "
        f"{'append p99':>11} {'build p99':>10} {'errors':>7} {'RSS MB':>8} "
        f"{'RSS max':>8} {'CPU %':>6}"
    )
    lines = [head, "-" * len(head)]
    for w in rows:
        lines.append(
            f"{w.index:>4} {w.ops:>7} {w.ops_per_s:>7.0f} {w.median_ms:>10.1f} {w.p99_ms:>9.1f} "
            f"{w.append_p99_ms:>11.1f} {w.build_p99_ms:>10.1f} {w.errors:>7} {w.rss_mb:>8.1f} "
            f"{w.rss_max_mb:>8.1f} {w.cpu_pct:>6.0f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=5.0, help="duration (default 5)")
    parser.add_argument("--backend", choices=BACKENDS, default="mysql", help="default mysql")
    parser.add_argument("--agents", type=int, default=200, help="simulated agents (default 200)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--window", type=float, default=60.0, help="seconds per table row")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    options = LoadOptions(agents=args.agents, duration=args.minutes * 60, seed=args.seed)
    with tempfile.TemporaryDirectory(prefix="ctxwarden-soak-") as tmp:
        workdir = Path(tmp)
        with backend_database(args.backend, workdir) as (url, info):
            server = ServerProcess(url, log_dir=workdir, extra_args=["--summarizer", "extractive"])
            server.start()
            assert server.proc is not None
            pid = server.proc.pid
            log(
                f"{args.backend}: server pid {pid} on {server.target}; {args.agents} agents "
                f"for {args.minutes:g} min"
            )
            try:
                report, sampler = asyncio.run(soak(server.target, pid, options))
                alive = server.proc.poll() is None
            finally:
                server.stop()
            log("checking the database")
            check = verify_database(url, report.agents)
    rows = windows(report, sampler, args.window)
    flat = flatness(rows)
    summary = report.summary()
    problems = {
        "errors": summary["errors_by_code"],
        "violations": report.violations[:20],
        "gave_up": report.gave_up()[:20],
        "database": check.problems[:20],
        "server_died": not alive,
    }
    failed = bool(report.errors or report.violations or check.problems or not alive)

    print(f"\nsoak: {args.backend}, {args.agents} agents, {report.elapsed / 60:.1f} min")
    print(report.describe())
    print()
    print(table(rows, args.window))
    print()
    if "ratios" in flat:
        r = flat["ratios"]
        print(
            f"{flat['compared']}: median x{r['median']:.2f}, p99 x{r['p99']:.2f}, "
            f"throughput x{r['throughput']:.2f}, RSS x{r['rss']:.2f} "
            f"(peak {sampler.peak_mb:.0f} MB)"
        )
        print(
            f"latency {'flat' if flat['latency_flat'] else 'NOT flat'}, "
            f"RSS {'flat' if flat['rss_flat'] else 'NOT flat'}: {flat['verdict']}"
        )
    else:
        print(f"flatness: {flat['verdict']}")
    print(
        f"database: {check.sessions} sessions, {check.messages} messages "
        f"({check.rolled_back} rolled back), {check.compactions} checkpoints; "
        f"{len(check.problems)} problems"
    )
    if failed:
        print(f"FAILED: {json.dumps(problems)[:2000]}")
    if args.json:
        data = {
            "backend": args.backend,
            "database": info,
            "minutes": args.minutes,
            "window_s": args.window,
            "windows": [asdict(w) for w in rows],
            "flatness": flat,
            "summary": summary,
            "rss_peak_mb": sampler.peak_mb,
            "rss_samples": [(round(t, 1), round(rss, 1)) for t, rss, _ in sampler.samples],
            "database_check": {
                "sessions": check.sessions,
                "messages": check.messages,
                "rolled_back": check.rolled_back,
                "compactions": check.compactions,
                "problems": check.problems[:100],
            },
            "problems": problems,
            "ok": not failed,
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        args.json.write_text(json.dumps(data, indent=2, default=str))
        log(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
