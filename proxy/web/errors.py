"""The one error path: every failure leaves as `{"error": {message, type, param, code}}`.

Starlette's own 404/405 and body-limit errors, our `ProxyError`s and anything unexpected (500,
logged with its traceback, never sent) all go through `error_response`.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

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
    # Starlette sends this answer from its outermost middleware, outside the access-log
    # middleware that tags every other answer: the id is added here.
    request_id = current_request_id()
    if request_id:
        response.headers["x-request-id"] = request_id
    return response


EXCEPTION_HANDLERS: dict[Any, Any] = {
    ProxyError: on_proxy_error,
    HTTPException: on_http_exception,
    Exception: on_unexpected,
}
