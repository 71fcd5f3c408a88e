"""The read-only web console: server-rendered pages over the service layer.

It runs in the server's event loop (uvicorn serving a Starlette app), calls the
same use cases as the gRPC API and applies the same authentication and tenancy
(api/auth.py, core/tenancy.py). Templates, the stylesheet and nothing else ship
in ``data/``: no script at all, a strict Content-Security-Policy, no external
assets.
"""
