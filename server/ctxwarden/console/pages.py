"""The console's read-only pages: the session list, one session, a tool output."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from ctxwarden.console.chart import chart
from ctxwarden.console.config import ConsoleConfig
from ctxwarden.console.views import Inheritance, context_rows, pretty_json, timeline, token_bar
from ctxwarden.core.errors import InvalidArgument, NotFound
from ctxwarden.core.model_input import ModelInputView
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.render import Format
from ctxwarden.core.search import ARCHIVED_FILTERS, SESSION_SORTS, SessionQuery
from ctxwarden.core.session import Session
from ctxwarden.core.tenancy import scoped_id, visible_id
from ctxwarden.core.validation import check_session_id
from ctxwarden.service.console import ConsoleReader, Lineage
from ctxwarden.util.loop_slices import stepped

FORMATS = {
    "openai-chat": Format.OPENAI_CHAT,
    "openai-responses": Format.OPENAI_RESPONSES,
    "anthropic": Format.ANTHROPIC_MESSAGES,
    "gemini": Format.GEMINI,
}


class PageNotFound(Exception):
    """A page or session that does not exist for this caller (404)."""


def _int(request: Request, name: str, minimum: int = 0) -> int | None:
    raw = request.query_params.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise PageNotFound(f"{name} must be a number") from None
    if value < minimum:
        raise PageNotFound(f"{name} must be >= {minimum}")
    return value


def internal_id(tenant: str, session_id: str) -> str:
    try:
        check_session_id(session_id, internal=False)
    except InvalidArgument:
        raise PageNotFound("no such session") from None
    return scoped_id(tenant, session_id)


def _cursor(value: tuple[int, str] | None) -> str:
    if value is None:
        return ""
    return base64.urlsafe_b64encode(json.dumps(list(value)).encode()).decode().rstrip("=")


def _uncursor(text: str) -> tuple[int, str] | None:
    if not text:
        return None
    try:
        value = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        return int(value[0]), str(value[1])
    except (ValueError, TypeError, IndexError):
        raise PageNotFound("the page cursor is not valid") from None


def _session_query(request: Request, tenant: str) -> SessionQuery:
    q = request.query_params
    label = q.get("label", "").strip()
    key, _, value = label.partition("=")
    sort = q.get("sort", "created")
    archived = q.get("archived", "all")
    if archived not in ARCHIVED_FILTERS:
        raise PageNotFound(f"archived must be one of {', '.join(ARCHIVED_FILTERS)}")
    fork_of = q.get("fork_of", "").strip()
    return SessionQuery(
        tenant=tenant,
        user_id=q.get("user", "").strip(),
        project_id=q.get("project", "").strip(),
        label_key=key.strip(),
        label_value=value.strip(),
        title=q.get("title", "").strip(),
        sort=sort if sort in SESSION_SORTS else "created",
        descending=q.get("order", "desc") != "asc",
        archived=archived,
        parent=internal_id(tenant, fork_of) if fork_of else "",
    )


def inheritance(session: Session, lineage: Lineage) -> Inheritance:
    """What the timeline marks inherited, and the parent its rows link to."""
    if not lineage.ancestors:
        return Inheritance()
    parent = lineage.ancestors[0]
    link = visible_id(parent.session_id) if parent.session is not None else ""
    return Inheritance(session.fork_seq, link)


@dataclass(frozen=True, slots=True)
class Pages:
    reader: ConsoleReader
    config: ConsoleConfig

    async def sessions(self, request: Request, tenant: str) -> dict[str, Any]:
        query = _session_query(request, tenant)
        after = _uncursor(request.query_params.get("after", ""))
        hits = await self.reader.sessions(query, after, self.config.page_size)
        params = {k: v for k, v in request.query_params.items() if k != "after" and v}
        return {
            "query": query,
            "params": params,
            "sessions": [(visible_id(s.session_id), s) for s in hits.sessions],
            "next_cursor": _cursor(hits.cursor),
            "sorts": SESSION_SORTS,
            "archived_filters": ARCHIVED_FILTERS,
            "fork_of": request.query_params.get("fork_of", "").strip(),
            "first_page": after is None,
            # The tenant's usage ledger, on the first page only (it reads every session row).
            "tenant_usage": await self.reader.manager.usage.tenant(tenant)
            if after is None
            else None,
        }

    async def session(self, request: Request, tenant: str, session_id: str) -> dict[str, Any]:
        sid = internal_id(tenant, session_id)
        try:
            session = await self.reader.session(sid)
        except NotFound:
            raise PageNotFound("no such session") from None
        cfg = self.config
        as_of = _int(request, "as_of", 1)
        fmt_name = request.query_params.get("format", "")
        if fmt_name and fmt_name not in FORMATS:
            raise PageNotFound(f"unknown format {fmt_name!r}")
        view = await self.reader.manager.build_model_input(
            sid, 0, False, as_of, int(FORMATS[fmt_name]) if fmt_name else 0
        )
        current = view if as_of is None and not fmt_name else None
        if current is None:
            current = await self.reader.manager.build_model_input(sid, 0, False, None, 0)
        if view.rendered is not None:
            await stepped(view.rendered.join_steps())  # a big JSON, not in one go
        rendered, rendered_cut = pretty_json(view.rendered_json, cfg.max_rendered_bytes)
        lineage = await self.reader.lineage(session, tenant, cfg.page_size)
        inherited = inheritance(session, lineage)
        tokens = current.tokens
        base = tokens.system_tokens + tokens.tools_tokens
        series = await self.reader.context_series(session, base, cfg.chart_points)
        return {
            "sid": session_id,
            "session": session,
            "view": view,
            "current": current,
            "as_of": as_of,
            "format": fmt_name,
            "formats": list(FORMATS),
            "rendered": rendered,
            "rendered_cut": rendered_cut,
            **await self._timeline(request, sid, current, inherited),
            **self._context(request, view, inherited),
            "summary": view.summary,
            "general_notices": [n for n in view.notices if n.seq == 0],
            "bar": token_bar(view.tokens),
            "chart": chart(series, tokens.compaction_threshold, tokens.context_window),
            "checkpoints": await self.reader.checkpoints(sid),
            "summary_preview": cfg.preview_bytes * 4,
            "keep": {k: v for k, v in request.query_params.items() if k in ("as_of", "format")},
            "lineage": lineage,
            "inherited": inherited,
            "usage": await self.reader.manager.usage.session(sid),
        }

    async def _timeline(
        self, request: Request, sid: str, current: ModelInputView, inherited: Inheritance
    ) -> dict[str, Any]:
        """The timeline: the newest page by default, or the page at/after/before a seq."""
        at, after, before = _int(request, "at", 1), _int(request, "after"), _int(request, "before")
        if at is not None:
            after = at - 1
        page = await self.reader.history(sid, after, before, self.config.page_size)
        return {
            "rows": timeline(page.messages, current, self.config.preview_bytes, inherited),
            "page": page,
            "first_seq": page.messages[0].seq if page.messages else 0,
            "last_page_seq": page.messages[-1].seq if page.messages else 0,
        }

    def _context(
        self, request: Request, view: ModelInputView, inherited: Inheritance
    ) -> dict[str, Any]:
        """The effective context: its newest page by default (it can be long too)."""
        size = self.config.page_size
        kept = len(view.messages) - view.summary_messages
        start = _int(request, "ctx")
        if start is None:
            start = max(0, kept - size)
        start = min(start, max(0, kept - 1))
        return {
            "context_rows": context_rows(
                view, start, start + size, self.config.preview_bytes, inherited
            ),
            "ctx_start": start,
            "ctx_kept": kept,
            "ctx_page": size,
        }

    async def checkpoint(
        self, request: Request, tenant: str, session_id: str, compaction_id: str
    ) -> dict[str, Any]:
        sid = internal_id(tenant, session_id)
        try:
            listed = await self.reader.checkpoints(sid)
            found = [c for c in listed if c.compaction_id == compaction_id]
        except NotFound:
            raise PageNotFound("no such session") from None
        if not found:
            raise PageNotFound("no such checkpoint")
        return {"sid": session_id, "c": found[0]}

    async def tool_output(
        self, request: Request, tenant: str, session_id: str, seq: int
    ) -> dict[str, Any]:
        sid = internal_id(tenant, session_id)
        offset = _int(request, "offset") or 0
        try:
            out = await self.reader.manager.get_tool_output(
                sid, seq, offset, self.config.range_bytes
            )
        except NotFound:
            raise PageNotFound("no such session or message") from None
        except InvalidArgument as exc:
            if exc.reason == ErrorReason.NOT_A_TOOL_RESULT:
                raise PageNotFound(str(exc)) from None
            raise
        end = out.next_offset or out.total_bytes
        return {
            "sid": session_id,
            "seq": seq,
            "out": out,
            "offset": offset,
            "end": end,
            "previous": max(0, offset - self.config.range_bytes) if offset > 0 else None,
        }
