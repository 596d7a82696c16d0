"""`/healthz` (the process serves), `/readyz` (store and an upstream answer), `/metrics`."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from proxy.core.errors import ProxyError
from proxy.web.context import runtime_of
from proxy.web.rendering import json_response


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    runtime = runtime_of(request)
    reasons: list[str] = []
    if not runtime.fleet.ready():
        reasons.append("no upstream is healthy")
    try:
        await runtime.store.ping()
    except ProxyError as exc:
        reasons.append(f"store: {exc.message}")
    body = {"status": "ready" if not reasons else "not ready", "reasons": reasons,
            "upstreams": runtime.fleet.status()}
    return json_response(body, status=200 if not reasons else 503)


async def metrics(request: Request) -> Response:
    return PlainTextResponse(runtime_of(request).metrics.render(),
                             media_type="text/plain; version=0.0.4")


routes = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
]
