"""`POST /v1/chat/completions` and `GET /v1/models`, handed to the pass-through service."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.web.context import runtime_of
from proxy.web.rendering import Reply, json_response, relay_response


async def chat_completions(request: Request) -> Reply:
    relay = await runtime_of(request).passthrough.chat_completions(await request.body())
    return relay_response(relay)


async def models(request: Request) -> Response:
    return json_response(runtime_of(request).passthrough.models())


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
]
