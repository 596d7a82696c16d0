"""The request id and the access log, as one pure ASGI middleware (the outermost of ours).

For every HTTP request:
- the request id is the client's `x-request-id` when it is safe (core/context/requestctx.py), else a
  new `req_<32 hex>`; it is put in the request's context (so the upstream call and every log line
  of the request carry it) and echoed on the response, whatever answers it: a route's JSON, an
  SSE stream, an error from auth or the body limit. A stale `x-request-id` an upstream sent back
  (pass-through) is replaced by ours, so a response never carries two;
- when the request ends (for a stream: when the stream ends), one line on the `proxy.access`
  logger: method, route template (never the raw path, which holds ids), status, duration, key id
  (a short digest of the tenant, itself a digest: never the key), the `x-proxy-cache` header's
  value or `-`, and the replica that served it or `-`. Never a body, a query string or a header
  value other than those.

Per request, never per token: the wrapped `send` does one dict lookup per message and its work
only on `http.response.start`.

The context variable is deliberately not reset when the request ends: uvicorn runs each request
in a task (and context) of its own, so the value dies with it, and Starlette's outermost error
middleware logs an unexpected exception (and answers 500) after we have returned, a log line
that must still carry the id.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.core.context.requestctx import CURRENT, RequestContext, accept_request_id
from proxy.core.context.tracecontext import accept_trace_context
from proxy.web.middleware.auth import header

_HEADER = b"x-request-id"
_CACHE_HEADER = b"x-proxy-cache"
# Scope key of the send a stream's body may use once its first bytes are out (see __call__).
BODY_SEND = "proxy.body_send"
# nginx's code for a request the client closed before an answer was sent.
CLIENT_CLOSED = 499


def failed_status(exc: BaseException | None) -> int:
    """The status to log and count for a request whose app raised before answering: the
    client's own leaving (nginx's 499), else the 500 Starlette's outer error middleware sends.
    None (no answer, nothing raised): 499 too."""
    return 500 if exc is not None and not isinstance(exc, asyncio.CancelledError) \
        else CLIENT_CLOSED


def _trace_context(scope: Scope) -> tuple[str | None, str | None]:
    """The client's W3C trace context, checked (core/context/tracecontext.py): passed on upstream
    when tracing is off. One pass over the headers; nothing kept when there is none."""
    parents: list[str] = []
    states: list[str] = []
    for name, value in scope.get("headers", ()):
        if name == b"traceparent":
            parents.append(value.decode("latin-1"))
        elif name == b"tracestate":
            states.append(value.decode("latin-1"))
    return accept_trace_context(parents, states) if parents else (None, None)


def new_request_id() -> str:
    return f"req_{secrets.token_hex(16)}"


class AccessLog:
    def __init__(self, app: ASGIApp, *, logger: logging.Logger | None = None,
                 new_id: Callable[[], str] = new_request_id) -> None:
        self.app = app
        self.log = logger or logging.getLogger("proxy.access")
        self.new_id = new_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client_id = accept_request_id(header(scope, _HEADER))
        request_id = client_id or self.new_id()
        # A client may send one id on concurrent requests: their upstream ids must differ.
        context = RequestContext(request_id,
                                 upstream_tag=secrets.token_hex(4) if client_id else "")
        context.traceparent, context.tracestate = _trace_context(scope)
        CURRENT.set(context)
        echoed = (_HEADER, request_id.encode("latin-1"))
        started = time.perf_counter()
        status = 0
        cache = "-"

        async def tagged(message: Message) -> None:
            nonlocal status, cache
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = []
                for name, value in message.get("headers", ()):
                    if name.lower() == _HEADER:
                        continue
                    if name.lower() == _CACHE_HEADER:
                        cache = value.decode("latin-1")
                    headers.append((name, value))
                headers.append(echoed)
                message = {**message, "headers": headers}
            await send(message)

        # The send beneath every wrapper of ours, for a stream's body once it has begun
        # (web/eventstream.py, `BODY_SEND`): past the first body bytes the wrappers (ours and
        # Starlette's) only hand messages on, and skipping them spares ~4 frames per token.
        # The proxy's app puts the server's own send there first (app.py: beneath Starlette's
        # error middleware too); served alone, this is the lowest send we see.
        scope.setdefault(BODY_SEND, send)
        try:
            await self.app(scope, receive, tagged)
        except BaseException as exc:
            status = status or failed_status(exc)
            raise
        finally:
            self._write(scope, status, time.perf_counter() - started, cache, context)

    def _write(self, scope: Scope, status: int, seconds: float, cache: str,
               context: RequestContext) -> None:
        fields = {
            "method": scope.get("method", "-"),
            "route": route_template(scope),
            "status": status or CLIENT_CLOSED,
            "duration_ms": round(seconds * 1000, 1),
            "key_id": key_id(scope),
            "cache": cache,
            "replica": context.replica or "-",
        }
        self.log.info("%(method)s %(route)s %(status)d %(duration_ms).1fms key=%(key_id)s "
                      "cache=%(cache)s replica=%(replica)s", fields, extra={"access": fields})


def key_id(scope: Scope) -> str:
    """A short, stable id of the caller's key for logs: the head of the tenant (auth's digest of
    the key), `public` without a key, `-` when auth did not get that far (e.g. a 401)."""
    tenant = scope.get("state", {}).get("tenant")
    if not tenant:
        return "-"
    return str(tenant)[:13]


def route_template(scope: Scope) -> str:
    """The matched route's template (`/v1/responses/{response_id}`): ids stay out of the log."""
    path = getattr(scope.get("route"), "path", None)
    return str(path) if path else "unmatched"
