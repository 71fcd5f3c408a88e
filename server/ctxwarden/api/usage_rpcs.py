"""GetUsage, a mixin of the ContextService servicer."""

from __future__ import annotations

from typing import Any

from ctxwarden.api.convert_usage import usage_report_to_pb
from ctxwarden.api.tenancy import current_tenant, inner_id
from ctxwarden.api.unary import unary
from ctxwarden.service.manager import SessionManager
from ctxwarden.v1 import context_service_pb2 as pb


class UsageRpcs:
    manager: SessionManager

    @unary
    async def GetUsage(self, request: pb.GetUsageRequest, context: Any) -> pb.UsageReport:
        usage = self.manager.usage
        if request.session_id:
            view = await usage.session(inner_id(request.session_id))
        else:
            view = await usage.tenant(current_tenant.get())
        return usage_report_to_pb(view)
