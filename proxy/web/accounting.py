"""Per-request metrics as pure ASGI middleware: one counter per answered request (by route
template and status) and a gauge of open streams. Per request, never per chunk: the wrapped
`send` only looks at the first message of a response and at the last."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.metrics import Metrics


class RequestMetrics:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        metrics = self.metrics
        status = "none"  # the app raised before answering
        stream = False

        async def counted(message: Message) -> None:
            nonlocal status, stream
            if message["type"] == "http.response.start":
                status = str(message["status"])
                stream = any(name == b"content-type" and value.startswith(b"text/event-stream")
                             for name, value in message.get("headers", ()))
                if stream:
                    metrics.inc("proxy_streams_active", route=_route(scope))
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            route = _route(scope)
            if stream:
                metrics.dec("proxy_streams_active", route=route)
            metrics.inc("proxy_requests_total", route=route, status=status)


def _route(scope: Scope) -> str:
    """The matched route's template (`/v1/responses/{response_id}`), never the raw path: ids in
    labels would make the series grow without bound."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"
