"""The web layer is served alone, over a `WebState` of fakes (one such test per room:
test_built_alone_core.py, _store, _services, _web). A route module's `routes` mounted on a bare
Starlette app with the proxy's error handlers, the state set with `attach` as the lifespan sets
it (web/state.py): no runtime, store or fleet. Every part of the state a test does not hand in
is `Unread`, which fails the test if the route touches it, so each test also shows which parts
its route reads."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import httpx
from openai.types.responses import Response
from starlette.applications import Starlette
from starlette.datastructures import State as StarletteState

from proxy.core.errors import StoreUnavailable
from proxy.services.process.drain import Drain
from proxy.settings import StreamSettings, TenancySettings
from proxy.web.errors import EXCEPTION_HANDLERS
from proxy.web.middleware.auth import PUBLIC_TENANT
from proxy.web.routes import health
from proxy.web.routes import responses as routes_responses
from proxy.web.state import WebState, attach, state_of
from tests.support.assembly import base_response


class Unread:
    """A part of the state the route under test must not touch."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        raise AssertionError(f"the route read `{self._name}.{attribute}`")

    def __bool__(self) -> bool:
        raise AssertionError(f"the route read `{self._name}`")


def state_with(**parts: Any) -> WebState:
    unread = {field.name: Unread(field.name) for field in dataclasses.fields(WebState)}
    return WebState(**(unread | parts))


@dataclasses.dataclass
class FakeFleet:
    up: bool = True

    def ready(self) -> bool:
        return self.up

    def status(self) -> list[dict[str, Any]]:
        return [{"name": "replica-1", "healthy": self.up}]


class DownStore:
    async def ping(self) -> None:
        raise StoreUnavailable("The store is not answering.")


class NoFailingLoops:
    def failing(self) -> list[str]:
        return []


class FakeStored:
    def __init__(self, response: dict[str, Any]) -> None:
        self.response = response
        self.asked: list[tuple[str, str]] = []

    async def get(self, tenant: str, response_id: str) -> dict[str, Any]:
        self.asked.append((tenant, response_id))
        return self.response

    async def replay(self, tenant: str, response_id: str,
                     after: int | None) -> AsyncIterator[list[tuple[str, bytes]]]:
        raise AssertionError("not a replay")


def client_for(routes: list[Any], state: WebState) -> httpx.AsyncClient:
    app = Starlette(routes=routes, exception_handlers=EXCEPTION_HANDLERS)
    attach(app, state)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy")


async def test_readyz_is_served_over_a_fake_fleet_and_store() -> None:
    state = state_with(fleet=FakeFleet(), store=DownStore(), draining=Drain(),
                       supervisor=NoFailingLoops(), tenancy=TenancySettings())
    async with client_for(health.routes, state) as http:
        answer = await http.get("/readyz")
    assert answer.status_code == 503
    assert answer.json() == {"status": "not ready", "reasons": ["store"]}  # no key: no detail


async def test_a_stored_response_is_served_from_a_fake_service() -> None:
    body = base_response() | {"status": "completed", "output": []}
    stored = FakeStored(body)
    state = state_with(stored=stored, streams=StreamSettings())
    async with client_for(routes_responses.routes, state) as http:
        answer = await http.get("/v1/responses/resp_1")
    assert answer.status_code == 200
    Response.model_validate(answer.json(), strict=True)
    assert stored.asked == [(PUBLIC_TENANT, "resp_1")]


def test_the_state_is_found_without_starlettes_fallback_lookup(monkeypatch: Any) -> None:
    """`attach` makes the state an attribute the normal lookup finds: Starlette's `State`
    answers a missing attribute from its `__getattr__`, which Python calls only after making an
    AttributeError (twice a request, on the hot path, before this)."""
    app = Starlette()
    state = state_with()
    attach(app, state)

    def fallback(self: Any, key: str) -> Any:
        raise AssertionError(f"State.__getattr__ consulted for {key!r}")

    monkeypatch.setattr(StarletteState, "__getattr__", fallback)
    assert app.state.web is state
    assert state_of(cast(Any, SimpleNamespace(app=app))) is state
    assert app.state._state["web"] is state  # still where Starlette's own readers look
