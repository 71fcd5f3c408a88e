"""The console's settings (from ``ctxwarden serve --console-listen``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    listen: str
    """HOST:PORT (port 0 picks a free one)."""
    tls_cert: str = ""
    tls_key: str = ""
    """The server's certificate and key: the console is HTTPS with them, and its
    login cookie is ``Secure``."""
    page_size: int = 50
    """Messages per timeline page, sessions per list page."""
    chart_points: int = 200
    """Points of the context-tokens chart (seqs are bucketed beyond)."""
    login_ttl_seconds: float = 8 * 3600.0
    """How long a login (the session cookie) lasts."""
    max_logins_per_tenant: int = 1_000
    """Logins kept at once per tenant (that tenant's oldest go first; no tenant's
    logins ever push out another's)."""
    preview_bytes: int = 600
    """Text longer than this is collapsed in the timeline."""
    range_bytes: int = 16 * 1024
    """Bytes per page of the tool-output viewer."""
    max_rendered_bytes: int = 512 * 1024
    """Rendered provider JSON shown at most (the rest is cut, with a note)."""

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert and self.tls_key)
