"""The tenant of the RPC being served, as context variables (``api.tenancy`` sets
them; log records read them). Apart from ``api.tenancy`` so that logging, which
the ``--workers`` supervisor configures too, needs nothing of the API."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

current_tenant: ContextVar[str] = ContextVar("ctxwarden_tenant", default="")
"""The authenticated tenant of the RPC being served ("" when unknown).

Set it from the authentication layer (``enter_tenant(tenant)``) inside the RPC's
task. Request metadata never names the tenant: without authentication it is empty.
"""

tenant_listener: ContextVar[Callable[[str], None] | None] = ContextVar(
    "ctxwarden_tenant_listener", default=None
)
"""Told the tenant ``enter_tenant`` sets during the RPC (set by whoever observes
the RPC): the access log is written after inner layers have reset
``current_tenant``, so it records the tenant this way."""
