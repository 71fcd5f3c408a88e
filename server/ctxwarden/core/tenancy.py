"""Internal session keys: a tenant's session IDs are stored as ``TENANT~ID``.

"~" never occurs in a client-visible session ID, so the mapping is unambiguous;
with no tenant (no authentication) the key is the ID itself.
"""

SEPARATOR = "~"


def scoped_id(tenant: str, session_id: str) -> str:
    return f"{tenant}{SEPARATOR}{session_id}" if tenant else session_id


def visible_id(internal: str) -> str:
    """The ID the client knows (without the tenant prefix)."""
    return internal.split(SEPARATOR, 1)[1] if SEPARATOR in internal else internal


def tenant_of(internal: str) -> str:
    return internal.split(SEPARATOR, 1)[0] if SEPARATOR in internal else ""
