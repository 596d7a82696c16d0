"""A stored foreground response's lease is taken by its create (no round trip of its own): the
in-process app on the session's real redis-server (leases exist only on a shared store), the
simulator upstream.

The lease is held as soon as the create has returned, with no lease call of its own; it is
dropped once the end is stored; a create that fails fails the request as before and leaves no
lease; background and unstored responses take none."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import orjson
import pytest

from proxy.core.errors import StoreUnavailable
from proxy.runtime import Runtime
from proxy.settings import Settings
from proxy.store.leases import LeaseState, LeaseTable
from tests.support.inprocess import app_for, until
from tests.support.servers import ServerProcess

ASK = {"model": "sim-model", "input": "hello there [[sim tokens=8]]"}


@pytest.fixture
async def app(simulator: ServerProcess, redis_server: ServerProcess
              ) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    # A short lease, so that the renewal that drops an ended turn's lease comes soon.
    settings = Settings.of(upstreams=(simulator.url,),
                        redis_url=f"redis://127.0.0.1:{redis_server.port}/0", lease_ttl=1.5)
    async with app_for(settings) as (client, runtime):
        yield client, runtime


class Creates:
    """`create_response` wrapped: what each create asked for, and its lease's state the moment
    the create returned (before anything else of the request could take it)."""

    def __init__(self, runtime: Runtime, *, fail: bool = False) -> None:
        self.table = LeaseTable(runtime.store.client)
        self.lease_ms: list[int | None] = []
        self.ids: list[str] = []
        self.leases_after: list[LeaseState] = []
        real: Callable[..., Awaitable[None]] = runtime.store.create_response

        async def create(record: Any, *args: Any, **kwargs: Any) -> None:
            self.lease_ms.append(kwargs.get("lease_ms"))
            self.ids.append(record.id)
            if fail:
                raise StoreUnavailable("injected")
            await real(record, *args, **kwargs)
            self.leases_after.append(await self.table.state(record.id))

        self.create = create


def lease_calls(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every `LeaseTable.renew` the app's leases make, by keyword."""
    assert runtime.process.leases is not None
    table = runtime.process.leases._table
    calls: list[dict[str, Any]] = []
    real = table.renew

    async def renew(**kwargs: Any) -> list[str]:
        calls.append(kwargs)
        return await real(**kwargs)

    monkeypatch.setattr(table, "renew", renew)
    return calls


def sse_events(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in body.splitlines() if line.startswith(b"data: ")]


@pytest.mark.parametrize("stream", [True, False])
async def test_the_create_takes_the_lease_and_the_stored_end_drops_it(
        app: tuple[httpx.AsyncClient, Runtime], monkeypatch: pytest.MonkeyPatch,
        stream: bool) -> None:
    client, runtime = app
    creates = Creates(runtime)
    monkeypatch.setattr(runtime.store, "create_response", creates.create)
    renewals = lease_calls(runtime, monkeypatch)
    made = await client.post("/v1/responses", json={**ASK, "stream": stream})
    assert made.status_code == 200, made.text
    final = sse_events(made.content)[-1]["response"] if stream else made.json()
    assert final["status"] == "completed"
    assert runtime.process.leases is not None
    assert creates.lease_ms == [runtime.process.leases.ttl_ms]
    assert creates.leases_after == [LeaseState.HELD]
    # No round trip of its own took it: no renewal ever asked for a new lease.
    assert not [call for call in renewals if call.get("new")]
    # Its end is stored: the next renewal drops it.
    stored = await client.get(f"/v1/responses/{final['id']}")
    assert stored.json()["status"] == "completed"

    async def dropped() -> bool:
        return await creates.table.state(final["id"]) is LeaseState.ABSENT

    await until(dropped)
    assert any(final["id"] in call.get("dropped", ()) for call in renewals)


async def test_a_failed_create_fails_the_request_and_leaves_no_lease(
        app: tuple[httpx.AsyncClient, Runtime], monkeypatch: pytest.MonkeyPatch) -> None:
    client, runtime = app
    creates = Creates(runtime, fail=True)
    monkeypatch.setattr(runtime.store, "create_response", creates.create)
    made = await client.post("/v1/responses", json={**ASK, "stream": True})
    assert made.status_code == 503, made.text
    assert made.json()["error"]["type"]
    assert creates.lease_ms and creates.lease_ms[0] is not None
    assert runtime.process.leases is not None and not runtime.process.leases._held
    assert await creates.table.state(creates.ids[0]) is LeaseState.ABSENT


async def test_background_and_unstored_responses_take_no_lease(
        app: tuple[httpx.AsyncClient, Runtime], monkeypatch: pytest.MonkeyPatch) -> None:
    client, runtime = app
    creates = Creates(runtime)
    monkeypatch.setattr(runtime.store, "create_response", creates.create)
    renewals = lease_calls(runtime, monkeypatch)
    unstored = await client.post("/v1/responses", json={**ASK, "store": False})
    assert unstored.status_code == 200, unstored.text
    assert creates.lease_ms == []  # nothing stored at all
    queued = await client.post("/v1/responses", json={**ASK, "background": True})
    assert queued.status_code == 200, queued.text
    assert creates.lease_ms == [None]
    assert creates.leases_after == [LeaseState.ABSENT]
    assert not [call for call in renewals if call.get("new")]
