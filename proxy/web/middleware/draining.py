"""Refusing new work while the process drains (services/process/drain.py): the front
middleware's check (front.py).

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


def drain_refusal(drain: Drain, scope: Scope) -> ASGIApp | None:
    """What answers a request (or handshake) while the process drains, or None: serve it."""
    if not drain.draining or scope["path"] in ALWAYS_ANSWERED:
        return None
    return _try_later if scope["type"] == "websocket" else error_response(ShuttingDown())


async def _try_later(scope: Scope, receive: Receive, send: Send) -> None:
    # 1013 "try again later", before the handshake is accepted.
    await send({"type": "websocket.close", "code": 1013})
