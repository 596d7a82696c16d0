"""The one error path: every failure leaves as `{"error": {message, type, param, code}}`.

Starlette's own 404/405 and body-limit errors, our `ProxyError`s and anything unexpected (500,
logged with its traceback, never sent) all go through `error_response`; `ErrorAnswers` is where
a request's exception meets its handler.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.exceptions import HTTPException, WebSocketException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from proxy.core.context.requestctx import current_request_id
from proxy.core.errors import (
    MethodNotAllowed,
    NotFound,
    ProxyError,
    StoreUnavailable,
    failure_cause,
)
from proxy.web.state import state_of

log = logging.getLogger("proxy.web")


def error_response(error: ProxyError) -> Response:
    headers = dict(error.headers)
    if error.status == 409 or error.status == 400:
        # The SDK retries some statuses; an illegal request will not get better by retrying.
        headers.setdefault("x-should-retry", "false")
    return Response(orjson.dumps(error.body()), status_code=error.status, headers=headers,
                    media_type="application/json")


async def on_proxy_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProxyError)
    if isinstance(exc, StoreUnavailable):
        # Counted and logged here, where every store failure that reaches a client is rendered.
        # The log names the cause (the server's own words: "NOAUTH ...", "DENIED ...", "OOM
        # ...", a refused connection) so an operator knows what to fix without a traceback.
        state_of(request).metrics.store_error()
        log.warning("store unavailable on %s %s: %s", request.method, request.url.path,
                    failure_cause(exc))
    return error_response(exc)


async def on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return error_response(NotFound(f"Unknown route: {request.method} {request.url.path}"))
    if exc.status_code == 405:
        error = MethodNotAllowed(
            f"Method {request.method} is not allowed on {request.url.path}.",
            headers=dict(exc.headers or {}),
        )
        return error_response(error)
    return error_response(_generic(exc.status_code, str(exc.detail)))


def _generic(status: int, message: str) -> ProxyError:
    error = ProxyError(message, status=status)
    if status < 500:
        error.type = "invalid_request_error"
    return error


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    response = error_response(ProxyError("The server had an error while processing your "
                                         "request."))
    # Sent once the request is logged, beneath the front middleware's `send` that tags every
    # other answer (web/middleware/front.py): the id is added here.
    request_id = current_request_id()
    if request_id:
        response.headers["x-request-id"] = request_id
    return response


EXCEPTION_HANDLERS: dict[Any, Any] = {
    ProxyError: on_proxy_error,
    HTTPException: on_http_exception,
    Exception: on_unexpected,
}


class ErrorAnswers:
    """Every exception a request raises, mapped once, where Starlette spread it over three
    layers (its outermost error middleware, its exception middleware and a wrapper around each
    route, each with a `send` of its own to learn whether the response had started: ~10 µs
    and four frames per request, and one call per message out). `Front` (web/middleware/
    front.py) calls `handled` where the app raised, and `unexpected` once the request is
    logged; it knows whether the response started (its own answer's status), so no `send` is
    wrapped for it. The answers are the same: a registered exception (`ProxyError`,
    `HTTPException`: the router's 404/405) answered by its handler, else the OpenAI-shaped 500,
    logged with the request id and raised on (the server logs it too)."""

    def __init__(self, handlers: dict[Any, Any] = EXCEPTION_HANDLERS) -> None:
        self._handlers = {kind: handler for kind, handler in handlers.items()
                          if kind not in (500, Exception)}
        self._fallback = handlers.get(Exception) or handlers.get(500) or on_unexpected
        # What a WebSocket route's own wrapper reads from the scope (Starlette's exception
        # middleware put it there): the same handlers, and a `WebSocketException` closes.
        self.socket_handlers: tuple[dict[Any, Any], dict[int, Any]] = (
            {HTTPException: on_http_exception, WebSocketException: _close_socket,
             **self._handlers}, {})

    async def handled(self, scope: Scope, receive: Receive, send: Send, exc: Exception,
                      started: bool) -> None:
        """Answer `exc` with its registered handler, or raise: it unchanged when none is
        registered, a `RuntimeError` when the response had started (Starlette's words: it is
        then an unexpected error)."""
        handler = None
        for kind in type(exc).__mro__:
            handler = self._handlers.get(kind)
            if handler is not None:
                break
        if handler is None:
            raise exc
        if started:
            raise RuntimeError("Caught handled exception, but response already started.") \
                from exc
        response = await handler(Request(scope, receive, send), exc)
        await response(scope, receive, send)
        exc.__traceback__ = None  # an instance raised again would grow its traceback

    async def unexpected(self, scope: Scope, receive: Receive, send: Send, exc: Exception,
                         started: bool) -> None:
        """Log `exc`, answer 500 unless the response started, and raise it on."""
        response = await self._fallback(Request(scope), exc)
        if not started:
            await response(scope, receive, send)
        raise exc


async def _close_socket(websocket: WebSocket, exc: Exception) -> None:
    assert isinstance(exc, WebSocketException)
    await websocket.close(code=exc.code, reason=exc.reason)
