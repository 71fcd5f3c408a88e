"""The usage ledger <-> protos (GetUsage, Compaction.summarizer_usage)."""

from __future__ import annotations

from ctxwarden.api.tenancy import outer_id
from ctxwarden.core.cache_prefix import CachePrefix
from ctxwarden.core.messages import Usage
from ctxwarden.core.usage_ledger import CacheTotals, TokenTotals, UsageSource
from ctxwarden.service.usage import UsageView
from ctxwarden.v1 import context_service_pb2 as svc_pb
from ctxwarden.v1 import message_pb2 as msg_pb

_SOURCES = {
    UsageSource.AGENT: svc_pb.USAGE_SOURCE_AGENT,
    UsageSource.SUMMARIZER: svc_pb.USAGE_SOURCE_SUMMARIZER,
}


def usage_to_pb(u: Usage) -> msg_pb.Usage:
    return msg_pb.Usage(
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        cache_read_tokens=u.cache_read_tokens,
        cache_write_tokens=u.cache_write_tokens,
        total_tokens=u.total_tokens,
        reasoning_tokens=u.reasoning_tokens,
    )


def totals_to_pb(t: TokenTotals, cost: float) -> svc_pb.UsageTotals:
    return svc_pb.UsageTotals(
        calls=t.calls,
        input_tokens=t.input_tokens,
        cache_read_tokens=t.cache_read_tokens,
        cache_write_tokens=t.cache_write_tokens,
        output_tokens=t.output_tokens,
        reasoning_tokens=t.reasoning_tokens,
        cost=cost,
    )


def usage_report_to_pb(view: UsageView) -> svc_pb.UsageReport:
    return svc_pb.UsageReport(
        session_id=outer_id(view.session_id) if view.session_id else "",
        session_count=view.session_count,
        total=totals_to_pb(*view.totals()),
        summarizer=totals_to_pb(*view.totals(UsageSource.SUMMARIZER)),
        models=[
            svc_pb.ModelUsage(
                model=line.model,
                source=_SOURCES[line.source],
                totals=totals_to_pb(line.totals, line.cost),
                priced=line.priced,
            )
            for line in view.lines
        ],
        priced=bool(view.currency),
        currency=view.currency,
        cache=cache_ledger_to_pb(view.cache),
    )


def cache_prefix_to_pb(p: CachePrefix) -> svc_pb.CachePrefix:
    return svc_pb.CachePrefix(
        shared_tokens=p.shared_tokens,
        shared_bytes=p.shared_bytes,
        input_tokens=p.input_tokens,
        previous_input_tokens=p.previous_tokens,
        break_reason=int(p.reason),  # type: ignore[arg-type]
    )


def cache_ledger_to_pb(c: CacheTotals) -> svc_pb.CacheLedger:
    return svc_pb.CacheLedger(
        builds=c.builds,
        input_tokens=c.input_tokens,
        predicted_cached_tokens=c.predicted_tokens,
        paired_calls=c.paired_calls,
        paired_predicted_cached_tokens=c.paired_predicted_tokens,
        paired_observed_cache_read_tokens=c.paired_cache_read_tokens,
        paired_observed_prompt_tokens=c.paired_prompt_tokens,
        breaks=[
            svc_pb.CacheBreakCount(reason=r, count=n, tokens_lost=t)  # type: ignore[arg-type]
            for r, n, t in c.breaks
        ],
    )
