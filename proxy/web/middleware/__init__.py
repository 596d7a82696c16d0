"""Pure ASGI middleware, outermost first: the request id and access log (`access.py`),
the server span (`tracing.py`), per-request metrics (`accounting.py`), refusals while draining
(`draining.py`), authentication and tenancy (`auth.py`), the body's size limit
(`bodylimits.py`). Pure ASGI keeps streaming and contextvars intact."""
