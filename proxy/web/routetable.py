"""`RouteTable`: Starlette's router, with the routes a fixed path can reach found once and each
endpoint called directly.

Starlette tries every route in order for every request (a regex match and a method check each)
until one matches in full; a path that matches only with another method (a 405) is known only
after all of them. `POST /v1/responses` came sixth of 57, a 405 or a 404 after all 57. Here the
routes whose pattern matches each fixed path the app declares (`/v1/responses`, `/healthz`,
...) are listed when the table is made, in their order, and a request for one of those paths
tries only them: the same first full match, the same first partial one, as a whole scan (the
routes left out cannot match that path); the route declaring that very path is matched without
its regex. Any other path (one with an id) is scanned as Starlette scans it; a path no route
matches (a 404, a slash to redirect), every WebSocket and the lifespan go to Starlette's own
router.

An endpoint is called directly: Starlette wraps each one in two ASGI apps, an
exception-handling wrapper and a `send` that notes whether the response started (with the
router's own `__call__` and the route's `handle`, six frames per request and one call per
message out); here the table makes the `Request`, awaits the endpoint and sends its response,
and the exceptions are mapped once, in the front middleware (web/middleware/front.py, with
web/errors.py `ErrorAnswers`). A method the route does not take goes to the route's own
`handle` (its 405), as does an endpoint Starlette wraps otherwise (a sync one, a class).

Made from the app's routes once: routes added afterwards would not be indexed (the app adds
none).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route, Router, WebSocketRoute
from starlette.types import Receive, Scope, Send

Endpoint = Callable[[Request], Awaitable[Response]]
# What `Route.matches` answers: how the route matches, and the scope it adds.
Matcher = Callable[[Scope], tuple[Match, Scope]]
# A route, its endpoint when the table may call it directly, and for a fixed path whose own
# route it is, that route's match made without its regex (else None: `route.matches`).
_Entry = tuple[BaseRoute, Endpoint | None, Matcher | None]


class RouteTable(Router):
    def __init__(self, routes: Sequence[BaseRoute], **options: Any) -> None:
        super().__init__(routes, **options)
        self._scan: list[_Entry] = [(route, _endpoint(route), None) for route in self.routes
                                    if not isinstance(route, WebSocketRoute)]
        fixed = [r.path for r in self.routes if isinstance(r, Route) and not r.param_convertors]
        self._by_path = {path: [(route, endpoint, _exact(route, path))
                                for route, endpoint, _ in self._scan if _may_match(route, path)]
                         for path in fixed}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        found = self._find(scope)
        if found is None:  # Starlette's answer: a slash redirected, or a 404
            await self.app(scope, receive, send)
            return
        route, endpoint, child_scope = found
        scope.setdefault("router", self)
        scope["route"] = route
        scope.update(child_scope)
        if endpoint is None or scope["method"] not in route.methods:  # type: ignore[attr-defined]
            await route.handle(scope, receive, send)
            return
        response = await endpoint(Request(scope, receive, send))
        await response(scope, receive, send)

    def _find(self, scope: Scope) -> tuple[BaseRoute, Endpoint | None, Scope] | None:
        """The first route matching in full, else the first matching in part, else None."""
        partial: tuple[BaseRoute, Endpoint | None, Scope] | None = None
        for route, endpoint, exact in self._by_path.get(get_route_path(scope), self._scan):
            match, child_scope = route.matches(scope) if exact is None else exact(scope)
            if match is Match.FULL:
                return route, endpoint, child_scope
            if match is Match.PARTIAL and partial is None:
                partial = route, endpoint, child_scope
        return partial


def _endpoint(route: BaseRoute) -> Endpoint | None:
    """`route`'s endpoint when Starlette wraps it as it wraps every coroutine function (then it
    only makes the `Request` and sends the response): the table calls it directly."""
    if (isinstance(route, Route) and route.methods and inspect.iscoroutinefunction(route.endpoint)
            and getattr(route.app, "__qualname__", "") == "request_response.<locals>.app"):
        endpoint: Endpoint = route.endpoint
        return endpoint
    return None


def _exact(route: BaseRoute, path: str) -> Matcher | None:
    """For a plain route whose path is `path` itself (no parameters), `Route.matches`' answer
    for a request of that path, made without the regex (`_find` 1.7 -> 1.1 µs): the route's
    endpoint, the scope's path parameters copied, in part when the method is not one of the
    route's."""
    if not isinstance(route, Route) or route.param_convertors or route.path != path:
        return None
    endpoint, methods = route.endpoint, route.methods

    def matches(scope: Scope) -> tuple[Match, Scope]:
        child_scope = {"endpoint": endpoint, "path_params": dict(scope.get("path_params", {}))}
        if methods and scope["method"] not in methods:
            return Match.PARTIAL, child_scope
        return Match.FULL, child_scope

    return matches


def _may_match(route: BaseRoute, path: str) -> bool:
    """`route` could answer an HTTP request for `path`: a route whose pattern matches it, or
    any kind of route other than a plain one (a mount: kept, in its place, to be safe)."""
    if isinstance(route, Route):
        return route.path_regex.match(path) is not None
    return True
