"""kill -9 of the server under load, then a restart on the same port.

While the server is gone the agents see UNAVAILABLE (and nothing else); they
retry every call with the same idempotency keys, resume once the server is
back, and the database ends up holding exactly what was acknowledged: calls
that committed just before the kill but never got their answer are replayed
(not applied twice) when retried. (Tool results carry a message_id even in the
agents that otherwise rely on request_id alone: a resent tool result is refused
instead of replayed, see test_idempotent_retries.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path

from tests.reliability.harness import (
    error_log_lines,
    eventually,
    serving,
    show,
    wait_until,
    write_report,
)
from tests.support.agents import LoadOptions, LoadReport, run_agents, verify_database
from tests.support.server import ServerProcess

AGENTS = 100
DOWN_SECONDS = 2.0
RESUMED_OPS = 3
"""Operations every agent must complete after the restart."""


@dataclass
class Timeline:
    killed: float
    restarting: float
    up: float
    resumed: float


async def _kill_and_restart(
    server: ServerProcess, options: LoadOptions
) -> tuple[LoadReport, Timeline]:
    report = LoadReport(options)
    stop = asyncio.Event()
    load = asyncio.create_task(run_agents(server.target, options, report, stop))
    try:
        await wait_until(
            lambda: len(report.agents) == AGENTS and not report.idle_agents(0.0, 4),
            60,
            "every agent to get going",
        )
        await asyncio.sleep(1.0)
        killed = report.now()
        await asyncio.to_thread(server.kill9)
        await asyncio.sleep(DOWN_SECONDS)
        restarting = report.now()
        await asyncio.to_thread(server.start)
        up = report.now()
        await eventually(lambda: not report.idle_agents(up, RESUMED_OPS), 60)
        resumed = report.now()
    except BaseException:
        load.cancel()  # do not let the agents retry for minutes after a failure here
        raise
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await load
    return report, Timeline(killed, restarting, up, resumed)


def test_kill_9_under_load_loses_and_duplicates_nothing(backend_url: str, tmp_path: Path) -> None:
    options = LoadOptions(agents=AGENTS, duration=300, retry_budget=60)
    with serving(backend_url, tmp_path, "--summarizer", "extractive") as server:
        report, tl = asyncio.run(_kill_and_restart(server, options))
        log = server.log_text()  # the restarted server's log
    check = verify_database(backend_url, report.agents)
    write_report(tmp_path / "kill9.json", report, timeline=tl.__dict__)
    print(f"\n[kill -9] {report.describe()}")
    print(
        f"[kill -9] killed at {tl.killed:.2f} s, restarted {tl.restarting:.2f}-{tl.up:.2f} s, "
        f"every agent resumed {tl.resumed - tl.up:.2f} s later"
    )

    assert not report.gave_up(), report.gave_up()[:5]
    idle = report.idle_agents(tl.up, RESUMED_OPS)
    assert not idle, f"{len(idle)} agents did not resume: " + show(
        [e for e in report.errors if e.agent in idle][-8:]
    )
    before = report.errors_between(0, tl.killed)
    assert not before, show(before)
    # While the server was down, and right after: UNAVAILABLE and nothing else.
    assert not report.unexpected_errors(allowed=["UNAVAILABLE"]), show(report.errors)
    outage = report.errors_between(tl.killed, tl.up)
    assert outage, "no agent noticed the server was gone"
    late = [e for e in report.errors if e.t > tl.resumed]
    assert not late, show(late)
    assert report.summary()["retried_ops"] > 0
    assert not report.violations, report.violations[:10]
    # Nothing acknowledged was lost, nothing was stored twice.
    assert not check.problems, check.problems[:10]
    assert check.sessions == AGENTS
    assert not error_log_lines(log), error_log_lines(log)[:5]
