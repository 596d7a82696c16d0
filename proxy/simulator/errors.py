"""vLLM's error bodies, and the one exception the simulator raises to answer with one.

vLLM has two shapes of 400, and the simulator keeps both (checked against vLLM's source):
  - schema validation (FastAPI `RequestValidationError`, remapped from 422 to 400): type is the
    HTTP phrase "Bad Request";
  - checks made while serving (context length, n, ...): `create_error_response`, type
    "BadRequestError".
Other statuses: 404 "NotFoundError", 500 "InternalServerError", anything else the HTTP phrase.
Key order is vLLM's `ErrorInfo`: message, type, param, code (an int).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}


def error_type(status: int) -> str:
    if status in _TYPES:
        return _TYPES[status]
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def error_body(status: int, message: str, *, type_: str | None = None,
               param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_ or error_type(status), "param": param,
                      "code": status}}


class SimError(Exception):
    """Answer this request with `status` and vLLM's error body."""

    def __init__(self, status: int, message: str, *, type_: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_ or error_type(status)
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, type_=self.type, param=self.param)


def invalid(message: str, param: str | None = None) -> SimError:
    """A request that fails vLLM's pydantic schema (400, type "Bad Request")."""
    return SimError(400, message, type_=HTTPStatus.BAD_REQUEST.phrase, param=param)


def bad_request(message: str, param: str | None = None) -> SimError:
    """A request rejected while serving (400, type "BadRequestError")."""
    return SimError(400, message, param=param)


def model_not_found(model: str, served: tuple[str, ...] | None = None) -> SimError:
    """`served`: vLLM 0.32 lists the names it serves."""
    aliases = f" Valid aliases: {', '.join(served)}." if served else ""
    return SimError(404, f"The model `{model}` does not exist.{aliases}", param="model")


def trailer(param: str, value: object = None) -> str:
    """What vLLM 0.32 appends to a message naming the refused field (and its value)."""
    shown = "" if value is None else f", value={value}"
    return f" (parameter={param}{shown})"
