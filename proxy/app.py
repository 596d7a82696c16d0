"""The application factory: `create_app(settings)` wires middleware, routes and the lifespan.

The lifespan builds the `Runtime` (HTTP client, fleet, store, services, worker), hands the web
layer its `WebState` (web/state.py), starts it (first fleet discovery before serving, discovery
loop, background worker) and tears everything down in order at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Lifespan, Receive, Scope, Send

from proxy.runtime import Runtime
from proxy.services.admin.keyring import keyring_of
from proxy.services.process.drain import Drain
from proxy.settings import Settings
from proxy.telemetry.metrics import Metrics
from proxy.telemetry.metricsdir import multiprocess_dir
from proxy.telemetry.tracing import Tracing
from proxy.web.errors import EXCEPTION_HANDLERS, ErrorAnswers
from proxy.web.middleware.access import BODY_SEND
from proxy.web.middleware.auth import Auth
from proxy.web.middleware.bodylimits import BodyLimits
from proxy.web.middleware.forwarded import TrustedProxies
from proxy.web.middleware.front import Front
from proxy.web.middleware.tracing import TraceMiddleware
from proxy.web.routes import admin as routes_admin
from proxy.web.routes import console as routes_console
from proxy.web.routes import conversations as routes_conversations
from proxy.web.routes import files as routes_files
from proxy.web.routes import health as routes_health
from proxy.web.routes import passthrough as routes_passthrough
from proxy.web.routes import prompts as routes_prompts
from proxy.web.routes import responses as routes_responses
from proxy.web.routes import vector_stores as routes_vector_stores
from proxy.web.routes import websocket
from proxy.web.routetable import RouteTable
from proxy.web.state import attach


def create_app(settings: Settings) -> Starlette:
    # Made here, not in the lifespan: the request-counting middleware needs it at build time.
    # Under `serve --workers N`: the instance's sample files (proxy/telemetry/metricsdir.py).
    metrics = Metrics(multiprocess=multiprocess_dir())
    # Made here too: the drain middleware refuses requests once the runtime starts draining.
    draining = Drain()
    # None when tracing is off: then no middleware and no span anywhere (telemetry/tracing.py).
    tracing = Tracing.open(settings.server.otlp_endpoint)
    # Made here too: auth reads the keys, and the runtime keeps the managed ones current.
    keys = keyring_of(settings.tenancy)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        runtime = await Runtime.open(settings, metrics=metrics, draining=draining,
                                     tracing=tracing, keys=keys)
        app.state.runtime = runtime  # the root's own handle (`app_runtime`); web/ never reads it
        attach(app, runtime.web_state())
        try:
            await runtime.start()
        except BaseException:  # e.g. a key both managed and in the keys file: close, then say
            await runtime.aclose()
            raise
        try:
            yield
        finally:
            await runtime.aclose()
            if tracing is not None:  # the last spans, bounded; the exporter blocks: a thread
                await asyncio.to_thread(tracing.shutdown)

    return _ProxyApp(
        routes=[*routes_health.routes, *routes_passthrough.routes, *routes_responses.routes,
                *routes_conversations.routes, *routes_files.routes,
                *routes_prompts.routes, *routes_vector_stores.routes, *websocket.routes,
                *routes_admin.routes, *routes_console.routes],
        middleware=[
            # The request's span, outside everything of ours (a refused request is traced
            # too); the route and the key's digest are read when it ends.
            *([Middleware(TraceMiddleware, tracing=tracing)] if tracing is not None else []),
            # The request id, the access log, metrics, the drain, the body limit and auth, in
            # one frame (web/middleware/front.py says in which order, and why one).
            Middleware(Front, metrics=metrics, drain=draining,
                       limits=BodyLimits(settings.limits.max_body_bytes,
                                         upload_limit=settings.limits.max_file_bytes,
                                         idle=settings.limits.body_timeout),
                       auth=Auth(ring=keys, allow_origins=settings.tenancy.allow_origins),
                       errors=ErrorAnswers(EXCEPTION_HANDLERS),
                       proxies=TrustedProxies(settings.server.forwarded_allow_ips)),
        ],
        lifespan=lifespan,
    )


def app_runtime(app: Starlette) -> Runtime:
    """The lifespan's `Runtime`, once it runs: what the CLI's drain calls (cli.py)."""
    runtime: Runtime = app.state.runtime
    return runtime


class _ProxyApp(Starlette):
    """Starlette's application (its lifespan, `state`, router and `url_for`), without its two
    error middlewares: `Front` maps every exception once (web/errors.py `ErrorAnswers`), and
    the route table calls each endpoint without Starlette's wrappers (web/routetable.py). A
    short stored answer went through nine frames of generic layers on the way in and four
    `send` wrappers per message out; ~25-30 µs per request of their own.

    The server's own `send` is kept in the scope (`BODY_SEND`) for the bodies of streams: once
    a stream's first bytes are out, its tokens skip every wrapper (one frame per token less
    than what the access log alone can offer: ~1.5% of the proxy's CPU in the 256-stream
    profile). Only body messages of a started response take that path, and the wrappers only
    hand those on."""

    def __init__(self, *, routes: list[BaseRoute], lifespan: Lifespan[Starlette],
                 **options: Any) -> None:
        super().__init__(routes=routes, lifespan=lifespan, **options)
        # The routes a fixed path can reach, found once (web/routetable.py).
        self.router = RouteTable(routes, lifespan=lifespan)

    def build_middleware_stack(self) -> ASGIApp:
        """Our middleware around the router, and nothing of Starlette's: an exception raised
        outside `Front` (none of our code there raises) reaches uvicorn, which logs it and
        answers its own 500."""
        app: ASGIApp = self.router
        for cls, args, kwargs in reversed(self.user_middleware):
            app = cls(app, *args, **kwargs)
        return app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = self
        if scope["type"] == "http":
            scope[BODY_SEND] = send
        stack = self.middleware_stack
        if stack is None:
            stack = self.middleware_stack = self.build_middleware_stack()
        await stack(scope, receive, send)
