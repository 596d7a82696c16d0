"""What a handler may take from the request (or WebSocket): the runtime and the caller's
tenant."""

from __future__ import annotations

import re

from starlette.requests import HTTPConnection, Request

from proxy.core.errors import NotFound
from proxy.services.runtime import Runtime
from proxy.web.auth import PUBLIC_TENANT


def runtime_of(conn: HTTPConnection) -> Runtime:
    runtime: Runtime = conn.app.state.runtime
    return runtime


def tenant(conn: HTTPConnection) -> str:
    return str(conn.scope.get("state", {}).get("tenant", PUBLIC_TENANT))


# Every id we hand out is a prefix, an underscore and hex; clients' item ids are similar. Ids
# outside this alphabet cannot exist, and must not reach a store key (a `}` would break the
# `{hash tag}` that keeps one object's keys on one Redis Cluster slot).
_ID = re.compile(r"^[A-Za-z0-9_-]{1,256}$")


def path_id(request: Request, name: str) -> str:
    value: str = request.path_params[name]
    if not _ID.match(value):
        raise NotFound(f"No object with id {value[:64]!r} exists.", param=name)
    return value
