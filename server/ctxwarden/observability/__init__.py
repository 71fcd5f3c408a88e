"""Observability: Prometheus metrics, structured logs, OpenTelemetry tracing, health.

Submodules are imported where they are used, so importing one (for example
``observability.logging``) pulls in nothing else of it:

- ``metrics``: the per-server ``Metrics`` (a dedicated Prometheus registry), the
  ``ServiceMetrics`` hooks the service layer is given, and the ``/metrics`` HTTP server.
- ``logging``: JSON / text log formatting and the per-RPC context (records carry the
  tenant of ``api.tenancy.current_tenant``).
- ``tracing``: optional OpenTelemetry tracing (imported lazily; needs opentelemetry-sdk).
- ``interceptor``: the grpc.aio server interceptor (metrics, access log, spans per RPC).
- ``db``: SQLAlchemy engine events (query latency, pool usage, spans per statement).
- ``health``: the database probe that drives ``grpc.health.v1``.
"""
