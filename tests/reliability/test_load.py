"""200 simulated agents against one real server for a minute (MySQL) or 15 s (SQLite).

Each agent appends, builds its model input, fails and rolls back a model call
now and then, and compacts every few turns (tests/support/agents.py). The run
must produce no error at all, every agent must keep making progress, and the
database, read directly afterwards, must hold exactly what the agents were
told was stored: nothing lost, nothing duplicated, nothing half-written.
The latency figures go to stdout and to ``load-<backend>.json`` in the test's
tmp dir; they are recorded, not asserted (they depend on the host and its load).
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

from tests.reliability.harness import (
    error_log_lines,
    is_mysql,
    load_seconds,
    serving,
    show,
    write_report,
)
from tests.support.agents import LoadOptions, run_agents, verify_database

AGENTS = 200


def test_agents_under_steady_load(backend_url: str, tmp_path: Path) -> None:
    backend = "mysql" if is_mysql(backend_url) else "sqlite"
    options = LoadOptions(agents=AGENTS, duration=load_seconds(backend_url))
    with serving(backend_url, tmp_path, "--summarizer", "extractive") as server:
        report = asyncio.run(run_agents(server.target, options))
        assert server.proc is not None
        exit_code = server.proc.poll()
        log = server.log_text()
    check = verify_database(backend_url, report.agents)
    data = write_report(
        tmp_path / f"load-{backend}.json",
        report,
        backend=backend,
        database={
            "sessions": check.sessions,
            "messages": check.messages,
            "rolled_back": check.rolled_back,
            "compactions": check.compactions,
            "problems": check.problems[:50],
        },
    )
    print(f"\n[load {backend}] {report.describe()}")
    for op, stats in data["latency_ms_by_op"].items():
        print(
            f"[load {backend}]   {op:9} n={stats['n']:6} median {stats['median_ms']:8.1f} ms"
            f"  p99 {stats['p99_ms']:8.1f} ms"
        )
    print(f"[load {backend}] report: {tmp_path / f'load-{backend}.json'}")

    assert exit_code is None, "the server died under load"
    assert not report.errors, show(report.errors)
    assert not report.gave_up(), report.gave_up()[:5]
    assert not report.violations, report.violations[:10]
    assert not check.problems, check.problems[:10]
    assert check.sessions == AGENTS
    assert check.messages == sum(len(a.acked) for a in report.agents)
    assert not error_log_lines(log), error_log_lines(log)[:5]
    # Every agent made progress, and none was starved by the others.
    turns = sorted(a.turns for a in report.agents)
    ops = sorted(a.ops for a in report.agents)
    # A turn is up to a dozen calls, so on a slow host an agent may finish only one in a
    # 15 s run; starvation is judged by calls, against the median agent.
    assert turns[0] >= 1, f"an agent completed no turn (turns {turns[:3]}..{turns[-3:]})"
    assert ops[0] >= 0.25 * statistics.median(ops), f"starved agent: ops {ops[:3]}..{ops[-3:]}"
    # The whole mix really ran, and was checked.
    by_op = data["latency_ms_by_op"]
    for op in ("append", "build", "rollback", "compact", "prepare", "commit"):
        assert by_op.get(op, {}).get("n", 0) > 0, f"no successful {op} call"
    assert check.rolled_back == sum(len(a.rolled_back) for a in report.agents) > 0
    assert check.compactions > 0
