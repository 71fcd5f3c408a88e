"""Structured logs: one JSON object per line (or readable text), with RPC context.

Every record may carry extra fields in ``record.ctxw_fields`` (a dict); the
access log uses this for method, code, latency and so on. While an RPC runs,
records logged by any module also get that RPC's ``method``, ``request_id``,
``session_id`` and ``tenant``, and the trace and span ids when tracing is on.

Message content never goes into these fields; the access log adds a request
dump only when the ``ctxwarden.access`` logger is at DEBUG.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TextIO

from ctxwarden.util.tenant_context import current_tenant

REQUEST_ID_METADATA_KEY = "x-request-id"
FIELDS_ATTR = "ctxw_fields"


@dataclass(slots=True)
class RpcInfo:
    """What log records logged during an RPC are tagged with."""

    method: str
    request_id: str = ""
    session_id: str = ""
    tenant: str = ""

    def note_tenant(self, tenant: str) -> None:
        """Record the authenticated tenant (a ``tenancy.tenant_listener``).

        The access log is written by the outermost interceptor after inner
        layers have returned (and reset ``current_tenant``), so it reads the
        tenant recorded here.
        """
        self.tenant = tenant


current_rpc: ContextVar[RpcInfo | None] = ContextVar("ctxwarden_rpc", default=None)


TraceIdSource = Callable[[], "tuple[str, str] | None"]
_trace_ids: TraceIdSource | None = None
"""Set by observability.tracing while tracing is on: () -> (trace_id, span_id) or None."""


def set_trace_id_source(source: TraceIdSource | None) -> None:
    global _trace_ids
    _trace_ids = source


def _context_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's own fields, then those of the RPC being served and the current span."""
    out: dict[str, Any] = {}
    fields = getattr(record, FIELDS_ATTR, None)
    if isinstance(fields, dict):
        out.update(fields)
    rpc = current_rpc.get()
    if rpc is not None:
        out.setdefault("method", rpc.method)
        if rpc.request_id:
            out.setdefault("request_id", rpc.request_id)
        if rpc.session_id:
            out.setdefault("session_id", rpc.session_id)
    tenant = current_tenant.get() or (rpc.tenant if rpc is not None else "")
    if tenant:
        out.setdefault("tenant", tenant)
    if _trace_ids is not None:
        ids = _trace_ids()
        if ids is not None:
            out.setdefault("trace_id", ids[0])
            out.setdefault("span_id", ids[1])
    return out


def _timestamp(created: float) -> str:
    seconds = int(created)
    micros = int((created - seconds) * 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, then the fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _context_fields(record).items():
            out.setdefault(key, value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """The classic ``time LEVEL logger: message`` line, then ``key=value`` fields."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = _context_fields(record)
        if not fields:
            return line
        extra = " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
        head, sep, tail = line.partition("\n")  # keep a traceback below the fields
        return f"{head} {extra}{sep}{tail}"


def _text_value(value: Any) -> str:
    text = str(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text, ensure_ascii=False)
    return text


LOG_FORMATS = ("json", "text")
QUIET_LOGGERS = ("aiosqlite", "grpc._cython.cygrpc")


def parse_level(level: str) -> int:
    value = logging.getLevelName(level.strip().upper())
    if not isinstance(value, int):
        raise ValueError(f"unknown log level {level!r}: use DEBUG, INFO, WARNING or ERROR")
    return value


def configure_logging(level: str, fmt: str = "json", stream: TextIO | None = None) -> None:
    """Replace the root logger's handlers with one stderr handler in ``fmt``."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}: use json or text")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(parse_level(level))
    for name in QUIET_LOGGERS:  # per-call chatter, even at DEBUG
        logging.getLogger(name).setLevel(max(logging.INFO, root.level))
    core = logging.getLogger("grpc._cython.cygrpc")
    if not any(isinstance(f, ClientGoneFilter) for f in core.filters):
        core.addFilter(ClientGoneFilter())


class ClientGoneFilter(logging.Filter):
    """grpcio logs a stream answer it could not send, because the client went away,
    as an ERROR with a traceback. A client that goes away is routine: keep one INFO line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.getMessage().startswith(
            "ExecuteBatchError raised in core by servicer method"
        ):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg, record.args, record.exc_info, record.exc_text = (
                "client went away before an answer could be sent: %s",
                (record.getMessage().rsplit(" ", 1)[-1],),
                None,
                None,
            )
            return logging.getLogger().isEnabledFor(logging.INFO)
        return True
