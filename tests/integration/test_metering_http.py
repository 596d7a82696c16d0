"""Per-key metering through the app in-process (embedded store, the simulator): every way a
request can spend tokens is charged (services/metering/meter.py), every billable route counts in
`rpm`, and `service_tier: "priority"` is honoured only for keys granted it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from proxy.app import create_app
from proxy.core.policy.keysfile import parse_keys_file
from proxy.core.policy.tenancy import tenant_of
from proxy.settings import Settings
from proxy.store import keys
from tests.support.servers import ServerProcess

BUDGET = 100_000  # large: the tests read what was charged, nothing is refused
KEYS = parse_keys_file({"keys": [
    {"key": "sk-cache", "token_budget": BUDGET},
    {"key": "sk-string", "token_budget": BUDGET},
    {"key": "sk-compact", "token_budget": BUDGET},
    {"key": "sk-hit", "token_budget": BUDGET},
    {"key": "sk-tokens", "rpm": 1},
    {"key": "sk-compact-rpm", "rpm": 1},
    {"key": "sk-conv", "rpm": 1},
    {"key": "sk-items", "rpm": 2},
    {"key": "sk-x"},
    {"key": "sk-y"},
    {"key": "sk-vip", "priority": True},
]})


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture
async def app(simulator: ServerProcess) -> AsyncIterator[Starlette]:
    made = create_app(Settings.of(upstreams=(simulator.url,), keys_file=KEYS, cache_mode="exact",
                               max_inflight_per_replica=1))
    async with made.router.lifespan_context(made):
        yield made


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy",
                                 timeout=30) as client:
        yield client


async def charged(app: Starlette, key: str) -> int:
    """What the key's `token_budget` has counted so far."""
    used = await app.state.runtime.store.client.get(keys.limit_used(tenant_of(key)))
    return int(used or 0)


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "sim-model", "messages": [{"role": "user", "content": text}], **extra}


async def test_a_streamed_chat_through_the_exact_cache_is_charged(
        app: Starlette, http: httpx.AsyncClient) -> None:
    body = chat("cached stream [[sim tokens=20]]", stream=True)
    miss = await http.post("/v1/chat/completions", json=body, headers=auth("sk-cache"))
    assert miss.status_code == 200 and miss.headers["x-proxy-cache"] != "hit"
    assert b'"usage"' not in miss.content  # the usage chunk metering asked for is taken out
    first = await charged(app, "sk-cache")
    assert first >= 20
    # The same request again: served from the cache, charged the kept completion's usage.
    await asyncio.sleep(0.3)  # the cache keeps the entry off the request path
    hit = await http.post("/v1/chat/completions", json=body, headers=auth("sk-cache"))
    assert hit.headers["x-proxy-cache"] == "hit", hit.headers
    assert b'"usage"' not in hit.content
    assert await charged(app, "sk-cache") == 2 * first


async def test_a_json_cache_hit_is_charged(app: Starlette, http: httpx.AsyncClient) -> None:
    body = chat("cached json [[sim tokens=12]]")
    miss = await http.post("/v1/chat/completions", json=body, headers=auth("sk-hit"))
    used = miss.json()["usage"]["total_tokens"]
    await asyncio.sleep(0.3)
    hit = await http.post("/v1/chat/completions", json=body, headers=auth("sk-hit"))
    assert hit.headers["x-proxy-cache"] == "hit"
    assert await charged(app, "sk-hit") == 2 * used


@pytest.mark.parametrize("value", ["true", "YES", 1])
async def test_stream_given_as_vllm_reads_it_is_a_stream_and_is_charged(
        app: Starlette, http: httpx.AsyncClient, value: Any) -> None:
    before = await charged(app, "sk-string")
    response = await http.post("/v1/chat/completions", headers={
        **auth("sk-string"), "cache-control": "no-store"},
        json=chat(f"string stream {value} [[sim tokens=15]]", stream=value))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content.endswith(b"data: [DONE]\n\n")
    assert await charged(app, "sk-string") - before >= 15


@pytest.mark.parametrize("value", ["maybe", 2, [], {}])
async def test_stream_that_vllm_would_refuse_is_a_400_naming_it(
        http: httpx.AsyncClient, value: Any) -> None:
    response = await http.post("/v1/chat/completions", json=chat("x", stream=value),
                               headers=auth("sk-string"))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "stream"


