"""The request's server span, as a pure ASGI middleware (added only when tracing is on).

It continues the client's W3C `traceparent` when there is one, makes the span current for
everything the request runs (the OpenTelemetry context is a `ContextVar`: the handler, the
stream task and the upstream client see it, as they see core/context/requestctx.py's), and ends it
when the request ends (for a stream: when the stream ends). Attributes: method, route template,
status, and the key's id (access.py's `key_id`, a digest: never the key). Per request, never per
token: the wrapped `send` looks at `http.response.start` only.
"""

from __future__ import annotations

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.telemetry.tracing import PROPAGATOR, Tracing
from proxy.web.middleware.access import failed_status, key_id, route_template

_WANTED = (b"traceparent", b"tracestate")


class TraceMiddleware:
    def __init__(self, app: ASGIApp, *, tracing: Tracing) -> None:
        self.app = app
        self.tracer = tracing.tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {name.decode("latin-1"): value.decode("latin-1")
                   for name, value in scope.get("headers", ()) if name.lower() in _WANTED}
        parent = PROPAGATOR.extract(carrier) if carrier else None
        method = scope.get("method", "-")
        span = self.tracer.start_span(method, context=parent, kind=SpanKind.SERVER)
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        status = 0

        async def noted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        failed: BaseException | None = None
        try:
            await self.app(scope, receive, noted)
        except BaseException as exc:
            failed = exc
            raise
        finally:
            otel_context.detach(token)
            _end(span, scope, method, status or failed_status(failed))


def _end(span: Span, scope: Scope, method: str, status: int) -> None:
    """The attributes known once the request is over (the route matched, the key checked)."""
    route = route_template(scope)
    span.update_name(f"{method} {route}")
    span.set_attributes({"http.request.method": method, "http.route": route,
                         "http.response.status_code": status, "proxy.key_id": key_id(scope)})
    if status >= 500:
        span.set_status(trace.StatusCode.ERROR)
    span.end()
