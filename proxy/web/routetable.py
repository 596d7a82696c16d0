"""`RouteTable`: Starlette's router, with the routes a fixed path can reach found once.

Starlette tries every route in order for every request (a regex match and a method check each)
until one matches in full; a path that matches only with another method (a 405) is known only
after all of them. `POST /v1/responses` came sixth of 57, a 405 or a 404 after all 57. Here the
routes whose pattern matches each fixed path the app declares (`/v1/responses`, `/healthz`,
...) are listed when the table is made, in their order, and a request for one of those paths
tries only them: the same first full match, the same first partial one, as a whole scan (the
routes left out cannot match that path). Any other path (one with an id, an unknown one) and
every WebSocket take Starlette's own scan, as before.

Made from the app's routes once: routes added afterwards would not be indexed (the app adds
none).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette._utils import get_route_path
from starlette.routing import BaseRoute, Match, Route, Router, WebSocketRoute
from starlette.types import Receive, Scope, Send


class RouteTable(Router):
    def __init__(self, routes: Sequence[BaseRoute], **options: Any) -> None:
        super().__init__(routes, **options)
        fixed = [r.path for r in self.routes if isinstance(r, Route) and not r.param_convertors]
        self._by_path = {path: [r for r in self.routes if _may_match(r, path)]
                         for path in fixed}

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        candidates = (self._by_path.get(get_route_path(scope)) if scope["type"] == "http"
                      else None)
        if candidates is None:
            await super().app(scope, receive, send)
            return
        scope.setdefault("router", self)
        partial: tuple[BaseRoute, Scope] | None = None
        for route in candidates:
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                scope["route"] = route
                scope.update(child_scope)
                await route.handle(scope, receive, send)
                return
            if match is Match.PARTIAL and partial is None:
                partial = route, child_scope
        if partial is None:  # not even a partial match (cannot happen: the path is a route's)
            await super().app(scope, receive, send)
            return
        route, child_scope = partial
        scope["route"] = route
        scope.update(child_scope)
        await route.handle(scope, receive, send)


def _may_match(route: BaseRoute, path: str) -> bool:
    """`route` could answer an HTTP request for `path`: a route whose pattern matches it, or
    any kind of route other than a plain one (a mount: kept, in its place, to be safe)."""
    if isinstance(route, Route):
        return route.path_regex.match(path) is not None
    return not isinstance(route, WebSocketRoute)
