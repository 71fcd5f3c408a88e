"""The performance targets, checked against one run's results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.common import Result

MIB = 1 << 20
HOT_RSS_BUDGET = 600 * MIB
STREAM_TARGET = 10_000
CONSOLE_MESSAGES = 100_000
CONSOLE_BUDGET_MS = 1000
TIMELINE_BUDGET_MS = 1000


@dataclass(frozen=True)
class Verdict:
    target: str
    measured: str
    met: bool | None
    """None: not measured in this run."""


def _find(results: Sequence[Result], backend: str, metric: str) -> Result | None:
    for r in results:
        if r.backend == backend and r.metric == metric:
            return r
    return None


def _check(
    results: Sequence[Result],
    target: str,
    backend: str,
    metrics: Sequence[str],
    judge: Callable[[list[Result]], tuple[str, bool]],
) -> Verdict:
    found = [_find(results, backend, m) for m in metrics]
    if any(r is None for r in found):
        return Verdict(f"{target} [{backend}]", "not measured", None)
    measured, met = judge([r for r in found if r is not None])
    return Verdict(f"{target} [{backend}]", measured, met)


def _unary_floor(r: list[Result]) -> tuple[str, bool]:
    """Unary append against a bare round trip plus one durable commit."""
    append, rtt, commit = (x.median_ms or 0 for x in r)
    floor = rtt + commit
    ratio = append / floor if floor else float("inf")
    return f"{append:.2f} ms vs {rtt:.2f} + {commit:.2f} ms = {ratio:.2f}x", ratio <= 1.5


def evaluate(results: Sequence[Result], backends: Sequence[str]) -> list[Verdict]:
    out: list[Verdict] = []
    for b in backends:
        out.append(
            _check(
                results,
                "unary append median <= 2 ms",
                b,
                ["append_unary"],
                lambda r: (f"{r[0].median_ms:.2f} ms", (r[0].median_ms or 0) <= 2.0),
            )
        )
        out.append(
            _check(
                results,
                f">= {STREAM_TARGET:,} durable msgs/s across 100 sessions, streaming, "
                "1 msg/request",
                b,
                ["append_concurrent_stream"],
                lambda r: (
                    f"{r[0].throughput:,.0f} msgs/s",
                    (r[0].throughput or 0) >= STREAM_TARGET,
                ),
            )
        )
        out.append(
            _check(
                results,
                "BuildModelInput hot 1,000 msgs < 2 ms and <= 3x GetSession (whole input)",
                b,
                ["build_model_input_hot", "get_session_hot"],
                lambda r: (
                    f"{r[0].median_ms:.2f} ms = "
                    f"{(r[0].median_ms or 0) / (r[1].median_ms or 1):.1f}x "
                    f"GetSession ({r[1].median_ms:.2f} ms)",
                    (r[0].median_ms or 0) < 2
                    and (r[0].median_ms or 0) <= 3 * (r[1].median_ms or 0),
                ),
            )
        )
        out.append(
            _check(
                results,
                "BuildModelInput hot 1,000 msgs, rendered (Anthropic) <= 1.5x native",
                b,
                ["build_model_input_hot_rendered"],
                lambda r: (
                    f"{r[0].median_ms:.2f} ms = {r[0].extra['ratio_to_native_median']:.2f}x native",
                    r[0].extra["ratio_to_native_median"] <= 1.5,
                ),
            )
        )
        out.append(
            _check(
                results,
                "BuildModelInput agent loop 1,000 msgs, rendered (Anthropic) <= 1.5x native "
                "(resume_token)",
                b,
                ["build_model_input_incremental_rendered"],
                lambda r: (
                    f"{r[0].median_ms:.2f} ms = {r[0].extra['ratio_to_native_median']:.2f}x native",
                    r[0].extra["ratio_to_native_median"] <= 1.5,
                ),
            )
        )
        out.append(
            _check(
                results,
                "BuildModelInput hot 1,000 msgs < 2 ms and <= 3x GetSession (resume_token)",
                b,
                ["build_model_input_incremental"],
                lambda r: (
                    f"{r[0].median_ms:.2f} ms = "
                    f"{r[0].extra['ratio_to_get_session_median']:.1f}x GetSession",
                    (r[0].median_ms or 0) < 2 and r[0].extra["ratio_to_get_session_median"] <= 3,
                ),
            )
        )
        out.append(
            _check(
                results,
                "restore 100,000 msgs with checkpoint <= 2x restore of 100 msgs",
                b,
                ["restore_checkpoint_100000", "restore_no_checkpoint_100"],
                lambda r: (
                    f"{r[0].median_ms:.2f} ms vs {r[1].median_ms:.2f} ms = "
                    f"{(r[0].median_ms or 0) / (r[1].median_ms or 1):.2f}x",
                    (r[0].median_ms or 0) <= 2 * (r[1].median_ms or 0),
                ),
            )
        )
        out.append(
            _check(
                results,
                "restore 100,000 msgs with checkpoint >= 100x faster than ADK get_session, 10k",
                b,
                ["restore_checkpoint_100000", "peers.restore_10000.adk_full"],
                lambda r: (
                    f"{r[0].median_ms:.2f} ms vs ADK {r[1].median_ms:,.0f} ms = "
                    f"{(r[1].median_ms or 0) / (r[0].median_ms or 1):,.0f}x faster",
                    (r[1].median_ms or 0) >= 100 * (r[0].median_ms or 0),
                ),
            )
        )
        out.append(
            _check(
                results,
                "BuildModelInput flat with a checkpoint: 100k vs 100 msgs history <= 2x",
                b,
                ["build_model_input_checkpoint_100000", "build_model_input_checkpoint_100"],
                lambda r: (
                    f"{r[0].median_ms:.2f} ms vs {r[1].median_ms:.2f} ms",
                    (r[0].median_ms or 0) <= 2 * (r[1].median_ms or 0),
                ),
            )
        )
        out.append(
            _check(
                results,
                f"console: session page of a {CONSOLE_MESSAGES:,}-message session "
                f"<= {CONSOLE_BUDGET_MS:,} ms (median; timeline page <= {TIMELINE_BUDGET_MS} ms)",
                b,
                ["console_session_page", "console_timeline_middle"],
                lambda r: (
                    f"{r[0].median_ms:.0f} ms (first load {r[0].extra['first_ms']:.0f} ms), "
                    f"timeline {r[1].median_ms:.0f} ms, {r[0].extra['messages']:,} msgs",
                    (r[0].median_ms or 0) <= CONSOLE_BUDGET_MS
                    and (r[1].median_ms or 0) <= TIMELINE_BUDGET_MS,
                ),
            )
        )
        out.append(
            _check(
                results,
                "BuildModelInput p99 with background compactions running (2 s summariser) "
                "<= 2x without, none past the hard threshold",
                b,
                ["build_model_input_background", "build_model_input_no_background"],
                lambda r: (
                    f"p99 {r[0].p99_ms:.1f} ms vs {r[1].p99_ms:.1f} ms = "
                    f"{(r[0].p99_ms or 0) / (r[1].p99_ms or 1):.2f}x, "
                    f"{r[0].extra['background_compactions']} compactions",
                    (r[0].p99_ms or 0) <= 2 * (r[1].p99_ms or 0)
                    and r[0].extra["background_compactions"] > 0
                    and r[0].extra["over_hard_threshold"] == 0,
                ),
            )
        )
        out.append(
            _check(
                results,
                "unary append median <= 1.5x (bare gRPC round trip + one durable commit)",
                b,
                ["append_unary", "baseline_grpc_unary", "baseline_durable_commit"],
                _unary_floor,
            )
        )
        out.append(
            _check(
                results,
                "tail read, newest 20 of 100,000 msgs <= 2x newest 20 of 100",
                b,
                ["tail_read_100000", "tail_read_100"],
                lambda r: (
                    f"{r[0].median_ms:.2f} ms vs {r[1].median_ms:.2f} ms = "
                    f"{(r[0].median_ms or 0) / (r[1].median_ms or 1):.2f}x",
                    (r[0].median_ms or 0) <= 2 * (r[1].median_ms or 0),
                ),
            )
        )
        mem = [r for r in results if r.backend == b and r.metric.startswith("memory_")]
        if mem:
            r = mem[0]
            sessions = r.extra["sessions"]
            rss = r.extra["rss_after_bytes"]
            out.append(
                Verdict(
                    f"10,000 hot sessions x 50 msgs within {HOT_RSS_BUDGET >> 20} MiB RSS [{b}]",
                    f"{rss / MIB:,.0f} MiB with {sessions:,} sessions",
                    rss <= HOT_RSS_BUDGET if sessions >= 10_000 else None,
                )
            )
    return out


def render(verdicts: Sequence[Verdict]) -> str:
    rows = [("target", "measured", "met")]
    for v in verdicts:
        rows.append((v.target, v.measured, {True: "yes", False: "NO", None: "-"}[v.met]))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = []
    for j, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