async def test_an_automatic_compaction_charges_its_summarisation_turn(
        app: Starlette, http: httpx.AsyncClient) -> None:
    history = [{"role": "user", "content": "a first turn about otters " * 20},
               {"role": "assistant", "content": "an answer about otters " * 20},
               {"role": "user", "content": "next question"}]
    made = await http.post("/v1/responses", headers=auth("sk-compact"), json={
        "model": "sim-model", "input": history, "store": False,
        "context_management": [{"type": "compaction", "compact_threshold": 5}]})
    assert made.status_code == 200, made.text
    response = made.json()
    assert [i["type"] for i in response["output"]] == ["compaction", "message"]
    # The response's usage is this turn's; the summarisation of the older turns (which read
    # them all: more than this turn's own prompt) is charged on top.
    own = response["usage"]["total_tokens"]
    assert await charged(app, "sk-compact") > own + response["usage"]["input_tokens"] // 2


@pytest.mark.parametrize(("key", "path", "body"), [
    ("sk-tokens", "/v1/responses/input_tokens", {"model": "sim-model", "input": "count"}),
    ("sk-compact-rpm", "/v1/responses/compact", {"model": "sim-model", "input": "squash"}),
    ("sk-conv", "/v1/conversations", {}),
])
async def test_a_one_rpm_key_is_refused_its_second_call(
        http: httpx.AsyncClient, key: str, path: str, body: dict[str, Any]) -> None:
    if 60 - time.time() % 60 < 3:
        await asyncio.sleep(3.2)  # both calls in one minute
    first = await http.post(path, json=body, headers=auth(key))
    assert first.status_code == 200, first.text
    second = await http.post(path, json=body, headers=auth(key))
    assert second.status_code == 429, second.text
    assert second.json()["error"]["code"] == "rate_limit_exceeded"


async def test_adding_conversation_items_counts_in_rpm(http: httpx.AsyncClient) -> None:
    if 60 - time.time() % 60 < 3:
        await asyncio.sleep(3.2)
    made = await http.post("/v1/conversations", json={}, headers=auth("sk-items"))
    assert made.status_code == 200
    items = {"items": [{"type": "message", "role": "user", "content": "stored"}]}
    path = f"/v1/conversations/{made.json()['id']}/items"
    assert (await http.post(path, json=items, headers=auth("sk-items"))).status_code == 200
    assert (await http.post(path, json=items, headers=auth("sk-items"))).status_code == 429


async def _queue_behind_one_request(http: httpx.AsyncClient, burst: list[tuple[str, str]]
                                    ) -> list[str]:
    """One slow request takes the replica's only slot; `burst` (key, service tier) queues up
    behind it, in that order. The order in which the burst finished."""
    done: list[str] = []

    async def one(name: str, key: str, tier: str, tokens: int = 5) -> None:
        response = await http.post("/v1/responses", headers=auth(key), json={
            "model": "sim-model", "input": f"{name} [[sim tokens={tokens} delay_ms=20]]",
            "service_tier": tier, "store": False})
        assert response.status_code == 200, response.text
        expected = "priority" if tier == "priority" and key == "sk-vip" else "default"
        assert response.json()["service_tier"] == expected
        done.append(name)

    # Long enough for the whole burst to be queued before it ends (2 s against the burst's
    # ~0.15 s: a 0.5 s blocker ended before a loaded machine had queued the burst).
    blocker = asyncio.create_task(one("blocker", "sk-x", "default", 100))
    await asyncio.sleep(0.05)
    tasks = []
    for n, (key, tier) in enumerate(burst):
        tasks.append(asyncio.create_task(one(f"{key}-{n}", key, tier)))
        await asyncio.sleep(0.02)  # queued in this order
    await asyncio.gather(blocker, *tasks)
    return done[1:]


async def test_priority_from_a_key_not_granted_it_waits_its_turn(
        http: httpx.AsyncClient) -> None:
    order = await _queue_behind_one_request(
        http, [("sk-x", "priority")] * 4 + [("sk-y", "default")])
    # Round robin between keys: y goes right after x's first, not after all of x's.
    assert order.index("sk-y-4") == 1, order


async def test_priority_from_a_key_granted_it_goes_first(http: httpx.AsyncClient) -> None:
    order = await _queue_behind_one_request(
        http, [("sk-x", "default")] * 3 + [("sk-vip", "priority")])
    assert order[0] == "sk-vip-3", order
