"""`/v1/responses` routes: parse the body, call the service, render JSON or SSE."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.jsonbody import parse_object
from proxy.web.context import runtime_of, tenant
from proxy.web.rendering import json_response, stream_response


async def create(request: Request) -> Response:
    runtime = runtime_of(request)
    body = parse_object(await request.body())
    outcome = await runtime.responses.create(tenant(request), body)
    if outcome.stream is not None:
        return stream_response(outcome.stream, ping=runtime.settings.ping_interval)
    return json_response(outcome.body, status=outcome.status)


routes = [
    Route("/v1/responses", create, methods=["POST"]),
]
