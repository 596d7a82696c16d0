"""The store room's pieces are built alone, with fakes for what they are handed (one such test
per room: test_built_alone_core.py, _store, _services, _web). `RedisStore` takes its client
and the per-key storage budget: here a fakeredis client of the test's own and a budget table
written in the test, and no factory, URL or settings."""

from __future__ import annotations

import fakeredis
import pytest

from proxy.core.errors import QuotaExceeded
from proxy.core.policy.storagebudget import StorageBudget
from proxy.store.base import ResponseRecord
from proxy.store.redis import RedisStore

ROOMY, TIGHT = "tenant-roomy", "tenant-tight"


def response(response_id: str) -> dict[str, object]:
    return {"id": response_id, "object": "response", "status": "completed", "output": []}


async def test_the_response_store_runs_on_a_fake_client_and_a_given_budget() -> None:
    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(version=(7, 0)))
    store = RedisStore(client, embedded=True, budget=StorageBudget(0, {TIGHT: 64}))
    item = {"type": "message", "role": "user", "content": "x" * 200}

    for tenant, response_id in [(ROOMY, "resp_a"), (ROOMY, "resp_b"), (TIGHT, "resp_c")]:
        await store.create_response(ResponseRecord(response(response_id), tenant), [item],
                                    ttl=60, event_ttl=60)
    # The tight key now holds more than the 64 bytes the test gave it: its next create is
    # refused, the other key's is not (no default budget of the settings applies).
    with pytest.raises(QuotaExceeded):
        await store.create_response(ResponseRecord(response("resp_d"), TIGHT), [item],
                                    ttl=60, event_ttl=60)
    await store.create_response(ResponseRecord(response("resp_e"), ROOMY), [item],
                                ttl=60, event_ttl=60)

    kept = await store.get_response(ROOMY, "resp_e")
    assert kept is not None and kept.response["id"] == "resp_e"
    assert await store.get_response(TIGHT, "resp_d") is None
    assert await client.exists(*await client.keys("*")) > 0  # written through the given client
    await client.aclose()
