"""Pure ASGI middleware: `front.py`, the one middleware every request goes through (the request id
and access log, `access.py`; per-request metrics; refusals while draining, `draining.py`; the
body's size limit, `bodylimits.py`; authentication and tenancy, `auth.py`), and the server
span (`tracing.py`, outside it, only when tracing is on). Pure ASGI keeps streaming and
contextvars intact."""
