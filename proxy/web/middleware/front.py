"""`Front`: the proxy's one ASGI middleware, doing in one frame what a stack of five did.

Per HTTP request, in this order:
0. the client's address and scheme, when a trusted proxy in front names them (forwarded.py:
   what uvicorn's own layer did, read in the same pass over the headers as the rest);
1. the request id and the client's trace context (access.py), set before anything can log;
2. refusals, each answered through the same `send` as any answer (so logged, counted and
   tagged with the id): while draining a 503 (draining.py), a declared body over its limit a
   413 (bodylimits.py), a missing or wrong key a 401/403 (auth.py, `/v1/` only);
3. the app, counted in flight for the drain, reading its body through the limit's counter;
4. at the end (the last byte sent, or the app raising): the request counted by route template,
   method and status, its duration, how long the proxy worked before the generation request was
   written to a replica (`RequestContext.upstream_sent`, noted by the fleet), and one access-log
   line;
5. an exception the app raised (`errors`, web/errors.py `ErrorAnswers`): one with a handler (a
   `ProxyError`, the router's 404/405) answered where it was raised, through the same `send`;
   any other, after the access line, the OpenAI-shaped 500 and raised on for the server. That
   was Starlette's error middleware, its exception middleware and a wrapper around each route,
   each with a `send` of its own; here the answer's own status says whether it started.
The response's start is seen once: its status, the `x-proxy-cache` value for the log, a stream
(`text/event-stream`) counted open, the client's stale `x-request-id` replaced by ours. A
stream's first non-empty body message gives its time to first byte (`proxy_ttft_seconds`). Per
message the wrapped `send` tests one boolean or one dict key; past a stream's first body bytes
its tokens skip it altogether (`BODY_SEND`, web/eventstream.py). Nothing here is per token.

Why one: every layer of pure ASGI middleware costs a coroutine frame, a closure per request and
a call per message on the way out; a short stored answer went through five of ours (and
Starlette's two, and its two wrappers around each route: gone too, app.py). The checks stay in
their modules, as functions of the scope; only their sequencing is here.

WebSocket handshakes get the drain's and auth's checks (a refused one is closed before accept)
and are counted in flight; no access line or HTTP metrics (a socket's turns are logged by the
socket, web/routes/websocket.py). Lifespan messages pass through.

Labels and log fields take route templates (`/v1/responses/{response_id}`), never the raw path:
an id in a label would make one series per response. A request the client left before any answer
is 499, one whose handler raised before answering 500.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.core.context.requestctx import RequestContext
from proxy.services.process.drain import Drain
from proxy.telemetry.metrics import Metrics, RouteSeries
from proxy.web.errors import ErrorAnswers
from proxy.web.middleware.access import (
    BODY_SEND,
    CLIENT_CLOSED,
    QUICK_START,
    failed_status,
    new_request_id,
    request_context,
    route_template,
    write_access,
)
from proxy.web.middleware.auth import Auth
from proxy.web.middleware.bodylimits import BodyLimits
from proxy.web.middleware.draining import drain_refusal
from proxy.web.middleware.forwarded import TrustedProxies

_REQUEST_ID = b"x-request-id"
_CACHE = b"x-proxy-cache"
_EVENT_STREAM = b"text/event-stream"


class Front:
    """`metrics`, `drain`, `limits`, `auth`, `proxies`: each part left out (None) is skipped,
    for a test of the others; the app passes them all."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics | None = None,
                 drain: Drain | None = None, limits: BodyLimits | None = None,
                 auth: Auth | None = None, errors: ErrorAnswers | None = None,
                 proxies: TrustedProxies | None = None,
                 logger: logging.Logger | None = None,
                 new_id: Callable[[], str] = new_request_id) -> None:
        self.app = app
        self.proxies = proxies
        self.errors = errors
        self.metrics = metrics
        self.drain = drain
        self.limits = limits
        self.auth = auth
        self.log = logger or logging.getLogger("proxy.access")
        self.new_id = new_id

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """The coroutine serving `scope`, handed back to be awaited: not a coroutine of its own
        that awaits it (a frame less, made per request and resumed each time the request's
        task wakes: ~0.5 µs a create)."""
        kind = scope["type"]
        if kind == "http":
            return self._http(scope, receive, send)
        if kind == "websocket":
            return self._socket(scope, receive, send)
        return self.app(scope, receive, send)

    async def _socket(self, scope: Scope, receive: Receive, send: Send) -> None:
        drain, auth = self.drain, self.auth
        if self.proxies is not None:
            self.proxies.apply_headers(scope)
        if self.errors is not None:  # read by the WebSocket route's own wrapper
            scope["starlette.exception_handlers"] = self.errors.socket_handlers
        refusal = drain_refusal(drain, scope) if drain is not None else None
        if refusal is None and auth is not None:
            refusal = auth.refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
        elif drain is None:
            await self.app(scope, receive, send)
        else:
            with drain.request():
                await self.app(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        client_id, declared, parents, states, proto, forwarded_for = _read_headers(scope)
        if (proto is not None or forwarded_for) and self.proxies is not None:
            self.proxies.apply(scope, proto, forwarded_for)
        context = request_context(client_id, self.new_id, parents, states)
        answer = _Answer(scope, send, started, context, self.metrics)
        # The send beneath every wrapper of ours, for a stream's body once it has begun
        # (web/eventstream.py, `BODY_SEND`): past the first body bytes the wrappers only hand
        # messages on. The proxy's app puts the server's own send there first (app.py: beneath
        # the tracing middleware's too); served alone, this is the lowest send we see.
        scope.setdefault(BODY_SEND, send)
        errors = self.errors
        unexpected: Exception | None = None
        answered = False
        try:
            try:
                work, counted = self._answer(scope, receive, answer.send, declared)
                if counted is not None:
                    counted.began()
                try:
                    await work
                finally:
                    if counted is not None:
                        counted.ended()
            except Exception as exc:
                if errors is None:
                    raise
                # Answered by its handler (a `ProxyError`, the router's 404/405), else raised
                # on as unexpected (web/errors.py): where the exception left the app.
                await errors.handled(scope, receive, answer.send, exc, answer.status != 0)
        except Exception as exc:
            answered = answer.status != 0
            answer.status = answer.status or failed_status(exc)
            if errors is None:
                raise
            unexpected = exc
        except BaseException as exc:
            answer.status = answer.status or failed_status(exc)
            raise
        finally:
            self._ended(scope, context, answer)
        if unexpected is not None and errors is not None:
            # After the access line, as Starlette's outermost middleware did: logged with the
            # request id, the 500 sent beneath our `send` (its status is counted already),
            # then raised on for the server.
            await errors.unexpected(scope, receive, send, unexpected, answered)

    def _answer(self, scope: Scope, receive: Receive, send: Send,
                declared: list[bytes]) -> tuple[Awaitable[None], Drain | None]:
        """The refusal that applies, else the app (its body counted), to be awaited; and the
        drain it is in flight for (`_http` counts it in and out around it). A plain call handing
        back what to await, not a coroutine awaiting it: a frame less, resumed each time the
        request's task wakes (three times a streamed create)."""
        drain, limits, auth = self.drain, self.limits, self.auth
        refusal = drain_refusal(drain, scope) if drain is not None else None
        limit = 0
        if refusal is None and limits is not None:
            limit = limits.of(scope)
            refusal = limits.refusal(limit, declared)
        if refusal is None and auth is not None:
            refusal = auth.refusal(scope)
        if refusal is not None:
            return refusal(scope, receive, send), None
        if limits is not None:
            receive = limits.counted(limit, receive)
        return self.app(scope, receive, send), drain

    def _ended(self, scope: Scope, context: RequestContext, answer: _Answer) -> None:
        started = answer.started
        seconds = time.perf_counter() - started
        status = answer.status or CLIENT_CLOSED
        series = answer.series()
        if series is None:
            route = route_template(scope)
        else:  # its template: found once per request (`series`)
            route = series.route
            if answer.stream:
                series.stream_closed()
            if context.upstream_sent is not None:
                series.overhead(context.upstream_sent - started)
            series.finished(str(scope.get("method", "-")), status, seconds)
        write_access(self.log, scope, status, seconds, answer.cache, context, route)


def _read_headers(scope: Scope) -> tuple[str | None, list[bytes], list[str], list[str],
                                         bytes | None, list[bytes]]:
    """(the client's `x-request-id`, the declared `Content-Length`s, its `traceparent`s and
    `tracestate`s, the last `X-Forwarded-Proto` and every `X-Forwarded-For`): every request
    header read here, in one pass."""
    client_id: str | None = None
    declared: list[bytes] = []
    parents: list[str] = []
    states: list[str] = []
    proto: bytes | None = None
    forwarded_for: list[bytes] = []
    for name, value in scope.get("headers", ()):
        if name == _REQUEST_ID:
            client_id = client_id or value.decode("latin-1")
        elif name == b"content-length":
            declared.append(value)
        elif name == b"traceparent":
            parents.append(value.decode("latin-1"))
        elif name == b"tracestate":
            states.append(value.decode("latin-1"))
        elif name == b"x-forwarded-for":
            forwarded_for.append(value)
        elif name == b"x-forwarded-proto":
            proto = value
    return client_id, declared, parents, states, proto, forwarded_for


class _Answer:
    """One HTTP request's answer as it leaves: its `send`, and what its end records."""

    __slots__ = ("_echoed", "_first_pending", "_metrics", "_scope", "_send", "_series", "cache",
                 "started", "status", "stream")

    def __init__(self, scope: Scope, send: Send, started: float, context: RequestContext,
                 metrics: Metrics | None) -> None:
        self._scope = scope
        self._send = send
        self.started = started
        self._echoed = (_REQUEST_ID, context.request_id.encode("latin-1"))
        self._metrics = metrics
        self._series: RouteSeries | None = None
        self.status = 0
        self.cache = "-"
        self.stream = False
        self._first_pending = False  # a stream whose first body bytes are not sent yet

    async def send(self, message: Message) -> None:
        if self._first_pending:
            if message.get("body"):
                self._first_pending = False
                series = self.series()
                if series is not None:
                    series.first_byte(time.perf_counter() - self.started)
        elif message["type"] == "http.response.start":
            message = self._started(message)
            scope = self._scope
            quick = scope.get(QUICK_START)
            # The server's writer of a plain start (process/headwrite.py), when our send is the
            # server's own (a wrapper beneath, tracing's, reads the start itself).
            send = self._send
            if quick is not None and send is scope.get(BODY_SEND) and quick(send, message):
                return
        await self._send(message)

    def _started(self, message: Message) -> Message:
        """The response's start: its status, cache result and kind noted, our id echoed (a
        stale one from upstream dropped)."""
        self.status = int(message["status"])
        headers = []
        for name, value in message.get("headers", ()):
            lower = name.lower()
            if lower == _REQUEST_ID:
                continue
            if lower == _CACHE:
                self.cache = value.decode("latin-1")
            elif lower == b"content-type" and value.startswith(_EVENT_STREAM):
                self.stream = self._first_pending = True
            headers.append((name, value))
        headers.append(self._echoed)
        if self.stream:
            series = self.series()
            if series is not None:
                series.stream_opened()
        return {**message, "headers": headers}

    def series(self) -> RouteSeries | None:
        """The route's metric series, found once per request (a stream's start, its first
        bytes and its end each record one: three lookups of the route's template before)."""
        series = self._series
        if series is None and self._metrics is not None:
            series = self._series = self._metrics.route(route_template(self._scope))
        return series
