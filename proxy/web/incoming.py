"""What a handler may take from the request (or WebSocket): the caller's tenant, its JSON
body, a path id (the services: web/state.py `state_of`)."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import ClientDisconnect, HTTPConnection, Request

from proxy.core.errors import NotFound, UnsupportedMediaType
from proxy.core.policy.origin import is_json
from proxy.core.request.jsonbody import parse_object
from proxy.services.process import offload
from proxy.web.middleware.auth import OPEN, PUBLIC_TENANT, header


def tenant(conn: HTTPConnection) -> str:
    return str(conn.scope.get("state", {}).get("tenant", PUBLIC_TENANT))


# Where `read_body` keeps the body it read, for a second read of the same request.
BODY = "proxy.body"


async def json_body(request: Request) -> dict[str, Any]:
    """The body as a JSON object (or a 400); on an open proxy it must be declared JSON."""
    require_json(request)
    body = await read_body(request)
    if len(body) <= offload.OFFLOAD_BYTES:  # what `offload.run` does, without its coroutine
        return parse_object(body)
    return await offload.run(len(body), parse_object, body)  # a large one off the loop


async def read_body(request: Request) -> bytes:
    """The whole body, as Starlette's `Request.body()` reads it (a client gone before its end
    is `ClientDisconnect`), kept in the scope (`BODY`) for a second read. Read here with a
    plain loop over `receive`: `body()` reads through `stream()`, an async generator inside
    `aclosing`, ~4 µs for a body that came with its head. A route that reads its body here
    reads it only here (`body()` would wait for bytes already taken)."""
    scope = request.scope
    body: bytes | None = scope.get(BODY)
    if body is not None:
        return body
    receive = request.receive
    chunks: list[bytes] = []
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        elif kind == "http.disconnect":
            raise ClientDisconnect()
    body = scope[BODY] = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return body


def require_json(request: Request) -> None:
    """Auth off: a body not declared JSON is a 415 (core/policy/origin.py: no browser may send one
    cross-origin without a preflight, which the proxy never grants)."""
    if not request.scope.get("state", {}).get(OPEN):
        return
    kind = header(request.scope, b"content-type")
    if not is_json(kind):
        shown = "none" if kind is None else repr(kind[:100])
        raise UnsupportedMediaType(
            f"Unsupported Content-Type ({shown}): this server takes request bodies as JSON; "
            "send them with `Content-Type: application/json`.")


# Every id we hand out is a prefix, an underscore and hex; clients' item ids are similar. Ids
# outside this alphabet cannot exist, and must not reach a store key (a `}` would break the
# `{hash tag}` that keeps one object's keys on one Redis Cluster slot).
_ID = re.compile(r"^[A-Za-z0-9_-]{1,256}$")


def path_id(request: Request, name: str) -> str:
    value: str = request.path_params[name]
    if not _ID.match(value):
        raise NotFound(f"No object with id {value[:64]!r} exists.", param=name)
    return value
