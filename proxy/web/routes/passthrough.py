"""`POST /v1/chat/completions` and `GET /v1/models`, handed to the pass-through service.

The call runs `unless_disconnected`: a client that leaves while a non-streamed answer is being
generated (or before a stream's first chunk) cancels it, which aborts the upstream request.
Streams then carry comment pings like Responses streams (`: ping` is an SSE comment, which
chat clients, the openai SDK's parser included, skip; the `data:` lines stay chunk for chunk).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.cache.key import parse_cache_control
from proxy.core.errors import ProxyError
from proxy.core.request.jsonbody import parse_object
from proxy.services.fleet.passthrough import Relay, chat_stream
from proxy.services.process import offload
from proxy.web.disconnect import unless_disconnected
from proxy.web.incoming import read_body, require_json, tenant
from proxy.web.limiting import limits_on, metering
from proxy.web.middleware.auth import header
from proxy.web.rendering import Reply, json_response, relay_response
from proxy.web.state import state_of


async def chat_completions(request: Request) -> Reply:
    state = state_of(request)
    require_json(request)
    body = await read_body(request)  # whole first: the disconnect watch then owns `receive`
    # Parsed once, here (off the loop when large), and handed down: the services used to parse
    # it again each, three parses of up to 16 MiB on the loop (docs/contract.md "Cost bounds").
    parsed = await _parsed(body)
    hold = limits_on(request) and isinstance(parsed, dict) and bool(chat_stream(parsed))
    async with metering(request, hold=hold) as meter:
        if isinstance(parsed, ProxyError):
            raise parsed  # within the meter, where the services refused it before
        if state.chat is not None:
            call = state.chat.chat_completions(
                parsed, tenant(request),
                parse_cache_control(header(request.scope, b"cache-control")), meter=meter,
                size=len(body))
        else:
            call = state.passthrough.chat_completions(
                parsed, tenant(request), meter=meter, size=len(body))
        # A stream keeps the watcher for its body (one per request: web/disconnect.py).
        relay = await unless_disconnected(request, call, keep=_streams)
    return relay_response(relay, ping=state.streams.ping_interval, ticks=state.ticks)


def _streams(relay: Relay) -> bool:
    return relay.stream is not None


async def _parsed(body: bytes) -> dict[str, Any] | ProxyError:
    """The body's object, or the 400 the route raises once it is metered."""
    try:
        return await offload.run(len(body), parse_object, body)
    except ProxyError as exc:
        return exc


async def models(request: Request) -> Response:
    return json_response(state_of(request).passthrough.models())


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
]
