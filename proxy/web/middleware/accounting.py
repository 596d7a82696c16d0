"""Per-request metrics as pure ASGI middleware (inside the access log, outside everything else).

What it records, per request and never per chunk:
- at the response's start: a stream (`text/event-stream`) is counted open;
- at a stream's first non-empty body message: its time to first byte (`proxy_ttft_seconds`),
  what a client waits before it sees anything (for a Responses stream: `response.created`);
- at the end (the last byte sent, or the app raising): the request by route template, method
  and status, its duration, the stream closed, and how long the proxy worked before it wrote
  the generation request to a replica (`RequestContext.upstream_sent`, noted by the fleet).

The wrapped `send` tests one boolean, or one dict key, per message. The route label is the
matched route's template (`/v1/responses/{response_id}`), never the raw path: an id in a label
would make one series per response. A request the client left before any answer is 499, one
whose handler raised before answering 500, as in the access log.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.core.context.requestctx import CURRENT
from proxy.telemetry.metrics import Metrics
from proxy.web.middleware.access import CLIENT_CLOSED, failed_status


class RequestMetrics:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        metrics = self.metrics
        started = time.perf_counter()
        context = CURRENT.get()  # set by the access log, outside us
        status = 0
        stream = False
        first_pending = False  # a stream whose first body bytes have not been sent yet

        async def counted(message: Message) -> None:
            nonlocal status, stream, first_pending
            if first_pending:
                if message.get("body"):
                    first_pending = False
                    metrics.first_byte(_route(scope), time.perf_counter() - started)
            elif message["type"] == "http.response.start":
                status = int(message["status"])
                stream = any(name == b"content-type" and value.startswith(b"text/event-stream")
                             for name, value in message.get("headers", ()))
                if stream:
                    first_pending = True
                    metrics.stream_opened(_route(scope))
            await send(message)

        try:
            await self.app(scope, receive, counted)
        except BaseException as exc:
            status = status or failed_status(exc)
            raise
        finally:
            route = _route(scope)
            if stream:
                metrics.stream_closed(route)
            if context is not None and context.upstream_sent is not None:
                metrics.overhead(route, context.upstream_sent - started)
            metrics.request_finished(route, str(scope.get("method", "-")),
                                     status or CLIENT_CLOSED, time.perf_counter() - started)


def _route(scope: Scope) -> str:
    """The matched route's template (`/v1/responses/{response_id}`), never the raw path: ids in
    labels would make the series grow without bound."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"
