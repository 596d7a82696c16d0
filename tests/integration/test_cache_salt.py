"""Every upstream chat request carries the key's `cache_salt` (core/policy/tenancy.py), read where
it arrives: the simulator's last chat request. One key: one salt on every path (create, stream,
background job, compaction's summary, chat pass-through, chat through the cache); two keys: two
salts; a keys-file `cache_group`: one salt for its keys; a client's own salt never makes a
request land on another key's salt."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.core.policy.keysfile import parse_keys_file
from proxy.core.policy.tenancy import CacheSalts, tenant_of
from proxy.runtime import Runtime
from proxy.settings import Settings
from tests.conftest import SimControl
from tests.support.inprocess import app_for, until
from tests.support.servers import start_mcp_server

KEYS = parse_keys_file({"keys": [
    {"key": "sk-a", "name": "a"}, {"key": "sk-b", "name": "b"},
    {"key": "sk-g1", "name": "g1", "cache_group": "team"},
    {"key": "sk-g2", "name": "g2", "cache_group": "team"}]})
CREATE = {"model": "sim-model", "input": "Say hello."}
CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "Say hello."}]}
Client = tuple[httpx.AsyncClient, Runtime]


@pytest.fixture(params=["off", "exact"])
async def proxy(request: pytest.FixtureRequest, sim: SimControl) -> AsyncIterator[Client]:
    async with app_for(Settings.of(upstreams=(sim.url,), keys_file=KEYS,
                                cache_mode=request.param)) as client:
        yield client


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def upstream_salt(sim: SimControl) -> Any:
    return sim.stats()["last_request"].get("cache_salt")


async def salt_of_create(http: httpx.AsyncClient, sim: SimControl, key: str,
                         **extra: Any) -> Any:
    reply = await http.post("/v1/responses", json={**CREATE, **extra}, headers=auth(key))
    assert reply.status_code == 200, reply.text
    return upstream_salt(sim)


async def salt_of_chat(http: httpx.AsyncClient, sim: SimControl, key: str,
                       **extra: Any) -> Any:
    body = {**CHAT, **extra}
    body["messages"] = [{"role": "user", "content": f"Say hello {len(extra)} {key}."}]
    reply = await http.post("/v1/chat/completions", json=body, headers=auth(key))
    assert reply.status_code == 200, reply.text
    return upstream_salt(sim)


async def test_one_key_one_salt_two_keys_two_salts(proxy: Client, sim: SimControl) -> None:
    http, _ = proxy
    salt_a = await salt_of_create(http, sim, "sk-a")
    salt_b = await salt_of_create(http, sim, "sk-b")
    assert isinstance(salt_a, str) and isinstance(salt_b, str) and salt_a != salt_b
    assert salt_a == CacheSalts().salt(tenant_of("sk-a"))
    assert await salt_of_create(http, sim, "sk-a", stream=True, input="Again.") == salt_a
    assert await salt_of_chat(http, sim, "sk-a") == salt_a
    assert await salt_of_chat(http, sim, "sk-b", stream=True) == salt_b


async def test_a_cache_group_shares_one_salt(proxy: Client, sim: SimControl) -> None:
    http, _ = proxy
    group = await salt_of_create(http, sim, "sk-g1")
    assert await salt_of_chat(http, sim, "sk-g2") == group
    assert group not in (await salt_of_create(http, sim, "sk-a"),
                         CacheSalts().salt(tenant_of("sk-g1")))


async def test_a_client_salt_cannot_reach_another_keys_partition(proxy: Client,
                                                                 sim: SimControl) -> None:
    http, _ = proxy
    victim = await salt_of_create(http, sim, "sk-a")
    own = await salt_of_chat(http, sim, "sk-b")
    forged = await salt_of_chat(http, sim, "sk-b", cache_salt=victim)
    assert forged not in (victim, own)
    reply = await http.post("/v1/chat/completions", json={**CHAT, "cache_salt": 7},
                            headers=auth("sk-b"))
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "cache_salt"
    # The Responses API has no such field: a create's `cache_salt` is not the upstream's.
    assert await salt_of_create(http, sim, "sk-b", cache_salt=victim,
                                input="Forged.") == own


async def test_background_jobs_and_compaction_summaries_are_salted(proxy: Client,
                                                                   sim: SimControl) -> None:
    http, _ = proxy
    salt_a = await salt_of_create(http, sim, "sk-a")
    assert isinstance(salt_a, str)
    sim.reset()
    reply = await http.post("/v1/responses", json={**CREATE, "background": True},
                            headers=auth("sk-a"))
    assert reply.status_code == 200, reply.text
    await until(lambda: _chat_seen(sim))
    assert upstream_salt(sim) == salt_a
    reply = await http.post("/v1/responses/compact", headers=auth("sk-a"), json={
        "model": "sim-model", "input": [
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "second question"}]})
    assert reply.status_code == 200, reply.text
    assert upstream_salt(sim) == salt_a


async def _chat_seen(sim: SimControl) -> bool:
    return bool(sim.stats()["chat_requests"])


async def test_tool_loop_turns_are_salted(sim: SimControl) -> None:
    mcp = start_mcp_server()
    try:
        settings = Settings.of(upstreams=(sim.url,), keys_file=KEYS, mcp_allow=(mcp.url,))
        async with app_for(settings) as (http, _):
            reply = await http.post("/v1/responses", headers=auth("sk-a"), json={
                "model": "sim-model", "input": 'add [[sim call=add call_args={"a":2,"b":3}]]',
                "tools": [{"type": "mcp", "server_label": "calc", "require_approval": "never",
                           "server_url": f"{mcp.url}/mcp"}]})
            assert reply.status_code == 200, reply.text
            assert reply.json()["status"] == "completed"
    finally:
        mcp.stop()
    last = sim.stats()["last_request"]
    assert last["messages"][-1]["role"] == "tool"  # the loop's second turn
    assert last["cache_salt"] == CacheSalts().salt(tenant_of("sk-a"))
