"""SQLAlchemy engine events: statement latency, pool usage, a span per statement."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, event
from sqlalchemy.ext.asyncio import AsyncEngine

if TYPE_CHECKING:
    from ctxwarden.observability.metrics import Metrics
    from ctxwarden.observability.tracing import Span, Tracing

_OPERATIONS = frozenset(
    {"SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "PRAGMA", "CREATE", "DROP", "ALTER",
     "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "SET", "SHOW", "WITH"}
)  # fmt: skip
_STATE = "_ctxw_obs"


def operation(statement: str) -> str:
    """The statement's first keyword (a small, fixed label set)."""
    head = statement.lstrip(" \t\r\n(").split(None, 1)
    word = head[0].upper() if head else ""
    return word if word in _OPERATIONS else "OTHER"


def instrument_engine(
    engine: AsyncEngine, metrics: Metrics | None, tracing: Tracing | None = None
) -> None:
    """Time every statement and count pool checkouts; trace statements when asked."""
    sync = engine.sync_engine
    _listen_statements(sync, metrics, tracing)
    if metrics is not None:
        _listen_pool(sync, metrics)


def _listen_statements(sync: Engine, metrics: Metrics | None, tracing: Tracing | None) -> None:
    system = sync.dialect.name  # "sqlite" or "mysql"

    def before(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        if context is None:
            return
        op = operation(statement)
        span: Span | None = tracing.start_db(op, statement, system) if tracing else None
        setattr(context, _STATE, (time.perf_counter(), op, span))

    def timed(context: Any) -> tuple[str, Span | None] | None:
        """Record the latency of the statement ``context`` ran: its operation and span
        (None for a statement ``before`` did not see)."""
        state = getattr(context, _STATE, None) if context is not None else None
        if state is None:
            return None
        setattr(context, _STATE, None)
        start, op, span = state
        if metrics is not None:
            metrics.db_duration_by(op).observe(time.perf_counter() - start)
        return op, span

    def after(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        _, span = timed(context) or ("", None)
        if span is not None:
            span.finish_ok()

    def failed(exception_context: Any) -> None:
        done = timed(exception_context.execution_context)
        if done is None:
            return
        op, span = done
        if metrics is not None:
            metrics.db_errors_by(op).inc()
        if span is not None:
            span.finish_error(exception_context.original_exception)

    event.listen(sync, "before_cursor_execute", before)
    event.listen(sync, "after_cursor_execute", after)
    event.listen(sync, "handle_error", failed)


def _listen_pool(sync: Engine, metrics: Metrics) -> None:
    pool = sync.pool

    def checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        metrics.db_pool_checkouts.inc()
        metrics.db_pool_in_use.inc()

    def checkin(dbapi_conn: Any, record: Any) -> None:
        metrics.db_pool_in_use.dec()

    def detach(dbapi_conn: Any, record: Any) -> None:
        metrics.db_pool_in_use.dec()  # a detached connection is never checked in

    event.listen(pool, "checkout", checkout)
    event.listen(pool, "checkin", checkin)
    event.listen(pool, "detach", detach)
    if callable(getattr(pool, "size", None)):
        # Read at scrape time: dispose() replaces the pool (its listeners carry over).
        metrics.watch_pool(lambda: int(sync.pool.size()))  # type: ignore[attr-defined]
