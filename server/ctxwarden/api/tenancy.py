"""Tenant scoping at the API boundary.

Every session belongs to the tenant of the credential that created it.
Internally a tenant's session IDs are prefixed ``TENANT~`` ("~" cannot occur
in a client-visible ID), so one tenant can never name, list or guess its way
into another tenant's session: it simply does not exist for them (NOT_FOUND).
Without authentication the tenant is "" and IDs are unchanged.

The tenant of the RPC being served is request-scoped (``current_tenant``):
authentication sets it, IDs are scoped by it here and log records carry it.
"""

from __future__ import annotations

from contextvars import Token

from ctxwarden.core.tenancy import scoped_id, visible_id
from ctxwarden.core.validation import check_session_id
from ctxwarden.util.tenant_context import current_tenant, tenant_listener

__all__ = ["current_tenant", "enter_tenant", "inner_id", "outer_id", "tenant_listener"]


def enter_tenant(tenant: str) -> Token[str]:
    """Set ``current_tenant`` and tell the RPC's listener, if any.

    Returns the token for ``current_tenant.reset``.
    """
    listener = tenant_listener.get()
    if listener is not None:
        listener(tenant)
    return current_tenant.set(tenant)


def inner_id(session_id: str, field: str = "session_id") -> str:
    """The internal ID of a client-visible session ID, for the current tenant."""
    check_session_id(session_id, field, internal=False)
    return scoped_id(current_tenant.get(), session_id)


def outer_id(internal: str) -> str:
    """The client-visible session ID of an internal one."""
    return visible_id(internal)
