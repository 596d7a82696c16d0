"""web/routetable.py: a fixed path tries only the routes that can match it, and every request
ends at the route Starlette's full scan would have chosen."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, Router

from proxy.app import create_app
from proxy.settings import Settings
from proxy.web.routetable import RouteTable

ROUTED = "proxy.test_routed"  # where a recording endpoint notes the route it was given


@pytest.fixture
def app_routes() -> tuple[Any, Router]:
    """A route table over the app's routes, and a plain Starlette router over the same ones;
    each endpoint only notes that its route was chosen (answering 204)."""
    app = create_app(Settings.of(upstreams=("http://127.0.0.1:9",)))
    routes = [_recording(route) for route in app.router.routes]
    return RouteTable(routes), Router(routes)


def _recording(route: BaseRoute) -> BaseRoute:
    if not isinstance(route, Route):
        return route
    key = (route.path, frozenset(route.methods or ()))

    async def endpoint(request: Request) -> Response:
        request.scope[ROUTED] = key
        return Response(status_code=204)

    return Route(route.path, endpoint, methods=list(route.methods or ()), name=route.name)


def _scope(method: str, path: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "root_path": "", "headers": [],
            "query_string": b""}


async def _chosen(router: Any, method: str, path: str) -> Any:
    scope = _scope(method, path)
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    await router(scope, receive, send)
    return scope.get(ROUTED), scope.get("path_params"), sent[0]["status"] if sent else None


async def test_every_request_ends_where_the_full_scan_would_end_it(
        app_routes: tuple[Any, Router]) -> None:
    table, plain = app_routes
    fixed = [r.path for r in plain.routes if isinstance(r, Route) and not r.param_convertors]
    paths = [*fixed, "/v1/responses/resp_1", "/v1/responses/input_tokens", "/nowhere",
             "/v1/responses/", "/v1/conversations/conv_1/items"]
    for path in paths:
        for method in ("GET", "POST", "DELETE", "PUT"):
            assert await _chosen(table, method, path) == await _chosen(plain, method, path), \
                (method, path)


async def test_a_fixed_path_tries_only_the_routes_that_can_match_it(
        app_routes: tuple[Any, Router], monkeypatch: pytest.MonkeyPatch) -> None:
    table, _ = app_routes
    tried: list[str] = []
    matches = Route.matches

    def counted(self: Route, scope: Any) -> Any:
        tried.append(self.path)
        return matches(self, scope)

    monkeypatch.setattr(Route, "matches", counted)
    # The route declaring the path itself is matched without its regex (it was tried by
    # `Route.matches`: ["/v1/responses"]); a full scan tried the five routes before it.
    assert (await _chosen(table, "POST", "/v1/responses"))[0] == \
        ("/v1/responses", frozenset({"POST"}))
    assert tried == []
    assert (await _chosen(table, "GET", "/v1/responses"))[2] == 405  # a 405 scanned all 57
    assert tried == []
    await _chosen(table, "POST", "/v1/responses/input_tokens")  # its own: no regex either
    assert tried == []
    await _chosen(table, "GET", "/v1/responses/resp_1")  # a path with an id: scanned
    assert "/v1/responses/{response_id}" in tried


async def test_an_endpoint_is_called_by_the_table_itself() -> None:
    """No wrapper of Starlette's between the table and an endpoint (two ASGI apps and an
    exception-handling one, a frame each per request and a `send` wrapper per message): a
    fixed path's and a scanned path's endpoint both run straight from the table, and their
    answers reach the table's `send` as the response sent them."""
    callers: list[str] = []

    async def endpoint(request: Request) -> Response:
        caller = sys._getframe(1)
        callers.append(caller.f_code.co_qualname)
        return Response(b"ok", status_code=200)

    table = RouteTable([Route("/x", endpoint, methods=["GET"]),
                        Route("/x/{id}", endpoint, methods=["GET"])])
    for path in ("/x", "/x/1"):
        assert (await _chosen(table, "GET", path))[2] == 200
    assert callers == ["RouteTable.__call__", "RouteTable.__call__"]


async def test_a_method_the_route_does_not_take_is_its_own_405() -> None:
    async def endpoint(request: Request) -> Response:
        raise AssertionError("not called")

    table = RouteTable([Route("/x", endpoint, methods=["GET"])])
    assert (await _chosen(table, "POST", "/x"))[2] == 405
    assert (await _chosen(table, "GET", "/nowhere"))[2] == 404
