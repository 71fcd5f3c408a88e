"""Tenant scoping at the API boundary.

Every session belongs to the tenant of the credential that created it.
Internally a tenant's session IDs are prefixed ``TENANT~`` ("~" cannot occur
in a client-visible ID), so one tenant can never name, list or guess its way
into another tenant's session: it simply does not exist for them (NOT_FOUND).
Without authentication the tenant is "" and IDs are unchanged.
"""

from __future__ import annotations

from ctxwarden.core.tenancy import scoped_id, visible_id
from ctxwarden.core.validation import check_session_id
from ctxwarden.observability.logging import current_tenant

__all__ = ["current_tenant", "inner_id", "outer_id"]


def inner_id(session_id: str, field: str = "session_id") -> str:
    """The internal ID of a client-visible session ID, for the current tenant."""
    check_session_id(session_id, field, internal=False)
    return scoped_id(current_tenant.get(), session_id)


def outer_id(internal: str) -> str:
    """The client-visible session ID of an internal one."""
    return visible_id(internal)
