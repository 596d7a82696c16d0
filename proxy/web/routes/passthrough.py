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

from proxy.core.cache.key import parse_cache_control
from proxy.core.errors import ProxyError
from proxy.core.request.jsonbody import parse_object
from proxy.services.fleet.passthrough import chat_stream
from proxy.web.disconnect import unless_disconnected
from proxy.web.incoming import require_json, tenant
from proxy.web.limiting import limits_on, metering
from proxy.web.rendering import Reply, json_response, relay_response
from proxy.web.state import runtime_of


async def chat_completions(request: Request) -> Reply:
    runtime = runtime_of(request)
    require_json(request)
    body = await request.body()  # read whole first: the disconnect watch then owns `receive`
    async with metering(request, hold=limits_on(request) and streams(body)) as meter:
        if runtime.services.chat is not None:
            call = runtime.services.chat.chat_completions(
                body, tenant(request), parse_cache_control(request.headers.get("cache-control")),
                meter=meter)
        else:
            call = runtime.services.passthrough.chat_completions(body, tenant(request), meter=meter)
        relay = await unless_disconnected(request, call)
    return relay_response(relay, ping=runtime.settings.streams.ping_interval)


def streams(body: bytes) -> bool:
    """The request asks for a stream (a bad body is refused by the service, right after)."""
    try:
        return bool(chat_stream(parse_object(body)))
    except ProxyError:
        return False


async def models(request: Request) -> Response:
    return json_response(runtime_of(request).services.passthrough.models())


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
]
