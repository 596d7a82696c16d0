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
from proxy.core.errors import ProxyError
from proxy.core.jsonbody import parse_object
from proxy.services.limits import tokens_of, usage_in_json
from proxy.services.runtime import Runtime
from proxy.web.context import require_json, runtime_of, tenant
from proxy.web.disconnect import unless_disconnected
from proxy.web.limiting import admitted, metered, released_on_error
from proxy.web.rendering import Reply, json_response, relay_response


async def chat_completions(request: Request) -> Reply:
    runtime = runtime_of(request)
    require_json(request)
    body = await request.body()  # read whole first: the disconnect watch then owns `receive`
    ticket = await admitted(request, hold=limited(runtime) and streams(body))
    counts = ticket is not None and (ticket.per_minute or ticket.in_total)
    if runtime.chat is not None:
        # Through the cache: a stream that did not ask for its usage is not counted (the
        # cache's own upstream call adds nothing for metering).
        call = runtime.chat.chat_completions(
            body, tenant(request), parse_cache_control(request.headers.get("cache-control")))
    else:
        call = runtime.passthrough.chat_completions(body, tenant(request), meter_usage=counts)
    relay = await released_on_error(ticket, unless_disconnected(request, call))
    if relay.stream is not None:
        relay.stream = metered(request, ticket, relay.stream,
                               usage=lambda: tokens_of(relay.usage))
    elif ticket is not None:
        await ticket.end(usage_in_json(relay.body) if relay.status == 200 else 0)
    return relay_response(relay, ping=runtime.settings.ping_interval)


def limited(runtime: Runtime) -> bool:
    return runtime.limits is not None and runtime.limits.active


def streams(body: bytes) -> bool:
    """The request asks for a stream (a bad body is refused by the service, right after)."""
    try:
        return parse_object(body).get("stream") is True
    except ProxyError:
        return False


async def models(request: Request) -> Response:
    return json_response(runtime_of(request).passthrough.models())


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
]
