"""The request id and the access log: what the front middleware (front.py) does first and last.

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
  value other than those. The line's fields are put together only when the logger would write
  it, and the finished line goes straight to the proxy's own handler when nothing else would
  see it (telemetry/logs.py `access_writer`).

The context variable is deliberately not reset when the request ends: uvicorn runs each request
in a task (and context) of its own, so the value dies with it, and the front middleware logs an
unexpected exception (and answers 500, web/errors.py `ErrorAnswers`) after the access line, a
log line that must still carry the id.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from starlette.types import Scope

from proxy.core.context.requestctx import CURRENT, RequestContext, accept_request_id
from proxy.core.context.tracecontext import accept_trace_context
from proxy.core.ids import random_hex
from proxy.telemetry.logs import access_writer

# Scope key of the send a stream's body may use once its first bytes are out (front.py).
BODY_SEND = "proxy.body_send"
# Scope key of the server's writer of a plain response start (process/headwrite.py
# `quick_start`: `(the server's send, message) -> bool`, False for one that `send` must make),
# used by front.py when its `send` is the server's own.
QUICK_START = "proxy.quick_start"
# nginx's code for a request the client closed before an answer was sent.
CLIENT_CLOSED = 499
_LINE = ("%(method)s %(route)s %(status)d %(duration_ms).1fms key=%(key_id)s cache=%(cache)s "
         "replica=%(replica)s")


def failed_status(exc: BaseException | None) -> int:
    """The status to log and count for a request whose app raised before answering: the
    client's own leaving (nginx's 499), else the 500 the front middleware sends for it.
    None (no answer, nothing raised): 499 too."""
    return 500 if exc is not None and not isinstance(exc, asyncio.CancelledError) \
        else CLIENT_CLOSED


def new_request_id() -> str:
    return f"req_{random_hex(16)}"


def request_context(client_id: str | None, new_id: Callable[[], str],
                    traceparents: list[str], tracestates: list[str]) -> RequestContext:
    """The request's context, made current: its id (the client's `x-request-id` when it is
    safe, else a new one) and the client's W3C trace context, checked
    (core/context/tracecontext.py): passed on upstream when tracing is off."""
    accepted = accept_request_id(client_id)
    # A client may send one id on concurrent requests: their upstream ids must differ.
    context = RequestContext(accepted or new_id(),
                             upstream_tag=random_hex(4) if accepted else "")
    if traceparents:
        context.traceparent, context.tracestate = accept_trace_context(traceparents,
                                                                       tracestates)
    CURRENT.set(context)
    return context


def write_access(log: logging.Logger, scope: Scope, status: int, seconds: float, cache: str,
                 context: RequestContext, route: str) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    fields = {
        "method": scope.get("method", "-"),
        "route": route,
        "status": status or CLIENT_CLOSED,
        "duration_ms": round(seconds * 1000, 1),
        "key_id": key_id(scope),
        "cache": cache,
        "replica": context.replica or "-",
    }
    # The proxy's own handler takes the finished line (~8 µs, not the 33-75 of a LogRecord and
    # its formatting: telemetry/logs.py); anything else looking (a second handler, a filter,
    # pytest's capture) gets the record with its `extra`.
    writer = access_writer(log)
    if writer is not None:
        writer.write_access(log.name, _LINE % fields, fields, time.time())
    else:
        log.info(_LINE, fields, extra={"access": fields})


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
