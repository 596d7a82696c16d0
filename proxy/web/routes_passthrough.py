"""`POST /v1/chat/completions` and `GET /v1/models`, handed to the pass-through service."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.cachekey import parse_cache_control
from proxy.web.context import runtime_of, tenant
from proxy.web.rendering import Reply, json_response, relay_response


async def chat_completions(request: Request) -> Reply:
    runtime = runtime_of(request)
    body = await request.body()
    if runtime.chat is not None:
        relay = await runtime.chat.chat_completions(
            body, tenant(request), parse_cache_control(request.headers.get("cache-control")))
    else:
        relay = await runtime.passthrough.chat_completions(body)
    return relay_response(relay)


async def models(request: Request) -> Response:
    return json_response(runtime_of(request).passthrough.models())


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
]
