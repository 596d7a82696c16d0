"""The lifespan's `Runtime` on the app: set once (`attach`, app.py's lifespan), read through
`runtime_of` by handlers, sockets and error handlers alike (Starlette's `HTTPConnection` is
the base of both `Request` and `WebSocket`), and by the CLI's drain (`app_runtime`).

A leaf on purpose: web/errors.py renders what every other web module raises, so the helper it
uses must not import them back (web/incoming.py imports web/middleware/auth.py, which imports
errors)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import HTTPConnection

if TYPE_CHECKING:  # the composition root sits above web/: a name for types only
    from proxy.runtime import Runtime


def attach(app: Starlette, runtime: Runtime) -> None:
    app.state.runtime = runtime


def app_runtime(app: Starlette) -> Runtime:
    runtime: Runtime = app.state.runtime
    return runtime


def runtime_of(conn: HTTPConnection) -> Runtime:
    return app_runtime(conn.app)
