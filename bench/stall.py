"""Other tenants' latency while one 100,000-message session is built, replayed and shown.

A real server holds a session of ``--messages`` messages of agent history. A
pinger times a 1-message GetSession every 20 ms on its own connection while
the server does the work that grows with that session, one call after another
(tests/reliability/stall.py): the first native input and the first rendering
in every provider format, the same again (cached), a restore from the
database, replays near the end (native and Gemini), and the console's session
page (plain, rendered, replayed). The pings' median, p99 and maximum during
that work are the figure: a call that holds the event loop delays them all.

Both modes run in the same invocation, on the same database, each on a fresh
server: ``sliced`` (the default server) and ``whole`` (``CTXWARDEN_LOOP_SLICES=0``:
that work in one go, or in a worker thread where it was before). Side by side,
so a busy host slows both alike. The direct message encoder is in both.

    python -m bench.stall --messages 100000 [--backend sqlite|mysql] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.reliability.stall import Outcome, StallServer, build, run

from bench.common import backend_database, log

MODES = (("whole", {"CTXWARDEN_LOOP_SLICES": "0"}), ("sliced", {"CTXWARDEN_LOOP_SLICES": "1"}))
TARGET_P99_MS = 100.0


def measure(url: str, workdir: Path, messages: int, rounds: int) -> dict[str, list[Outcome]]:
    out: dict[str, list[Outcome]] = {name: [] for name, _ in MODES}
    server = StallServer(url, workdir)
    server.start()
    try:
        t0 = time.perf_counter()
        build(server, messages)
        log(f"stall: built {messages:,} messages in {time.perf_counter() - t0:.0f} s")
    finally:
        server.stop()
    for r in range(rounds):
        for name, env in MODES:
            server = StallServer(url, workdir, env)
            server.start()
            try:
                outcome = run(server, messages)
            finally:
                server.stop()
            held = [x for x in server.log_text().splitlines() if "event loop held" in x]
            log(f"stall: round {r + 1} {name}: {outcome.describe()}")
            log(f"stall: round {r + 1} {name}: {len(held)} 'event loop held' lines")
            out[name].append(outcome)
    return out


def table(results: dict[str, list[Outcome]]) -> str:
    def med(name: str, fn: Callable[[Outcome], float]) -> float:
        return statistics.median(fn(o) for o in results[name])

    rows: list[tuple[str, Callable[[Outcome], float]]] = [
        ("ping median ms", lambda o: o.median),
        ("ping p99 ms", lambda o: o.p(0.99)),
        ("ping max ms", lambda o: max(o.pings_ms, default=0.0)),
        ("idle ping p99 ms (before the work)", lambda o: o.p(0.99, idle=True)),
        ("failed pings", lambda o: float(len(o.ping_errors))),
        ("failed work calls", lambda o: float(len(o.op_errors))),
    ]
    first = results["sliced"][0]
    rows += [(f"{op} ms", _op(op)) for op in first.ops_ms]
    lines = [f"{'':44} {'whole':>10} {'sliced':>10} {'sliced/whole':>13}"]
    for label, fn in rows:
        a, b = med("whole", fn), med("sliced", fn)
        ratio = f"{b / a:13.2f}" if a else f"{'-':>13}"
        lines.append(f"{label:44} {a:10.1f} {b:10.1f} {ratio}")
    p99 = med("sliced", lambda o: o.p(0.99))
    verdict = "met" if p99 <= TARGET_P99_MS else "NOT met"
    lines.append(f"target: other calls' p99 <= {TARGET_P99_MS:.0f} ms while it runs: {verdict}")
    return "\n".join(lines)


def _op(name: str) -> Callable[[Outcome], float]:
    return lambda o: o.ops_ms.get(name, 0.0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stall", description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "mysql", "postgres"])
    parser.add_argument("--rounds", type=int, default=1, help="whole/sliced pairs (medians)")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ctxw-bench-stall-") as tmp:
        workdir = Path(tmp)
        with backend_database(args.backend, workdir) as (url, _):
            results = measure(url, workdir, args.messages, args.rounds)
    print(f"{args.backend}, {args.messages:,} messages, {args.rounds} round(s), medians:")
    print(table(results))
    if args.json:
        raw = {
            name: [
                {
                    "pings_ms": o.pings_ms,
                    "idle_ms": o.idle_ms,
                    "ops_ms": o.ops_ms,
                    "ping_errors": o.ping_errors,
                    "op_errors": o.op_errors,
                }
                for o in outcomes
            ]
            for name, outcomes in results.items()
        }
        args.json.write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
