"""What a handler may take from the request: the runtime and the caller's tenant."""

from __future__ import annotations

from starlette.requests import Request

from proxy.services.runtime import Runtime
from proxy.web.auth import PUBLIC_TENANT


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def tenant(request: Request) -> str:
    return str(request.scope.get("state", {}).get("tenant", PUBLIC_TENANT))
