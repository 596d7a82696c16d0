"""Refusing new work while the process drains (services/process/drain.py), as pure ASGI middleware.

Every HTTP request is counted in flight while it runs (the drain waits for the count to reach
zero, up to the grace). Once draining, a new request gets 503 `server_shutting_down` with
`Retry-After` and `Connection: close` (the client retries on a fresh connection, which the load
balancer sends elsewhere), except the probes and metrics, which must go on answering: `/readyz`
is how the load balancer learns that this instance is leaving.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.core.errors import ShuttingDown
from proxy.services.process.drain import Drain
from proxy.web.errors import error_response

# Answered while draining: liveness, readiness (which then says `draining`) and metrics.
ALWAYS_ANSWERED = frozenset({"/healthz", "/readyz", "/metrics"})


class DrainMiddleware:
    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if self.drain.draining and scope["path"] not in ALWAYS_ANSWERED:
            if scope["type"] == "websocket":
                # 1013 "try again later", before the handshake is accepted.
                await send({"type": "websocket.close", "code": 1013})
                return
            await error_response(ShuttingDown())(scope, receive, send)
            return
        with self.drain.request():
            await self.app(scope, receive, send)
