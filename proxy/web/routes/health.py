"""`/healthz` (the process serves), `/readyz` (store and an upstream answer), `/metrics`.

`/readyz` is public (load balancers probe it without a key), so its public answer is bare: a
status and short reason words (`upstreams`, `store`, `loops`), never a URL or an upstream's or
Redis's error text. The detail (each replica, the store error, the failing loops) is for a
caller with a valid API key. Without configured keys nobody gets it: a proxy run open is
usually reachable by more than its operators, and the logs say which replica is down and why.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.errors import ProxyError
from proxy.telemetry.metrics import CONTENT_TYPE
from proxy.web.middleware.auth import bearer, key_accepted
from proxy.web.rendering import json_response
from proxy.web.state import state_of


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    state = state_of(request)
    reasons: list[str] = []
    detail: dict[str, Any] = {}
    if state.draining.draining:
        reasons.append("draining")  # SIGTERM: the load balancer should stop sending here
    if not state.fleet.ready():
        reasons.append("upstreams")
    try:
        await state.store.ping()
    except ProxyError as exc:
        reasons.append("store")
        detail["store_error"] = exc.message
    failing = state.supervisor.failing()
    if failing:
        reasons.append("loops")
        detail["failing_loops"] = failing
    body: dict[str, Any] = {"status": "ready" if not reasons else "not ready",
                            "reasons": reasons}
    if _may_see_detail(request, state.tenancy.api_keys):
        body.update(detail, upstreams=state.fleet.status())
    return json_response(body, status=200 if not reasons else 503)


def _may_see_detail(request: Request, keys: tuple[str, ...]) -> bool:
    token = bearer(request.scope)
    return bool(keys) and token is not None and key_accepted([k.encode() for k in keys], token)


async def metrics(request: Request) -> Response:
    """Prometheus text format 0.0.4 (prometheus_client's `generate_latest`)."""
    body = await state_of(request).metrics.render()
    return Response(body, headers={"content-type": CONTENT_TYPE})


routes = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
]
