"""One big session does not stall the other tenants (issue: no call holds the loop).

A real server with its console holds a session of ``MESSAGES`` messages. While
it builds that session's input for the first time in every format, restores
it, replays it (native and Gemini), shows it in the console, plans compactions
of its whole history, forks it and compacts the fork, a pinger times
a 1-message GetSession every 20 ms (tests/reliability/stall.py). Then:

- nothing fails or times out;
- the server reports no window in which its loop thread computed for
  ``MAX_HELD_CPU`` s without running a timer (its "event loop held" lines carry
  the loop thread's CPU time, which a busy host does not inflate). Before the
  fix, a replay at this size held the loop for 1 to 1.7 s;
- no ping waits ``MAX_P99_MS`` (p99, plus twice the pings' p99 before the work
  started: the host's own noise). A sanity bound, loose on purpose: on a
  2-core host also running other tests every ping waits for a core, and the
  issue's 100 ms cannot be told from that noise there (the held-CPU check is
  the one that tells the fix from its absence). bench/stall.py measures the
  p99 against 100 ms, side by side with slicing turned off.
"""

from __future__ import annotations

from pathlib import Path

from tests.reliability.stall import StallServer, build, holds, run

MESSAGES = 20_000
MAX_P99_MS = 1000.0
MAX_HELD_CPU = 0.3
"""CPU seconds of the loop thread in one held window (0.1 s sampling interval
plus the hold); slices are 3 ms, young GC collections a few tens of ms."""


def test_other_calls_stay_fast_while_a_big_session_is_worked_on(
    backend_url: str, tmp_path: Path
) -> None:
    server = StallServer(backend_url, tmp_path)
    server.start()
    try:
        build(server, MESSAGES)
        outcome = run(server, MESSAGES)
        assert server.proc is not None and server.proc.poll() is None, "the server died"
    finally:
        server.stop()
    log = server.log_text()
    print(f"\n[stall] {outcome.describe()}")
    assert not outcome.op_errors, outcome.op_errors
    assert not outcome.ping_errors, outcome.ping_errors[:5]
    assert len(outcome.ops_ms) == 21 and len(outcome.pings_ms) >= 20
    held = [h for h in holds(log) if h[1] >= MAX_HELD_CPU]
    assert not held, f"callbacks held the loop (seconds, CPU seconds, call): {held}"
    noise = outcome.p(0.99, idle=True)
    assert outcome.p(0.99) <= MAX_P99_MS + 2 * noise, outcome.describe()
    assert "database unreachable" not in log and "Traceback" not in log
