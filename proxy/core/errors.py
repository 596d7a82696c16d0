"""Errors, in OpenAI's shape, raised where they happen and rendered in one place (web/errors.py).

    ProxyError                      500 server_error
    ├── InvalidRequest              400 invalid_request_error (param names the field)
    │   └── PreviousResponseNotFound    code previous_response_not_found
    ├── Unauthorized                401 invalid_request_error / invalid_api_key
    ├── NotFound                    404 invalid_request_error
    │   └── ModelNotFound               code model_not_found, param model
    ├── MethodNotAllowed            405
    ├── PayloadTooLarge             413
    ├── UnsupportedMediaType        415 a body not declared JSON (core/policy/origin.py)
    ├── RateLimited                 429 rate_limit_exceeded (+ Retry-After)
    │   └── QuotaExceeded               429 insufficient_quota (a key's token budget is spent)
    ├── UpstreamError               502 upstream answered badly or broke off
    │   ├── UpstreamUnreachable         502 connection refused / not made (safe to retry elsewhere)
    │   ├── UpstreamUnavailable         503 no replica can take the request
    │   └── UpstreamTimeout             504
    ├── StoreUnavailable            503 Redis (or the store) is down; stateless traffic goes on
    └── ShuttingDown                503 server_shutting_down (+ Retry-After): draining on SIGTERM

Each error knows its HTTP status and renders `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

from typing import Any


class ProxyError(Exception):
    status: int = 500
    type: str = "server_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class AutoToolChoiceUnavailable(InvalidRequest):
    """vLLM's 400 for `tool_choice: "auto"` on a replica started without
    `--enable-auto-tool-choice`: the operator's fix, so the message says which flag."""

    code = "auto_tool_choice_unavailable"

    def __init__(self) -> None:
        super().__init__(
            'tool_choice "auto" needs the vLLM serving this model to be started with '
            "--enable-auto-tool-choice and --tool-call-parser, and this replica was not. "
            'Ask the operator to add them, or send tool_choice "none", "required" or a '
            "named function.", param="tool_choice")


class PreviousResponseNotFound(InvalidRequest):
    code = "previous_response_not_found"

    def __init__(self, response_id: str) -> None:
        super().__init__(
            f"Previous response with id '{response_id}' not found.",
            param="previous_response_id",
        )


class Unauthorized(ProxyError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class Forbidden(ProxyError):
    """A key that is valid, for another surface: the admin key on the API, a client key on
    the admin API."""

    status = 403
    type = "invalid_request_error"
    code = "permission_denied"


class NotFound(ProxyError):
    status = 404
    type = "invalid_request_error"


def response_not_found(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param="response_id")


class ModelNotFound(NotFound):
    code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model `{model}` does not exist or is not served by this fleet.",
            param="model",
        )


class MethodNotAllowed(ProxyError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class PayloadTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedMediaType(ProxyError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"


class RequestTimeout(ProxyError):
    """The client stopped sending its request body (web/middleware/bodylimits.py,
    `--body-timeout`)."""

    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class RateLimited(ProxyError):
    status = 429
    type = "rate_limit_exceeded"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})


class QuotaExceeded(RateLimited):
    """A spent `token_budget`: retrying does not help (it never refills by itself), so the
    SDKs are told not to (`x-should-retry: false`); Retry-After is still sent, as the contract
    promises for every 429."""

    type = "insufficient_quota"
    code = "insufficient_quota"

    def __init__(self, message: str, *, retry_after: int = 60) -> None:
        super().__init__(message, retry_after=retry_after)
        self.headers["x-should-retry"] = "false"


class UpstreamError(ProxyError):
    status = 502
    type = "server_error"
    code = "upstream_error"


class UpstreamUnreachable(UpstreamError):
    code = "upstream_unreachable"


class UpstreamUnavailable(UpstreamError):
    status = 503
    code = "upstream_unavailable"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class StoreUnavailable(ProxyError):
    status = 503
    type = "server_error"
    code = "store_unavailable"


def failure_cause(exc: BaseException) -> str:
    """What a log line says of a failure, for an operator: the error it was mapped from when
    there is one (a store's, in the server's words: "NOAUTH ...", "DENIED ...", "OOM ...", a
    refused connection), else its own message. Every path that meets a refusing store logs
    this, the 503 and the WebSocket error frame as well as a write lost mid-stream. Never a
    request's body: the store's errors quote commands' names, not their arguments. Only a
    store's: another error's cause may quote an upstream's URL (its credentials)."""
    cause = exc.__cause__
    if cause is None or not isinstance(exc, StoreUnavailable):
        return str(exc.args[0]) if exc.args else type(exc).__name__
    # redis-py strips the server's error code ("NOAUTH", "OOM") from the message it keeps.
    code = getattr(cause, "status_code", None)
    prefix = f"{code} " if isinstance(code, str) and code else ""
    return f"{type(cause).__name__}: {prefix}{str(cause)[:200]}"


class ShuttingDown(ProxyError):
    """This instance is draining (SIGTERM): the client should retry, another instance will
    answer (the load balancer stops sending here once /readyz says 503)."""

    status = 503
    type = "server_error"
    code = "server_shutting_down"

    def __init__(self, *, retry_after: int = 1) -> None:
        super().__init__("This server is shutting down; retry the request (another instance "
                         "will answer it).",
                         headers={"Retry-After": str(retry_after), "Connection": "close"})
