"""``ctxwarden usage [SESSION_ID]``: the usage ledger of a session, or of every
session of the caller's tenant, as GetUsage returns it (a table, or --json)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TextIO

from google.protobuf import json_format

from ctxwarden.commands.client import Admin, table
from ctxwarden.v1 import context_service_pb2 as pb

SOURCES = {pb.USAGE_SOURCE_AGENT: "agent", pb.USAGE_SOURCE_SUMMARIZER: "summarizer"}
HEADERS = (
    "source",
    "model",
    "calls",
    "input",
    "cache_read",
    "cache_write",
    "output",
    "reasoning",
    "cost",
)


def add_usage_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    add_client: Callable[[argparse.ArgumentParser], None],
) -> None:
    cmd = sub.add_parser(
        "usage",
        help="tokens providers reported for a session (or every session of the tenant), "
        "and their cost by the server's price table",
    )
    add_client(cmd)
    cmd.add_argument(
        "session_id", nargs="?", default="", help="a session; omit for the tenant's totals"
    )
    cmd.add_argument("--json", action="store_true", help="print GetUsage's answer as JSON")


def _row(source: str, model: str, t: pb.UsageTotals, cost: str) -> list[object]:
    return [
        source,
        model,
        t.calls,
        t.input_tokens,
        t.cache_read_tokens,
        t.cache_write_tokens,
        t.output_tokens,
        t.reasoning_tokens,
        cost,
    ]


def print_usage(admin: Admin, session_id: str, as_json: bool, out: TextIO) -> None:
    report: pb.UsageReport = admin.call("GetUsage", pb.GetUsageRequest(session_id=session_id))
    if as_json:
        out.write(json_format.MessageToJson(report, preserving_proto_field_name=True) + "\n")
        return

    def cost(value: float, priced: bool = True) -> str:
        if not report.priced:
            return "-"
        return f"{value:.6f} {report.currency}" if priced else "no price"

    rows = [
        _row(SOURCES.get(u.source, "?"), u.model or "-", u.totals, cost(u.totals.cost, u.priced))
        for u in report.models
    ]
    rows.append(_row("total", "", report.total, cost(report.total.cost)))
    who = f"session {report.session_id}" if report.session_id else "tenant"
    out.write(f"{who}: {report.session_count} session(s)\n")
    table(rows, HEADERS, out)
    out.write(cache_lines(report.cache))


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def cache_lines(c: pb.CacheLedger) -> str:
    """The cache ledger in three lines."""
    breaks = ", ".join(
        f"{pb.CacheBreakReason.Name(b.reason).removeprefix('CACHE_BREAK_REASON_').lower()} "
        f"{b.count} ({b.tokens_lost} tokens)"
        for b in c.breaks
    )
    return (
        f"cache: {c.builds} inputs built, {c.input_tokens} tokens, predicted cacheable "
        f"{c.predicted_cached_tokens} ({_share(c.predicted_cached_tokens, c.input_tokens)})\n"
        f"cache, calls that reported usage: {c.paired_calls}, predicted "
        f"{c.paired_predicted_cached_tokens}, observed cache read "
        f"{c.paired_observed_cache_read_tokens} of {c.paired_observed_prompt_tokens} prompt tokens "
        f"({_share(c.paired_observed_cache_read_tokens, c.paired_observed_prompt_tokens)})\n"
        f"cache breaks: {breaks or 'none'}\n"
    )
