"""`/v1/responses` routes: read the request, call one service method, render JSON or SSE."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.cache.key import USE_CACHE, parse_cache_control
from proxy.core.request.create import INCLUDABLE
from proxy.core.request.fields import bad
from proxy.core.request.paging import parse_page
from proxy.services.responses.create import Outcome
from proxy.web.disconnect import unless_disconnected
from proxy.web.incoming import BODY, json_body, path_id, read_body, tenant
from proxy.web.limiting import metering
from proxy.web.middleware.auth import header
from proxy.web.rendering import Reply, json_response, stream_response
from proxy.web.state import state_of


async def create(request: Request) -> Reply:
    state = state_of(request)
    responses = state.responses
    # With `--setup-slots N` (off by default) a burst's set-ups run N at a time in arrival
    # order (services/fleet/setups.py); the slot is given back once it is admitted.
    async with responses.setting_up():
        body = await json_body(request)
        # No `Cache-Control` (nearly every request): the default, not a new one made
        control = header(request.scope, b"cache-control")
        directives = parse_cache_control(control) if control else USE_CACHE
        # `parse_request` refuses a `stream` or `background` that is not a boolean.
        hold = body.get("background") is True or body.get("stream") is True
        size = len(request.scope[BODY])  # as `json_body` read it: what the service may offload by
        async with metering(request, hold=hold) as meter:
            # A stream keeps the watcher of its set-up (one per request, not two).
            outcome = await unless_disconnected(request, responses.create(
                tenant(request), body, directives, meter=meter, size=size),
                keep=_streamed)
    if outcome.stream is not None:
        return stream_response(outcome.stream, ping=state.streams.ping_interval,
                               send_timeout=state.streams.send_timeout, ticks=state.ticks,
                               headers=outcome.headers)
    return json_response(outcome.body, headers=outcome.headers)


def _streamed(outcome: Outcome) -> bool:
    return outcome.stream is not None


async def count_input_tokens(request: Request) -> Response:
    """Counted in `rpm` (a `/tokenize` on the fleet); it generates and stores nothing."""
    state = state_of(request)
    body = await json_body(request)
    size = len(await read_body(request))
    async with metering(request):
        counted = await state.responses.count_input_tokens(tenant(request), body,
                                                                      size=size)
    return json_response(counted)


async def compact(request: Request) -> Response:
    """`POST /v1/responses/compact`: a generation on the fleet, metered like a JSON create."""
    state = state_of(request)
    body = await json_body(request)
    async with metering(request) as meter:
        outcome = await unless_disconnected(
            request, state.responses.compact(tenant(request), body, meter=meter))
    return json_response(outcome.body, headers=outcome.headers)


def _flag(value: str | None, name: str) -> bool:
    if value is None or value.lower() in ("false", "0", ""):
        return False
    if value.lower() in ("true", "1"):
        return True
    raise bad(name, f"Invalid '{name}': expected true or false, got {value!r}.")


def _starting_after(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise bad("starting_after", f"Invalid 'starting_after': {value!r} is not an "
                                    "integer.") from None
    if number < -1:
        raise bad("starting_after", "Invalid 'starting_after': it must be 0 or more.")
    return number


def _check_include(request: Request) -> None:
    for value in request.query_params.getlist("include[]") + request.query_params.getlist(
            "include"):
        if value not in INCLUDABLE:
            raise bad("include", f"Cannot include {value!r}.")


async def retrieve(request: Request) -> Reply:
    state = state_of(request)
    response_id = path_id(request, "response_id")
    query = request.query_params
    _check_include(request)
    if _flag(query.get("stream"), "stream"):
        stream = await state.stored.replay(tenant(request), response_id,
                                             _starting_after(query.get("starting_after")))
        return stream_response(stream, ping=state.streams.ping_interval,
                               send_timeout=state.streams.send_timeout, ticks=state.ticks)
    return json_response(await state.stored.get(tenant(request), response_id))


async def delete(request: Request) -> Response:
    state = state_of(request)
    return json_response(await state.stored.delete(tenant(request),
                                                     path_id(request, "response_id")))


async def input_items(request: Request) -> Response:
    state = state_of(request)
    _check_include(request)
    page = parse_page(request.query_params)
    return json_response(await state.stored.input_items(
        tenant(request), path_id(request, "response_id"), page))


async def cancel(request: Request) -> Response:
    state = state_of(request)
    return json_response(await state.background.cancel(tenant(request),
                                                         path_id(request, "response_id")))


routes = [
    Route("/v1/responses", create, methods=["POST"]),
    Route("/v1/responses/input_tokens", count_input_tokens, methods=["POST"]),
    Route("/v1/responses/compact", compact, methods=["POST"]),
    Route("/v1/responses/{response_id}", retrieve, methods=["GET"]),
    Route("/v1/responses/{response_id}", delete, methods=["DELETE"]),
    Route("/v1/responses/{response_id}/input_items", input_items, methods=["GET"]),
    Route("/v1/responses/{response_id}/cancel", cancel, methods=["POST"]),
]
