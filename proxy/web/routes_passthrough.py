"""`POST /v1/chat/completions` and `GET /v1/models`, handed to the pass-through service.

The call runs `unless_disconnected`: a client that leaves while a non-streamed answer is being
generated (or before a stream's first chunk) cancels it, which aborts the upstream request.
Streams then carry comment pings like Responses streams (`: ping` is an SSE comment, which
chat clients, the openai SDK's parser included, skip; the `data:` lines stay chunk for chunk).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.cachekey import parse_cache_control
from proxy.web.context import runtime_of, tenant
from proxy.web.disconnect import unless_disconnected
from proxy.web.rendering import Reply, json_response, relay_response


async def chat_completions(request: Request) -> Reply:
    runtime = runtime_of(request)
    body = await request.body()  # read whole first: the disconnect watch then owns `receive`
    if runtime.chat is not None:
        call = runtime.chat.chat_completions(
            body, tenant(request), parse_cache_control(request.headers.get("cache-control")))
    else:
        call = runtime.passthrough.chat_completions(body, tenant(request))
    relay = await unless_disconnected(request, call)
    return relay_response(relay, ping=runtime.settings.ping_interval)


async def models(request: Request) -> Response:
    return json_response(runtime_of(request).passthrough.models())


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
]
