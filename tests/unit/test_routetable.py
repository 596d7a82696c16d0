"""web/routetable.py: a fixed path tries only the routes that can match it, and every request
ends at the route Starlette's full scan would have chosen."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.routing import Route, Router

from proxy.app import create_app
from proxy.settings import Settings

ROUTED = "proxy.test_routed"  # where the recording `handle` notes the route it was given


@pytest.fixture
def app_routes(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Router]:
    """The app's route table, and a plain Starlette router over the same routes; each route's
    `handle` only notes that it was chosen (no handler runs)."""

    async def handle(self: Route, scope: Any, receive: Any, send: Any) -> None:
        scope[ROUTED] = self

    monkeypatch.setattr(Route, "handle", handle)
    app = create_app(Settings.of(upstreams=("http://127.0.0.1:9",)))
    return app.router, Router(app.router.routes)


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
    await _chosen(table, "POST", "/v1/responses")
    assert tried == ["/v1/responses"]  # a full scan tried the five routes before it
    tried.clear()
    await _chosen(table, "GET", "/v1/responses")  # a 405 scanned all 57
    assert tried == ["/v1/responses"]
